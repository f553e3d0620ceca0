// tg::data: datasets, the DataLoader (batching, shuffling, prefetch, errors from its thread,
// samplers) and the Fashion-MNIST / IDX datasets on the committed subset.
#include <omp.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;
using data::DataLoader;
using data::DataLoaderOptions;

// N samples: x[i] = {i, i + 0.5} (float32 [2]), y[i] = i (int64 []): a batch says which samples
// it holds.
data::TensorDataset numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(i) + 0.5f);
    y.push_back(i);
  }
  return data::TensorDataset({from_vector(x, {n, 2}), from_vector(y, {n})});
}

// The labels of every batch of one pass, batch by batch.
std::vector<std::vector<int64_t>> pass_labels(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const std::vector<Tensor>& batch : loader) out.push_back(batch[1].to_vector<int64_t>());
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

TEST(TensorDataset, SampleIsEachTensorsRow) {
  data::TensorDataset ds = numbered(5);
  EXPECT_EQ(ds.size(), 5);
  std::vector<Tensor> s = ds.get(3);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].shape(), (Shape{2}));
  EXPECT_EQ(s[0].to_vector<float>(), (std::vector<float>{3.0f, 3.5f}));
  EXPECT_EQ(s[1].dim(), 0);
  EXPECT_EQ(s[1].item<int64_t>(), 3);
}

TEST(TensorDataset, ErrorsNameTheTensorAndSizes) {
  expect_error_with([] { data::TensorDataset({zeros({4, 2}), zeros({3})}); },
                    {"TensorDataset", "tensor 1", "[3]", "tensor 0", "[4, 2]"});
  expect_error_with([] { data::TensorDataset({zeros({4}), scalar_tensor(1)}); }, {"TensorDataset", "tensor 1", "0-dim"});
  expect_error_with([] { data::TensorDataset(std::vector<Tensor>{}); }, {"TensorDataset", "at least one"});
  expect_error_with([] { numbered(4).get(4); }, {"TensorDataset::get", "index 4", "4 samples"});
  expect_error_with([] { numbered(4).get(-1); }, {"TensorDataset::get", "index -1"});
}

TEST(TensorDataset, GetBatchIsTheDefaultCollateOfItsSamples) {
  // A contiguous float32 tensor, a transposed (non-contiguous) float64 one, int64 labels, a
  // bfloat16 one and one with an empty row: the gathered batch equals stacking get(i), bit for bit.
  Tensor x = randn({6, 2, 3});
  Tensor t = randn({4, 6}, DType::Float64).transpose(0, 1);
  Tensor y = from_vector(std::vector<int64_t>{5, 4, 3, 2, 1, 0}, {6});
  Tensor h = randn({6, 5}).to(DType::BFloat16);
  data::TensorDataset ds({x, t, y, h, zeros({6, 0})});
  const std::vector<int64_t> indices = {4, 0, 4, 5};
  std::vector<std::vector<Tensor>> samples;
  for (int64_t i : indices) samples.push_back(ds.get(i));
  const std::vector<Tensor> stacked = data::default_collate(samples), gathered = ds.get_batch(indices);
  ASSERT_EQ(gathered.size(), 5u);
  for (size_t k = 0; k < 5; ++k) expect_identical(gathered[k], stacked[k], "field " + std::to_string(k));
  EXPECT_EQ(gathered[1].shape(), (Shape{4, 4}));
  EXPECT_EQ(gathered[2].to_vector<int64_t>(), (std::vector<int64_t>{1, 5, 1, 0}));
  expect_error_with([&] { ds.get_batch({1, 6}); }, {"TensorDataset::get_batch", "index 6", "6 samples"});
  expect_error_with([&] { ds.get_batch({}); }, {"TensorDataset::get_batch", "at least one"});
  // A Subset forwards to its dataset's gather.
  data::Subset sub(std::make_shared<data::TensorDataset>(ds), {5, 4, 0});
  expect_identical(sub.get_batch({2, 0})[0], ds.get_batch({0, 5})[0], "subset");
}

