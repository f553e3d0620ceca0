// Scenes: deterministic from (seed, index), 1 to 4 items, boxes exactly tight around the pasted
// pixels, classes from the dataset's labels.
#include <gtest/gtest.h>

#include "detr/scenes.h"
#include "io_test_util.h"

namespace tg::detr {
namespace {

data::ImageDataset subset(const std::string& split) {
  return data::load_fashion_mnist(split, tg::testing::data_path("fashion_mnist_subset"));
}

TEST(DetrScenes, DeterministicFromSeedAndIndex) {
  data::ImageDataset train = subset("train");
  SceneGenerator a(train, {}, 5), b(train, {}, 5), c(train, {}, 6);
  for (int64_t i : {0, 1, 17, 1000}) {
    Scene x = a.scene(i), y = b.scene(i);
    EXPECT_EQ(x.image.to_vector<float>(), y.image.to_vector<float>());
    EXPECT_EQ(x.classes, y.classes);
    EXPECT_EQ(x.boxes, y.boxes);
  }
  // Order does not matter: scene 17 alone equals scene 17 of a batch starting at 15.
  SceneBatch batch = make_batch(a, 15, 4);
  EXPECT_EQ(batch.scenes[2].image.to_vector<float>(), a.scene(17).image.to_vector<float>());
  EXPECT_EQ(batch.images.shape(), (Shape{4, 1, 64, 64}));
  // Another seed gives other scenes.
  int differ = 0;
  for (int64_t i = 0; i < 8; ++i) differ += a.scene(i).image.to_vector<float>() != c.scene(i).image.to_vector<float>();
  EXPECT_EQ(differ, 8);
}

TEST(DetrScenes, BoxesAreTightAndCoverEveryPixel) {
  data::ImageDataset train = subset("train");
  SceneOptions opt;
  SceneGenerator gen(train, opt, 1);
  std::vector<int> count_seen(5, 0);
  for (int64_t i = 0; i < 200; ++i) {
    Scene s = gen.scene(i);
    const int64_t n = static_cast<int64_t>(s.classes.size());
    ASSERT_GE(n, 1);
    ASSERT_LE(n, 4);
    ++count_seen[n];
    const float* p = s.image.data<float>();
    const int64_t S = opt.canvas;
    std::vector<char> covered(S * S, 0);
    for (int64_t k = 0; k < n; ++k) {
      const auto& b = s.boxes[k];
      EXPECT_GE(s.classes[k], 0);
      EXPECT_LT(s.classes[k], 10);
      ASSERT_TRUE(b[0] >= 0 && b[1] >= 0 && b[2] <= S && b[3] <= S && b[0] < b[2] && b[1] < b[3]);
      const int64_t x0 = b[0], y0 = b[1], x1 = b[2] - 1, y1 = b[3] - 1;  // inclusive pixel bounds
      // Tight: each of the four edge lines holds a lit pixel.
      bool top = false, bottom = false, left = false, right = false;
      for (int64_t x = x0; x <= x1; ++x) top |= p[y0 * S + x] > 0, bottom |= p[y1 * S + x] > 0;
      for (int64_t y = y0; y <= y1; ++y) left |= p[y * S + x0] > 0, right |= p[y * S + x1] > 0;
      EXPECT_TRUE(top && bottom && left && right) << "scene " << i << " box " << k;
      for (int64_t y = y0; y <= y1; ++y)
        for (int64_t x = x0; x <= x1; ++x) covered[y * S + x] = 1;
    }
    // Every lit pixel belongs to some box.
    for (int64_t j = 0; j < S * S; ++j)
      if (p[j] > 0) { ASSERT_TRUE(covered[j]) << "scene " << i << " pixel " << j; }
    // Normalised targets: cxcywh in [0, 1].
    Target t = s.target(S);
    for (const auto& b : t.boxes)
      for (double v : b) EXPECT_TRUE(v >= 0 && v <= 1);
  }
  for (int n = 1; n <= 4; ++n) EXPECT_GT(count_seen[n], 20) << n << " items";  // ~50 each expected
}

TEST(DetrScenes, SingleItemBoxIsTheLitBoundingBox) {
  SceneOptions opt;
  opt.max_items = 1;
  SceneGenerator gen(subset("test"), opt, 2);
  for (int64_t i = 0; i < 20; ++i) {
    Scene s = gen.scene(i);
    ASSERT_EQ(s.boxes.size(), 1u);
    const float* p = s.image.data<float>();
    int64_t x0 = 64, y0 = 64, x1 = -1, y1 = -1;
    for (int64_t y = 0; y < 64; ++y)
      for (int64_t x = 0; x < 64; ++x)
        if (p[y * 64 + x] > 0) x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x), y1 = std::max(y1, y);
    EXPECT_EQ(s.boxes[0], (std::array<double, 4>{double(x0), double(y0), double(x1 + 1), double(y1 + 1)}));
  }
}

TEST(DetrScenes, ResizeBilinearKeepsConstantsAndHalvesExactly) {
  std::vector<float> ones(28 * 28, 0.75f);
  for (float v : resize_bilinear(ones.data(), 28, 28, 17, 33)) EXPECT_FLOAT_EQ(v, 0.75f);
  // 2x downscale with align_corners=False samples midway between pixel pairs: the 2x2 mean.
  std::vector<float> src = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  std::vector<float> out = resize_bilinear(src.data(), 4, 4, 2, 2);
  EXPECT_FLOAT_EQ(out[0], 2.5f);
  EXPECT_FLOAT_EQ(out[3], 12.5f);
}

TEST(DetrScenes, RejectsImpossibleOptions) {
  data::ImageDataset train = subset("train");
  SceneOptions opt;
  opt.max_side = 80;  // larger than the 64 canvas
  EXPECT_THROW(SceneGenerator(train, opt, 0), Error);
  opt = {};
  opt.min_items = 0;
  EXPECT_THROW(SceneGenerator(train, opt, 0), Error);
  EXPECT_THROW(data::load_fashion_mnist("train", "/nonexistent"), Error);
}

// Labels are checked against the images up front: fewer labels than images made scene() read
// past them.
TEST(DetrScenes, RejectsLabelsThatDoNotMatchTheImages) {
  data::ImageDataset ds;
  ds.images = rand({10, 28, 28});
  ds.labels = from_vector(std::vector<int64_t>{1, 2}, {2});
  tg::testing::expect_error_with([&] { SceneGenerator(ds, {}, 1); },
                                 {"scenes: expected one int64 label per image (labels of shape [10])", "int64 [2]"});
  ds.labels = zeros({10}, DType::Int32);
  tg::testing::expect_error_with([&] { SceneGenerator(ds, {}, 1); }, {"got int32 [10]"});
  ds.labels = Tensor();
  tg::testing::expect_error_with([&] { SceneGenerator(ds, {}, 1); }, {"got undefined labels"});
  ds.labels = zeros({10}, DType::Int64);
  EXPECT_EQ(SceneGenerator(ds, {}, 1).scene(3).classes.size() > 0, true);
}

}  // namespace
}  // namespace tg::detr
