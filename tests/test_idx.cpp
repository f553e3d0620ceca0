// The IDX reader: the committed Fashion-MNIST subset against facts its generator computed
// (tools/make_fashion_mnist_subset.py), raw vs gzip files, and every kind of corrupt input.
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;
namespace fs = std::filesystem;

std::string subset_dir() { return data_path("fashion_mnist_subset"); }

nlohmann::json expected_facts() {
  std::ifstream f(data_path("fashion_mnist_subset/expected.json"));
  return nlohmann::json::parse(f);
}

std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  s.append(payload.begin(), payload.end());
  return s;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

TEST(Idx, SubsetTrainMatchesTheGeneratorsFacts) {
  const auto facts = expected_facts()["train"];
  data::ImageDataset ds = data::load_fashion_mnist("train", subset_dir());
  ASSERT_EQ(ds.images.shape(), (Shape{512, 28, 28}));
  ASSERT_EQ(ds.images.dtype(), DType::Float32);
  ASSERT_EQ(ds.labels.shape(), (Shape{512}));
  ASSERT_EQ(ds.labels.dtype(), DType::Int64);

  std::vector<int64_t> labels = ds.labels.to_vector<int64_t>();
  auto first = facts["first_labels"].get<std::vector<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 16), first);
  std::vector<int64_t> hist(10, 0);
  for (int64_t l : labels) hist[static_cast<size_t>(l)]++;
  EXPECT_EQ(hist, facts["label_histogram"].get<std::vector<int64_t>>());

  // Every pixel is byte/255 exactly as float32 computes it, so x*255 rounds back to the byte.
  std::vector<float> px = ds.images.to_vector<float>();
  int64_t sum = 0, first_sum = 0;
  for (size_t i = 0; i < px.size(); ++i) {
    ASSERT_GE(px[i], 0.0f);
    ASSERT_LE(px[i], 1.0f);
    const int64_t byte = std::lround(px[i] * 255.0f);
    ASSERT_EQ(px[i], static_cast<float>(byte) / 255.0f) << "pixel " << i;
    sum += byte;
    if (i < 784) first_sum += byte;
  }
  EXPECT_EQ(sum, facts["pixel_sum"].get<int64_t>());
  EXPECT_EQ(first_sum, facts["first_image_pixel_sum"].get<int64_t>());
  auto row = facts["first_image_row_14"].get<std::vector<int>>();
  for (int x = 0; x < 28; ++x) EXPECT_EQ(ds.images.at<float>({0, 14, x}), row[x] / 255.0f) << "x " << x;
}

TEST(Idx, SubsetTestSplit) {
  const auto facts = expected_facts()["t10k"];
  data::ImageDataset ds = data::load_fashion_mnist("test", subset_dir());
  ASSERT_EQ(ds.images.shape(), (Shape{256, 28, 28}));
  ASSERT_EQ(ds.labels.shape(), (Shape{256}));
  std::vector<int64_t> labels = ds.labels.to_vector<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 16),
            facts["first_labels"].get<std::vector<int64_t>>());
  double sum = 0;
  for (float v : ds.images.to_vector<float>()) sum += std::lround(v * 255.0f);
  EXPECT_EQ(static_cast<int64_t>(sum), facts["pixel_sum"].get<int64_t>());
}

TEST(Idx, RawAndGzipReadTheSame) {
  const std::string dir = fresh_temp_dir("idx_raw_gz");
  std::vector<uint8_t> payload = {0, 1, 2, 127, 128, 254, 255, 7, 9, 11, 13, 200};
  const std::string bytes = idx_bytes(0x08, {2, 2, 3}, payload);
  write_bytes(dir + "/raw.idx", bytes);
  write_gzip(dir + "/packed.idx.gz", bytes);
  // The gzip file is recognised by its content, not its name.
  write_gzip(dir + "/packed_no_suffix", bytes);
  for (const std::string name : {"raw.idx", "packed.idx.gz", "packed_no_suffix"}) {
    IdxBytes idx = read_idx(dir + "/" + name);
    EXPECT_EQ(idx.dims, (std::vector<int64_t>{2, 2, 3})) << name;
    EXPECT_EQ(idx.data, payload) << name;
    Tensor img = load_idx_images(dir + "/" + name);
    EXPECT_EQ(img.at<float>({0, 1, 2}), 254.0f / 255.0f) << name;  // element 1*3+2 = 5
    EXPECT_EQ(img.at<float>({1, 1, 2}), 200.0f / 255.0f) << name;  // element 11
    EXPECT_EQ(img.at<float>({0, 0, 0}), 0.0f) << name;
    EXPECT_EQ(img.at<float>({0, 0, 2}), 2.0f / 255.0f) << name;
  }
  write_bytes(dir + "/labels.idx", idx_bytes(0x08, {4}, {3, 0, 9, 255}));
  EXPECT_EQ(load_idx_labels(dir + "/labels.idx").to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 9, 255}));
  fs::remove_all(dir);
}

