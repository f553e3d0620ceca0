// DistributedDataParallel and DistributedSampler under mpirun (and alone, a world of one).
//
// Equivalence: every rank also trains the same model in one process on the whole global batch,
// and after each step the DDP model (its rank's half of the batch, gradients averaged) must
// match it. The two differ only in the order of float32 additions: each rank's loss is a mean
// over its B / P samples and the gradients are averaged over P ranks instead of one mean over B.
// float64: 1e-12 relative; float32: 2e-5 relative to the parameter scale after 4 SGD steps
// (a few float32 ulps per gradient element, amplified a little by the steps).
#include <gtest/gtest.h>

#include <limits>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

// conv -> GroupNorm -> relu -> MSDeformAttn over the feature map -> mean -> linear.
struct Net : Module {
  explicit Net(DType dt, uint64_t seed) {
    Generator g(seed);
    conv = add_module("conv", std::make_shared<Conv2d>(3, 8, IntList{3}, IntList{1}, IntList{1}, IntList{1}, 1, true,
                                                       dt, &g));
    norm = add_module("norm", std::make_shared<GroupNorm>(2, 8, 1e-5, true, dt));
    attn = add_module("attn", std::make_shared<MSDeformAttn>(8, 1, 2, 2, dt, &g));
    head = add_module("head", std::make_shared<Linear>(8, 4, true, dt, &g));
    {  // non-trivial sampling offsets, so the sampling locations (and their gradients) matter
      NoGradGuard no_grad;
      attn->sampling_offsets->weight.copy_(normal(attn->sampling_offsets->weight.shape(), 0, 0.3, dt, &g));
    }
  }
  Tensor forward(const Tensor& x) override {
    const int64_t n = x.size(0);
    Tensor f = relu(norm->forward(conv->forward(x)));           // (n, 8, 4, 4)
    Tensor value = f.flatten(2).transpose(1, 2).contiguous();  // (n, 16, 8)
    std::vector<double> ref;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) ref.insert(ref.end(), {(j + 0.5) / 4, (i + 0.5) / 4});
    Tensor points = from_vector(ref, {1, 16, 1, 2}).to(x.dtype()).expand({n, 16, 1, 2}).contiguous();
    Tensor shapes = from_vector(std::vector<int64_t>{4, 4}, {1, 2});
    Tensor starts = from_vector(std::vector<int64_t>{0}, {1});
    Tensor a = attn->forward(value, points, value, shapes, starts);  // (n, 16, 8)
    return head->forward(mean(a, {1}));                              // (n, 4)
  }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<GroupNorm> norm;
  std::shared_ptr<MSDeformAttn> attn;
  std::shared_ptr<Linear> head;
};

double max_rel_diff(Module& a, Module& b) {
  const StateDict pa = a.named_parameters(), pb = b.named_parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<double> x = pa[i].second.to(DType::Float64).to_vector<double>();
    const std::vector<double> y = pb[i].second.to(DType::Float64).to_vector<double>();
    double scale = 1e-3;
    for (double v : y) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]) / scale);
  }
  return worst;
}