TEST(DataLoader, BatchCountsWithAndWithoutDropLast) {
  for (bool prefetch : {false, true}) {
    DataLoader keep(numbered(10), DataLoaderOptions().batch_size(4).prefetch(prefetch));
    EXPECT_EQ(keep.size(), 3);
    auto b = pass_labels(keep);
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[2], (std::vector<int64_t>{8, 9}));  // the last, partial batch
    EXPECT_EQ(flat(b), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));

    DataLoader drop(numbered(10), DataLoaderOptions().batch_size(4).drop_last(true).prefetch(prefetch));
    EXPECT_EQ(drop.size(), 2);
    EXPECT_EQ(flat(pass_labels(drop)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));

    DataLoader exact(numbered(8), DataLoaderOptions().batch_size(4).drop_last(true).prefetch(prefetch));
    EXPECT_EQ(pass_labels(exact).size(), 2u);
    DataLoader empty(numbered(3), DataLoaderOptions().batch_size(4).drop_last(true).prefetch(prefetch));
    EXPECT_EQ(empty.size(), 0);
    EXPECT_TRUE(pass_labels(empty).empty());
  }
}

TEST(DataLoader, DefaultCollateStacksEachField) {
  DataLoader loader(numbered(5), DataLoaderOptions().batch_size(3));
  auto it = loader.begin();
  ASSERT_NE(it, loader.end());
  const std::vector<Tensor>& batch = *it;
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(batch[0].dtype(), DType::Float32);
  EXPECT_TRUE(batch[0].is_contiguous());
  EXPECT_EQ(batch[0].to_vector<float>(), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(batch[1].shape(), (Shape{3}));
  EXPECT_EQ(batch[1].dtype(), DType::Int64);
  ++it;
  EXPECT_EQ((*it)[1].to_vector<int64_t>(), (std::vector<int64_t>{3, 4}));
  ++it;
  EXPECT_EQ(it, loader.end());
}

TEST(DataLoader, ShuffleIsAFunctionOfSeedAndEpoch) {
  auto options = DataLoaderOptions().batch_size(7).shuffle(true).seed(11);
  DataLoader a(numbered(50), options), b(numbered(50), options);
  const auto a0 = flat(pass_labels(a)), a1 = flat(pass_labels(a)), b0 = flat(pass_labels(b));
  EXPECT_EQ(a.epoch(), 2);
  EXPECT_EQ(a0, b0);  // same seed, same epoch: the same order
  EXPECT_NE(a0, a1);  // the next pass is the next epoch: another order
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a0, identity);
  for (const auto& order : {a0, a1}) {  // every index exactly once
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity);
  }
  // set_epoch replays an epoch (resuming a run); the order is seed + epoch's permutation.
  b.set_epoch(1);
  EXPECT_EQ(flat(pass_labels(b)), a1);
  EXPECT_EQ(a0, data::epoch_order(50, true, 11, 0));
  DataLoader other_seed(numbered(50), DataLoaderOptions().batch_size(7).shuffle(true).seed(12));
  EXPECT_NE(flat(pass_labels(other_seed)), a0);
}

// Samples built with a few float64 ops, so that a difference in how batches are built would
// show in the bits.
class Computed : public data::Dataset {
 public:
  int64_t size() const override { return 37; }
  std::vector<Tensor> get(int64_t i) const override {
    Tensor x = full({3, 4}, std::sqrt(static_cast<double>(i) + 0.1), DType::Float64);
    return {x, scalar_tensor(static_cast<double>(i % 5), DType::Int64)};
  }
};

TEST(DataLoader, PrefetchGivesIdenticalBatches) {
  auto ds = std::make_shared<Computed>();
  for (bool drop_last : {false, true}) {
    auto options = DataLoaderOptions().batch_size(5).shuffle(true).seed(3).drop_last(drop_last);
    DataLoader serial(ds, DataLoaderOptions(options).prefetch(false));
    DataLoader ahead1(ds, DataLoaderOptions(options).prefetch(1));
    DataLoader ahead4(ds, DataLoaderOptions(options).prefetch(4));
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::vector<Tensor>> s, p1, p4;
      for (const auto& batch : serial) s.push_back(batch);
      for (const auto& batch : ahead1) p1.push_back(batch);
      for (const auto& batch : ahead4) p4.push_back(batch);
      ASSERT_EQ(s.size(), static_cast<size_t>(serial.size()));
      ASSERT_EQ(p1.size(), s.size());
      ASSERT_EQ(p4.size(), s.size());
      for (size_t b = 0; b < s.size(); ++b)
        for (size_t k = 0; k < 2; ++k) {
          expect_identical(p1[b][k], s[b][k], "prefetch 1, batch " + std::to_string(b));
          expect_identical(p4[b][k], s[b][k], "prefetch 4, batch " + std::to_string(b));
        }
    }
  }
}