// A zero dim holds no bytes whatever the other dims say, raw or gzip: the header's bound on the
// other dims (their product against the file's bytes) does not apply.
TEST(Idx, EmptyDimsReadWhateverTheOtherDims) {
  const std::string dir = fresh_temp_dir("idx_empty");
  const std::string bytes = idx_bytes(0x08, {60000, 0, 28}, {});
  write_bytes(dir + "/raw.idx", bytes);
  write_gzip(dir + "/packed.idx.gz", bytes);
  for (const std::string name : {"raw.idx", "packed.idx.gz"}) {
    IdxBytes idx = read_idx(dir + "/" + name);
    EXPECT_EQ(idx.dims, (std::vector<int64_t>{60000, 0, 28})) << name;
    EXPECT_TRUE(idx.data.empty()) << name;
  }
  fs::remove_all(dir);
}

TEST(Idx, CorruptFilesAreRejectedClearly) {
  const std::string dir = fresh_temp_dir("idx_corrupt");
  const std::string good = idx_bytes(0x08, {3, 2, 2}, std::vector<uint8_t>(12, 5));

  write_bytes(dir + "/bad_magic", "\x01\x02\x08\x01\x00\x00\x00\x01x");
  expect_error_with([&] { read_idx(dir + "/bad_magic"); }, {"bad_magic", "not an IDX file"});

  write_bytes(dir + "/float_type", idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
  expect_error_with([&] { read_idx(dir + "/float_type"); }, {"unsupported element type code 0xd"});

  write_bytes(dir + "/zero_dims", idx_bytes(0x08, {}, {}));
  expect_error_with([&] { read_idx(dir + "/zero_dims"); }, {"expected 1 to 4 dims, got 0"});

  write_bytes(dir + "/short_header", good.substr(0, 9));  // magic + 1.25 of 3 dims
  expect_error_with([&] { read_idx(dir + "/short_header"); }, {"truncated header"});

  write_bytes(dir + "/two_bytes", good.substr(0, 2));
  expect_error_with([&] { read_idx(dir + "/two_bytes"); }, {"truncated header"});

  write_bytes(dir + "/short_payload", good.substr(0, good.size() - 3));
  expect_error_with([&] { read_idx(dir + "/short_payload"); }, {"truncated", "need 12 bytes", "has 9"});

  write_gzip(dir + "/short_payload.gz", good.substr(0, good.size() - 3));
  expect_error_with([&] { read_idx(dir + "/short_payload.gz"); }, {"truncated", "need 12 bytes", "has 9"});

  write_bytes(dir + "/trailing", good + "xyz");
  expect_error_with([&] { read_idx(dir + "/trailing"); }, {"trailing bytes"});

  // Dims whose product is far beyond the file: rejected before allocating (60000*28*28 bytes
  // from a 20-byte raw file; 2^32-1 cubed from a tiny gzip file, which cannot inflate that far).
  write_bytes(dir + "/absurd_raw", idx_bytes(0x08, {60000, 28, 28}, {1, 2, 3}));
  expect_error_with([&] { read_idx(dir + "/absurd_raw"); }, {"need more bytes than the file holds"});
  write_gzip(dir + "/absurd.gz", idx_bytes(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {1}));
  expect_error_with([&] { read_idx(dir + "/absurd.gz"); }, {"a gzip file of this size can inflate to"});

  // A gzip stream cut in half and one whose CRC no longer matches its content.
  std::vector<uint8_t> big(4000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  write_gzip(dir + "/full.gz", idx_bytes(0x08, {4000}, big));
  const std::string packed = read_bytes(dir + "/full.gz");
  write_bytes(dir + "/cut.gz", packed.substr(0, packed.size() / 2));
  EXPECT_THROW(read_idx(dir + "/cut.gz"), Error);
  std::string bad_crc = packed;
  bad_crc[bad_crc.size() - 6] ^= 0x5a;  // inside the 4-byte CRC32 of the 8-byte trailer
  write_bytes(dir + "/bad_crc.gz", bad_crc);
  expect_error_with([&] { read_idx(dir + "/bad_crc.gz"); }, {"corrupt gzip data"});
  EXPECT_EQ(read_idx(dir + "/full.gz").data, big);  // the intact file still reads
  // Cut inside or just before its 8-byte trailer (CRC32, length): the payload is all there but
  // can no longer be checked; with one byte changed it was loaded as it came.
  for (size_t cut = 1; cut <= 8; ++cut) {
    std::string no_trailer = packed.substr(0, packed.size() - cut);
    write_bytes(dir + "/no_trailer.gz", no_trailer);
    expect_error_with([&] { read_idx(dir + "/no_trailer.gz"); }, {"truncated gzip stream"});
  }

  expect_error_with([&] { load_idx_images(dir + "/full.gz"); }, {"expected 3 dims (N, H, W), got [4000]"});
  write_bytes(dir + "/images.idx", good);
  expect_error_with([&] { load_idx_labels(dir + "/images.idx"); }, {"expected 1 dim (N), got [3, 2, 2]"});
  expect_error_with([&] { read_idx(dir + "/does_not_exist"); }, {"cannot open", "does_not_exist"});
  fs::remove_all(dir);
}

// Peak resident memory (VmHWM) in bytes after resetting it, or -1 where Linux's clear_refs
// reset is unavailable.
int64_t reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good() ? 0 : -1;
}
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}
int64_t current_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// A gzip file of 1 MB whose header claims 1 GiB (within the 1032:1 deflate bound, so the early
// check passes): the reader's memory must follow the stream, not the claim. A reader that
// allocated the claimed 1 GiB before inflating would find the stream short only afterwards.
TEST(Idx, ShortGzipStreamCostsWhatItHoldsNotWhatItsHeaderClaims) {
  const std::string dir = fresh_temp_dir("idx_short_stream");
  std::vector<uint8_t> payload(1 << 20);
  uint32_t x = 12345;  // incompressible bytes, so the gzip file is about 1 MB
  for (auto& b : payload) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  write_gzip(dir + "/claims_1g.gz", idx_bytes(0x08, {1024, 1024, 1024}, payload));
  ASSERT_GT(fs::file_size(dir + "/claims_1g.gz") * 1032, uint64_t(1) << 30);
  const bool measured = reset_peak_rss() == 0;
  const int64_t before = current_rss_bytes();
  expect_error_with([&] { read_idx(dir + "/claims_1g.gz"); },
                    {"claims_1g.gz", "truncated", "need 1073741824 bytes", "the gzip stream has 1048576"});
  if (measured && before > 0) {
    // The stream's 1 MB plus a chunk or two of slack, far below the 1 GiB the header claims.
    EXPECT_LT(peak_rss_bytes() - before, int64_t(16) << 20);
  }
  // The same file with its payload complete reads exactly.
  write_gzip(dir + "/exact.gz", idx_bytes(0x08, {1024, 1024}, payload));
  EXPECT_EQ(read_idx(dir + "/exact.gz").data, payload);
  fs::remove_all(dir);
}