void train_and_compare(DType dt, double tol, int64_t global_batch, double bucket_cap_mb) {
  dist::init();
  const int rank = dist::rank(), world = dist::world_size();
  ASSERT_EQ(global_batch % world, 0);
  // Different seeds per rank on purpose: DDP must start every rank from rank 0's parameters.
  Net model(dt, 100 + uint64_t(rank)), reference(dt, 100);
  DistributedDataParallelOptions options;
  options.bucket_cap_mb = bucket_cap_mb;
  DistributedDataParallel ddp(model, options);
  EXPECT_EQ(max_rel_diff(model, reference), 0.0) << "rank 0's parameters were not broadcast";
  SGD opt(model.named_parameters(), SGDOptions{0.1, 0.9});
  SGD ref_opt(reference.named_parameters(), SGDOptions{0.1, 0.9});
  Generator data(7);  // the same data on every rank
  const int64_t local = global_batch / world;
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({global_batch, 3, 4, 4}, dt, &data), y = randn({global_batch, 4}, dt, &data);
    opt.zero_grad();
    mse_loss(ddp.forward(x.narrow(0, rank * local, local)), y.narrow(0, rank * local, local)).backward();
    opt.step();
    ref_opt.zero_grad();
    mse_loss(reference.forward(x), y).backward();
    ref_opt.step();
  }
  const double err = max_rel_diff(model, reference);
  EXPECT_LE(err, tol) << dtype_name(dt) << " on rank " << rank << " of " << world;
  if (rank == 0) std::printf("[ddp] %s, %d ranks, bucket %.3f MB (%zu buckets): max relative difference %.3g\n",
                             dtype_name(dt), world, bucket_cap_mb, ddp.bucket_parameter_names().size(), err);
}

TEST(DistributedDataParallel, MatchesOneProcessOnTheGlobalBatchFloat64) {
  train_and_compare(DType::Float64, 1e-12, 6, 25);
}

TEST(DistributedDataParallel, MatchesOneProcessOnTheGlobalBatchFloat32ManySmallBuckets) {
  train_and_compare(DType::Float32, 2e-5, 6, 0.001);  // about one parameter per bucket
}