// Throws while building sample `bad`; counts the samples it was asked for.
class Faulty : public data::Dataset {
 public:
  explicit Faulty(int64_t bad) : bad_(bad) {}
  int64_t size() const override { return 40; }
  std::vector<Tensor> get(int64_t i) const override {
    ++calls;
    if (i == bad_) throw std::runtime_error("sample " + std::to_string(i) + " is corrupt");
    return {full({2}, static_cast<double>(i))};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t bad_;
};

TEST(DataLoader, AnErrorWhileBuildingABatchReachesTheLoop) {
  for (int depth : {0, 1, 3}) {
    // Sample 13 is in batch 3 (batch size 4, no shuffle): batches 0..2 arrive, then ++ throws.
    DataLoader loader(std::make_shared<Faulty>(13), DataLoaderOptions().batch_size(4).prefetch(depth));
    int64_t seen = 0;
    try {
      for (const auto& batch : loader) {
        EXPECT_EQ(batch[0].size(0), 4);
        ++seen;
      }
      ADD_FAILURE() << "expected the dataset's error, prefetch " << depth;
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "sample 13 is corrupt");
    }
    EXPECT_EQ(seen, 3) << "prefetch " << depth;
    // The error ended that pass only: a new pass (a new thread) meets the same sample again.
    EXPECT_THROW(
        {
          for (const auto& batch : loader) EXPECT_EQ(batch.size(), 1u);
        },
        std::runtime_error);
  }
  // In the first batch: begin() throws.
  DataLoader first(std::make_shared<Faulty>(0), DataLoaderOptions().batch_size(4));
  EXPECT_THROW(first.begin(), std::runtime_error);
}

TEST(DataLoader, LeavingTheLoopEarlyStopsTheThread) {
  auto ds = std::make_shared<Faulty>(-1);
  {
    DataLoader loader(ds, DataLoaderOptions().batch_size(2).prefetch(2));
    for (const auto& batch : loader) {
      EXPECT_EQ(batch[0].size(0), 2);
      break;
    }
    // The thread stopped, joined, when the loop's iterator died: it built at most the batch
    // taken plus two ahead, plus one it may have been building.
    EXPECT_LE(ds->calls.load(), 2 * 4);
    // The loader is still usable.
    int64_t batches = 0;
    for (const auto& batch : loader) batches += batch[0].size(0) == 2;
    EXPECT_EQ(batches, 20);
  }
  // An iterator that outlives its loader keeps the pass (and the dataset) alive.
  DataLoader::Iterator it;
  {
    DataLoader loader(std::make_shared<Faulty>(-1), DataLoaderOptions().batch_size(8));
    it = loader.begin();
  }
  int64_t total = 0;
  for (; it != DataLoader::Iterator(); ++it) total += (*it)[0].size(0);
  EXPECT_EQ(total, 40);
}

TEST(DataLoader, ACustomCollateReplacesTheDefault) {
  // Sums each batch's x instead of stacking (and returns the batch size).
  auto collate = [](const std::vector<std::vector<Tensor>>& samples) {
    double sum = 0;
    for (const auto& s : samples) sum += s[0].to_vector<float>()[0];
    return std::vector<Tensor>{scalar_tensor(sum, DType::Float64),
                               scalar_tensor(static_cast<double>(samples.size()), DType::Int64)};
  };
  DataLoader loader(numbered(7), DataLoaderOptions().batch_size(3).collate(collate));
  std::vector<double> sums;
  for (const auto& batch : loader) sums.push_back(batch[0].item());
  EXPECT_EQ(sums, (std::vector<double>{0 + 1 + 2, 3 + 4 + 5, 6}));
}

// The README's rule for the prefetch thread: it builds batches with grad mode off and one
// OpenMP thread (the training step keeps the cores); without prefetch the caller's thread
// builds them, also with grad mode off, and keeps its thread count.
TEST(DataLoader, BatchesAreBuiltWithGradModeOffAndThePrefetchThreadHasOneOpenMPThread) {
  struct Seen {
    bool grad_mode = true;
    int threads = 0;
  };
  for (int depth : {2, 0}) {
    SCOPED_TRACE("prefetch " + std::to_string(depth));
    auto seen = std::make_shared<std::vector<Seen>>();
    auto mutex = std::make_shared<std::mutex>();
    auto collate = [seen, mutex](const std::vector<std::vector<Tensor>>& samples) {
      {
        std::lock_guard<std::mutex> lock(*mutex);
        seen->push_back({GradMode::is_enabled(), omp_get_max_threads()});
      }
      return std::vector<Tensor>{scalar_tensor(static_cast<double>(samples.size()), DType::Int64)};
    };
    DataLoader loader(numbered(6), DataLoaderOptions().batch_size(2).prefetch(depth).collate(collate));
    for (const auto& batch : loader) EXPECT_TRUE(GradMode::is_enabled()) << batch[0].item();
    ASSERT_EQ(seen->size(), 3u);
    for (const Seen& s : *seen) {
      EXPECT_FALSE(s.grad_mode);
      EXPECT_EQ(s.threads, depth > 0 ? 1 : omp_get_max_threads());
    }
  }
}