TEST(Idx, FashionMnistHelperErrors) {
  expect_error_with([&] { data::load_fashion_mnist("train", "/nonexistent/fashion"); },
                    {"the data folder /nonexistent/fashion does not exist", "apt-get install dataset-fashion-mnist"});
  expect_error_with([&] { data::load_fashion_mnist("test", data_path("")); },
                    {"t10k-images-idx3-ubyte.gz not found", "apt-get install dataset-fashion-mnist"});
  expect_error_with([&] { data::load_fashion_mnist("validation", subset_dir()); }, {"\"train\" or \"test\"", "validation"});

  // Images and labels that disagree in count, then a label outside the 10 classes.
  const std::string dir = fresh_temp_dir("idx_helper");
  write_gzip(dir + "/train-images-idx3-ubyte.gz", idx_bytes(0x08, {2, 28, 28}, std::vector<uint8_t>(2 * 784, 1)));
  write_gzip(dir + "/train-labels-idx1-ubyte.gz", idx_bytes(0x08, {3}, {1, 2, 3}));
  expect_error_with([&] { data::load_fashion_mnist("train", dir); }, {"has 2 images but", "has 3 labels"});
  write_gzip(dir + "/train-labels-idx1-ubyte.gz", idx_bytes(0x08, {2}, {1, 10}));
  expect_error_with([&] { data::load_fashion_mnist("train", dir); }, {"label 1 is 10", "[0, 10)"});

  // Images other than 28x28 (the examples' models take 784 pixels), and a split of no images.
  const std::string images = dir + "/train-images-idx3-ubyte.gz";
  write_gzip(dir + "/train-labels-idx1-ubyte.gz", idx_bytes(0x08, {2}, {1, 2}));
  write_gzip(images, idx_bytes(0x08, {2, 14, 56}, std::vector<uint8_t>(2 * 784, 1)));
  expect_error_with([&] { data::load_fashion_mnist("train", dir); },
                    {images, "holds images of 14x56 pixels, expected Fashion-MNIST's 28x28"});
  write_gzip(images, idx_bytes(0x08, {0, 28, 28}, {}));
  expect_error_with([&] { data::load_fashion_mnist("train", dir); },
                    {images, "holds no images", "the train split needs at least one"});

  // The folder itself: an empty path, or a file instead of a folder.
  expect_error_with([&] { data::load_fashion_mnist("train", ""); }, {"the data folder is an empty path"});
  expect_error_with([&] { data::load_fashion_mnist("train", images); },
                    {"the data folder " + images + " is not a folder", "apt-get install dataset-fashion-mnist"});
  fs::remove_all(dir);
}

