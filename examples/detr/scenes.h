// Detection scenes from Fashion-MNIST: 1 to 4 items pasted at random scales and positions on a
// black square canvas, with exact boxes and classes. Scene i of a seed is a pure function of
// (seed, i): it draws from its own generator, so a batch does not depend on which scenes came
// before it, the thread count or the batch size.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "detr_loss.h"

namespace tg::detr {

inline constexpr const char* kFashionClassNames[10] = {"T-shirt", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal",  "Shirt",   "Sneaker",  "Bag",   "Boot"};

struct SceneOptions {
  int64_t canvas = 64;      // square canvas side in pixels
  int64_t min_items = 1, max_items = 4;
  int64_t min_side = 16;    // an item's 28x28 square is resized to a side in [min_side, max_side]
  int64_t max_side = 36;
  double max_overlap = 0.3;  // re-draw a position (a few times) whose box IoU with an earlier item exceeds this
};

struct Scene {
  Tensor image;                                // float32 [1, canvas, canvas] in [0, 1]
  std::vector<int64_t> classes;                // Fashion-MNIST labels
  std::vector<std::array<double, 4>> boxes;    // xyxy in pixels, tight around the item's non-zero pixels
  Target target(int64_t canvas) const;         // normalised cxcywh, what the loss takes
};

class SceneGenerator {
 public:
  // Throws tg::Error when the options cannot make a scene (canvas smaller than an item, ...)
  // or the dataset is empty.
  SceneGenerator(data::ImageDataset items, SceneOptions options, uint64_t seed);
  Scene scene(int64_t index) const;
  const SceneOptions& options() const { return options_; }

 private:
  data::ImageDataset items_;
  SceneOptions options_;
  uint64_t seed_;
};

struct SceneBatch {
  Tensor images;  // float32 [B, 1, canvas, canvas]
  std::vector<Target> targets;
  std::vector<Scene> scenes;
};
SceneBatch make_batch(const SceneGenerator& gen, int64_t first, int64_t count);

// Bilinear resize of a [h, w] float image (align_corners=False, edges clamped), as a plain kernel.
std::vector<float> resize_bilinear(const float* src, int64_t h, int64_t w, int64_t out_h, int64_t out_w);

}  // namespace tg::detr