// Sample i has an image of shape [2, 2] except sample 5, whose image is [2, 3].
class Ragged : public data::Dataset {
 public:
  int64_t size() const override { return 8; }
  std::vector<Tensor> get(int64_t i) const override {
    return {zeros({1}), zeros(i == 5 ? Shape{2, 3} : Shape{2, 2}), scalar_tensor(0, DType::Int64)};
  }
};

TEST(DataLoader, CollateErrorsNameTheFieldAndBothShapes) {
  for (int depth : {0, 2}) {
    DataLoader loader(std::make_shared<Ragged>(), DataLoaderOptions().batch_size(4).prefetch(depth));
    auto it = loader.begin();  // batch 0 (samples 0..3) is fine
    expect_error_with([&] { ++it; }, {"default_collate", "field 1", "sample 1", "[2, 3]", "sample 0", "[2, 2]"});
  }
  expect_error_with([] { data::default_collate({{zeros({2})}, {zeros({2}), zeros({2})}}); },
                    {"default_collate", "sample 1", "2 fields", "sample 0 has 1"});
  expect_error_with([] { data::default_collate({{zeros({2})}, {zeros({2}, DType::Float64)}}); },
                    {"default_collate", "field 0", "float64", "float32"});
  expect_error_with([] { data::default_collate({}); }, {"default_collate", "at least one sample"});
}

TEST(DataLoader, OptionErrors) {
  expect_error_with([] { DataLoaderOptions().batch_size(0); }, {"batch_size", ">= 1", "got 0"});
  expect_error_with([] { DataLoaderOptions().prefetch(-1); }, {"prefetch", "got -1"});
  auto sampler = std::make_shared<data::RandomSampler>(4, false, 0);
  expect_error_with([&] { DataLoader(numbered(4), DataLoaderOptions().shuffle(true).sampler(sampler)); },
                    {"DataLoader", "shuffle", "sampler"});
  expect_error_with([] { DataLoader(std::shared_ptr<const data::Dataset>(), DataLoaderOptions()); },
                    {"DataLoader", "null"});
  // A sampler whose indices do not fit the dataset.
  auto big = std::make_shared<data::RandomSampler>(6, false, 0);
  DataLoader loader(numbered(4), DataLoaderOptions().sampler(big));
  expect_error_with([&] { loader.begin(); }, {"DataLoader", "sampler", "4", "out of range"});
}

TEST(DataLoader, OptionsReadBack) {
  auto o = DataLoaderOptions().batch_size(64).shuffle(true).seed(9).drop_last(true).prefetch(3);
  EXPECT_EQ(o.batch_size(), 64);
  EXPECT_TRUE(o.shuffle());
  EXPECT_EQ(o.seed(), 9u);
  EXPECT_TRUE(o.drop_last());
  EXPECT_EQ(o.prefetch(), 3);
  EXPECT_EQ(o.prefetch(false).prefetch(), 0);
  EXPECT_EQ(o.prefetch(true).prefetch(), DataLoaderOptions::kDefaultPrefetch);
  EXPECT_EQ(DataLoaderOptions().batch_size(), 1);
}