// The full dataset, when Debian's package is installed (it is on the project's machines).
TEST(Idx, FullFashionMnistWhenInstalled) {
  if (!fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  data::ImageDataset test = data::load_fashion_mnist("test");
  EXPECT_EQ(test.images.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(test.labels.shape(), (Shape{10000}));
  // Fashion-MNIST's test split is balanced: 1000 items of each class.
  std::vector<int64_t> hist(10, 0);
  for (int64_t l : test.labels.to_vector<int64_t>()) hist[static_cast<size_t>(l)]++;
  EXPECT_EQ(hist, std::vector<int64_t>(10, 1000));
  // The committed subset is the first 256 items of the full split.
  data::ImageDataset sub = data::load_fashion_mnist("test", subset_dir());
  expect_close(test.images.narrow(0, 0, 256), sub.images, 0, 0, "subset images");
  expect_close(test.labels.narrow(0, 0, 256), sub.labels, 0, 0, "subset labels");
}

TEST(Idx, RandomCorruptionsLoadOrThrowTgError) {
  const std::string dir = fresh_temp_dir("idx_fuzz");
  std::vector<uint8_t> payload(3 * 5 * 4);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 37);
  const std::string raw = idx_bytes(0x08, {3, 5, 4}, payload);
  write_gzip(dir + "/good.gz", raw);
  int loaded = 0, rejected = 0;
  auto load = [](const std::string& p) { load_idx_images(p); };
  expect_only_tg_errors(corruptions_of(raw, 3, 150), dir + "/fuzz", load, &loaded, &rejected);
  EXPECT_GT(rejected, 30);
  EXPECT_GT(loaded, 15);
  // Corrupting the compressed bytes: zlib's errors (and CRC checks) must surface as tg::Error.
  expect_only_tg_errors(corruptions_of(read_bytes(dir + "/good.gz"), 4, 150), dir + "/fuzz.gz",
                                     load, &loaded, &rejected);
  EXPECT_GT(rejected, 90);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tg