TEST(DistributedDataParallel, RunsGiveIdenticalBitsAndRanksAgree) {
  dist::init();
  auto run = [] {
    Net model(DType::Float32, 5);
    DistributedDataParallel ddp(model);
    SGD opt(model.named_parameters(), SGDOptions{0.05});
    Generator data(11 + uint64_t(dist::rank()));  // each rank its own data
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      mse_loss(ddp.forward(randn({2, 3, 4, 4}, DType::Float32, &data)), randn({2, 4}, DType::Float32, &data))
          .backward();
      opt.step();
    }
    std::vector<float> flat;
    for (const auto& [name, p] : model.named_parameters()) {
      const std::vector<float> v = p.to_vector<float>();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    return flat;
  };
  const std::vector<float> a = run(), b = run();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "two runs differ";
  const std::vector<Tensor> all = dist::all_gather(from_vector(a, {int64_t(a.size())}));
  for (size_t r = 1; r < all.size(); ++r)
    EXPECT_EQ(std::memcmp(all[0].data<float>(), all[r].data<float>(), a.size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
}

TEST(DistributedDataParallel, NoSyncAccumulatesThenReducesTheSum) {
  dist::init();
  const int rank = dist::rank(), world = dist::world_size();
  Net model(DType::Float64, 3), reference(DType::Float64, 3);
  DistributedDataParallel ddp(model);
  Generator data(21);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 2 * world; ++i) {
    xs.push_back(randn({1, 3, 4, 4}, DType::Float64, &data));
    ys.push_back(randn({1, 4}, DType::Float64, &data));
  }
  // Two micro-batches per rank: the first under no_sync, the second reduces the accumulated sum.
  {
    auto guard = ddp.no_sync();
    mse_loss(ddp.forward(xs[size_t(2 * rank)]), ys[size_t(2 * rank)]).backward();
  }
  mse_loss(ddp.forward(xs[size_t(2 * rank + 1)]), ys[size_t(2 * rank + 1)]).backward();
  for (size_t i = 0; i < xs.size(); ++i) mse_loss(reference.forward(xs[i]), ys[i]).backward();
  const StateDict pm = model.named_parameters(), pr = reference.named_parameters();
  for (size_t i = 0; i < pm.size(); ++i) {
    const std::vector<double> g = pm[i].second.grad().to_vector<double>();
    const std::vector<double> e = pr[i].second.grad().to_vector<double>();
    for (size_t k = 0; k < g.size(); ++k)
      ASSERT_NEAR(g[k] * world, e[k], 1e-12 * (1 + std::abs(e[k]))) << pm[i].first << "[" << k << "]";
  }
}

// The timing a training log reads after each synchronised backward: when backward's own work
// ended, between the start of backward and its return, and the wait that followed, never more
// than backward's whole time. A world of one has nothing to reduce: no time, no wait.
TEST(DistributedDataParallel, ReportsWhenBackwardEndedAndHowLongItWaited) {
  dist::init();
  Net model(DType::Float32, 4);
  DistributedDataParallel ddp(model);
  Generator data(5);
  const Tensor x = randn({2, 3, 4, 4}, DType::Float32, &data), y = randn({2, 4}, DType::Float32, &data);
  const Tensor loss = mse_loss(ddp.forward(x), y);
  const auto before = std::chrono::steady_clock::now();
  loss.backward();
  const auto after = std::chrono::steady_clock::now();
  if (dist::world_size() == 1) {
    EXPECT_EQ(ddp.last_backward_end(), std::chrono::steady_clock::time_point{});
    EXPECT_EQ(ddp.last_wait_seconds(), 0.0);
    return;
  }
  EXPECT_GE(ddp.last_backward_end(), before);
  EXPECT_LE(ddp.last_backward_end(), after);
  EXPECT_GE(ddp.last_wait_seconds(), 0.0);
  EXPECT_LE(ddp.last_wait_seconds(), std::chrono::duration<double>(after - before).count());
}

// Each bucket's reduction starts from the hooks as soon as backward has produced its gradients,
// while the rest of backward runs: when norm.weight's gradient arrives, the buckets of the head
// and the attention (whose gradients came before) have started, conv's (still to come) not.
TEST(DistributedDataParallel, StartsEachBucketAsSoonAsBackwardHasItsGradients) {
  dist::init();
  Net model(DType::Float32, 6);
  DistributedDataParallelOptions tiny;
  tiny.bucket_cap_mb = 1e-9;  // one parameter per bucket
  DistributedDataParallel ddp(model, tiny);
  const auto buckets = ddp.bucket_parameter_names();
  int64_t head_and_attention = 0;
  for (const auto& b : buckets) head_and_attention += b[0].rfind("head.", 0) == 0 || b[0].rfind("attn.", 0) == 0;
  ASSERT_EQ(head_and_attention, int64_t(buckets.size()) - 4);  // all but norm's and conv's
  int64_t started_at_norm = -1;
  model.norm->weight.register_post_accumulate_grad_hook(
      [&](const Tensor&) { started_at_norm = ddp.buckets_started_in_backward(); });
  Generator data(9);
  mse_loss(ddp.forward(randn({2, 3, 4, 4}, DType::Float32, &data)), randn({2, 4}, DType::Float32, &data)).backward();
  if (dist::world_size() == 1) {  // nothing to reduce
    EXPECT_EQ(started_at_norm, 0);
    EXPECT_EQ(ddp.buckets_started_in_backward(), 0);
    return;
  }
  EXPECT_GE(started_at_norm, head_and_attention);
  EXPECT_LE(started_at_norm, int64_t(buckets.size()) - 2) << "conv's buckets started before conv's backward";
  EXPECT_EQ(ddp.buckets_started_in_backward(), int64_t(buckets.size()));
}

// A parameter that gets no gradient holds back its bucket and every later one until backward
// ends (buckets start in the same order on every rank); no rank used it, so its .grad() stays
// undefined and an optimizer leaves it alone, as PyTorch's DDP (find_unused_parameters) and as
// one process would (it was given zeros, which AdamW's weight decay then moved).
TEST(DistributedDataParallel, AnUnusedParameterHoldsBackItsBucketUntilTheEnd) {
  dist::init();
  struct WithUnused : Net {
    WithUnused() : Net(DType::Float64, 8) {
      unused = add_module("unused", std::make_shared<Linear>(2, 3, true, DType::Float64));
    }
    std::shared_ptr<Linear> unused;  // registered last: the first buckets
  } model;
  DistributedDataParallelOptions tiny;
  tiny.bucket_cap_mb = 1e-9;
  DistributedDataParallel ddp(model, tiny);
  ASSERT_EQ(ddp.bucket_parameter_names()[0], std::vector<std::string>{"unused.bias"});
  Generator data(10);
  mse_loss(ddp.forward(randn({2, 3, 4, 4}, DType::Float64, &data)), randn({2, 4}, DType::Float64, &data)).backward();
  EXPECT_EQ(ddp.buckets_started_in_backward(), 0);
  EXPECT_TRUE(model.head->weight.grad().defined());
  EXPECT_FALSE(model.unused->bias.grad().defined());
  EXPECT_FALSE(model.unused->weight.grad().defined());
  // Used by rank 0 alone: every rank gets the average, rank 0's gradient over world_size.
  const bool mine = dist::rank() == 0;
  Tensor out = ddp.forward(randn({2, 3, 4, 4}, DType::Float64, &data));
  Tensor loss = sum(out);
  if (mine) loss = add(loss, sum(model.unused->forward(ones({1, 2}, DType::Float64))));
  model.zero_grad();
  loss.backward();
  ASSERT_TRUE(model.unused->bias.grad().defined());
  EXPECT_EQ(model.unused->bias.grad().to_vector<double>(), std::vector<double>(3, 1.0 / dist::world_size()));
  // A second backward of the step, rank 0 alone using it again: every rank's .grad() (the first
  // average, the same everywhere, plus rank 0's new 1) is averaged, as PyTorch's reducer does.
  Tensor again = sum(ddp.forward(randn({2, 3, 4, 4}, DType::Float64, &data)));
  if (mine) again = add(again, sum(model.unused->forward(ones({1, 2}, DType::Float64))));
  again.backward();
  for (double v : model.unused->bias.grad().to_vector<double>()) EXPECT_NEAR(v, 2.0 / dist::world_size(), 1e-15);
  // And a .grad() left from before stays as it was when no rank uses the parameter in a step.
  model.unused->bias.set_grad(full({3}, 5.0, DType::Float64));
  sum(ddp.forward(randn({2, 3, 4, 4}, DType::Float64, &data))).backward();
  EXPECT_EQ(model.unused->bias.grad().to_vector<double>(), std::vector<double>(3, 5.0));
}

// The model must be the same on every rank, buffers and frozen parameters included (a buffer
// one rank alone had passed the check, then hung in the broadcasts); huge bucket caps are one
// bucket (their byte count overflowed int64: a bucket per parameter).
TEST(DistributedDataParallel, ChecksBuffersAndFrozenParametersAndTakesHugeCaps) {
  dist::init();
  {
    Net model(DType::Float64, 8);
    DistributedDataParallelOptions huge;
    huge.bucket_cap_mb = 1e30;
    huge.first_bucket_mb = std::numeric_limits<double>::infinity();
    DistributedDataParallel ddp(model, huge);
    EXPECT_EQ(ddp.bucket_parameter_names().size(), 1u);
  }
  if (dist::world_size() == 1) return;
  struct WithBuffer : Net {
    explicit WithBuffer(bool extra) : Net(DType::Float64, 8) {
      if (extra) register_buffer("extra", zeros({2}, DType::Float64));
    }
  } extra_buffer(dist::rank() == 1);
  std::string msg;
  try {
    DistributedDataParallel ddp(extra_buffer);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("DistributedDataParallel: module: expected the same parameters and buffers"), std::string::npos)
      << msg;
  Net frozen(DType::Float64, 8);
  if (dist::rank() == 1) frozen.head->bias.requires_grad_(false);
  EXPECT_THROW(DistributedDataParallel ddp(frozen), Error);
  dist::barrier();
}

// Rank 0's buffers go to every rank at construction and, with broadcast_buffers (the default),
// again before each forward: ranks whose running statistics drifted apart (each normalises its
// own shard in training) all evaluate with rank 0's. Without it each rank keeps its own.
TEST(DistributedDataParallel, SendsRankZerosBuffersAtConstructionAndBeforeEachForward) {
  dist::init();
  const double rank = dist::rank();
  BatchNorm2d bn(3);
  {
    NoGradGuard no_grad;
    bn.running_mean.fill_(rank + 1);
    bn.running_var.fill_(rank + 2);
    bn.num_batches_tracked.fill_(rank + 5);
  }
  const Tensor x = full({1, 3, 1, 1}, 10.0);
  {
    DistributedDataParallel ddp(bn);
    EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(3, 1.0f));
    EXPECT_EQ(bn.running_var.to_vector<float>(), std::vector<float>(3, 2.0f));
    EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 5);
    {
      NoGradGuard no_grad;
      bn.running_mean.fill_(10 * (rank + 1));  // drifted: rank 0's mean is 10
    }
    bn.eval();
    EXPECT_EQ(ddp.forward(x).to_vector<float>(), std::vector<float>(3, 0.0f)) << "not rank 0's mean";
    EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(3, 10.0f));
  }
  DistributedDataParallelOptions keep;
  keep.broadcast_buffers = false;
  DistributedDataParallel ddp(bn, keep);  // construction still starts every rank from rank 0's
  {
    NoGradGuard no_grad;
    bn.running_mean.fill_(10 * (rank + 1));
  }
  (void)ddp.forward(x);
  EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(3, float(10 * (rank + 1))));
}