TEST(DataLoader, DistributedSamplerGivesEachRankItsShard) {
  // Two simulated ranks of one data-parallel run over 11 samples (padded to 12).
  std::vector<int64_t> seen[2];
  for (int rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<data::DistributedSampler>(11, rank, 2, /*shuffle=*/true, /*seed=*/5);
    DataLoader loader(numbered(11), DataLoaderOptions().batch_size(4).sampler(sampler));
    EXPECT_EQ(loader.num_samples(), 6);
    EXPECT_EQ(loader.size(), 2);
    seen[rank] = flat(pass_labels(loader));
    EXPECT_EQ(sampler->epoch(), 0);  // the loader set the epoch of its pass
    EXPECT_EQ(seen[rank], sampler->indices());
    const auto next = flat(pass_labels(loader));
    EXPECT_EQ(sampler->epoch(), 1);
    EXPECT_NE(next, seen[rank]);
  }
  ASSERT_EQ(seen[0].size(), 6u);
  ASSERT_EQ(seen[1].size(), 6u);
  std::set<int64_t> all(seen[0].begin(), seen[0].end());
  all.insert(seen[1].begin(), seen[1].end());
  EXPECT_EQ(all.size(), 11u);  // together every sample; the one shared is the padding
  std::set<int64_t> r0(seen[0].begin(), seen[0].end()), common;
  for (int64_t i : seen[1])
    if (r0.count(i)) common.insert(i);
  EXPECT_EQ(common.size(), 1u);
  // Without padding (drop_last), the shards are disjoint.
  std::set<int64_t> d[2];
  for (int rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<data::DistributedSampler>(11, rank, 2, true, 5, /*drop_last=*/true);
    DataLoader loader(numbered(11), DataLoaderOptions().batch_size(2).sampler(sampler));
    for (int64_t i : flat(pass_labels(loader))) d[rank].insert(i);
    EXPECT_EQ(d[rank].size(), 5u);
  }
  for (int64_t i : d[0]) EXPECT_EQ(d[1].count(i), 0u) << i;
  // A world of one reads what shuffle(true) reads from the same seed.
  auto one = std::make_shared<data::DistributedSampler>(11, 0, 1, true, 5);
  DataLoader with_sampler(numbered(11), DataLoaderOptions().batch_size(3).sampler(one));
  DataLoader with_shuffle(numbered(11), DataLoaderOptions().batch_size(3).shuffle(true).seed(5));
  EXPECT_EQ(pass_labels(with_sampler), pass_labels(with_shuffle));
}

TEST(Subset, FirstSamplesAndIndexErrors) {
  auto base = std::make_shared<data::TensorDataset>(numbered(10));
  auto first = data::first_samples(base, 4);
  EXPECT_EQ(first->size(), 4);
  EXPECT_EQ(data::first_samples(base, 50)->size(), 10);
  data::Subset picked(base, {7, 2});
  EXPECT_EQ(picked.get(0)[1].item<int64_t>(), 7);
  EXPECT_EQ(picked.get(1)[1].item<int64_t>(), 2);
  expect_error_with([&] { data::Subset(base, {1, 10}); }, {"Subset", "indices[1]", "10", "10 samples"});
  expect_error_with([&] { picked.get(2); }, {"Subset::get", "index 2"});
}

TEST(FashionMNIST, DatasetOnTheSubsetGivesImagesAndLabels) {
  data::FashionMNIST train("train", data_path("fashion_mnist_subset"));
  data::ImageDataset raw = data::load_fashion_mnist("train", data_path("fashion_mnist_subset"));
  ASSERT_EQ(train.size(), 512);
  std::vector<Tensor> s = train.get(5);
  EXPECT_EQ(s[0].shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(s[0].dtype(), DType::Float32);
  EXPECT_EQ(s[1].dim(), 0);
  EXPECT_EQ(s[1].item<int64_t>(), raw.labels.at<int64_t>({5}));
  expect_identical(s[0].squeeze(0), raw.images.select(0, 5), "image 5");
  EXPECT_EQ(train.images().shape(), (Shape{512, 1, 28, 28}));

  DataLoader loader(train, DataLoaderOptions().batch_size(100));
  EXPECT_EQ(loader.size(), 6);
  int64_t count = 0;
  for (const auto& batch : loader) {
    EXPECT_EQ(batch[0].shape(), (Shape{batch[1].size(0), 1, 28, 28}));
    expect_identical(batch[0].squeeze(1), raw.images.narrow(0, count, batch[1].size(0)), "batch images");
    count += batch[1].size(0);
  }
  EXPECT_EQ(count, 512);
  expect_error_with([] { data::FashionMNIST("validation", data_path("fashion_mnist_subset")); },
                    {"load_fashion_mnist", "validation"});
}

TEST(IdxDataset, PairOfFilesAndCountMismatch) {
  const std::string dir = data_path("fashion_mnist_subset");
  data::IdxDataset test(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(test.size(), 256);
  EXPECT_EQ(test.get(0)[0].shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(test.labels().shape(), (Shape{256}));
  expect_error_with(
      [&] { data::IdxDataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"); },
      {"IdxDataset", "t10k-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "256 images", "512 labels"});
  expect_error_with([] { data::IdxDataset(data::ImageDataset{zeros({4, 3}), zeros({4}, DType::Int64)}); },
                    {"IdxDataset", "[N, H, W]", "[4, 3]"});
}

}  // namespace
}  // namespace tg