TEST(DistributedDataParallel, BucketsFollowTheCapAndTheReverseOrder) {
  dist::init();
  Net model(DType::Float32, 1);
  DistributedDataParallelOptions big, tiny;
  tiny.bucket_cap_mb = 1e-9;
  const auto one = DistributedDataParallel(model, big).bucket_parameter_names();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].front(), "head.bias");  // the last registered first
  const auto each = DistributedDataParallel(model, tiny).bucket_parameter_names();
  EXPECT_EQ(each.size(), model.named_parameters().size());
  DistributedDataParallelOptions small_first;
  small_first.first_bucket_mb = 1e-9;  // PyTorch's 1 MB first bucket, here smaller than any parameter
  const auto two = DistributedDataParallel(model, small_first).bucket_parameter_names();
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], (std::vector<std::string>{"head.bias"}));
}

TEST(DistributedSampler, DisjointShardsCoverEveryIndexDeterministically) {
  for (int world : {1, 2, 3}) {
    for (bool drop_last : {false, true}) {
      std::vector<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        data::DistributedSampler s(10, r, world, true, 42, drop_last);
        s.set_epoch(3);
        const std::vector<int64_t> mine = s.indices();
        EXPECT_EQ(int64_t(mine.size()), s.num_samples());
        EXPECT_EQ(mine, s.indices());  // deterministic
        seen.insert(seen.end(), mine.begin(), mine.end());
      }
      std::vector<int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      if (drop_last) {
        EXPECT_EQ(int64_t(seen.size()), 10 / world * world);
        EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "shards overlap";
      } else {  // padded with the first indices, as PyTorch
        EXPECT_EQ(int64_t(seen.size()), (10 + world - 1) / world * world);
        sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
        EXPECT_EQ(sorted.size(), 10u);
      }
    }
  }
  data::DistributedSampler a(10, 0, 2, true, 42), b(10, 0, 2, true, 42);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices()) << "the epoch changes the order";
  data::DistributedSampler plain(5, 1, 2, false, 0);
  EXPECT_EQ(plain.indices(), (std::vector<int64_t>{1, 3, 0}));
  EXPECT_THROW(data::DistributedSampler(10, 2, 2), Error);
}

}  // namespace
}  // namespace tg
