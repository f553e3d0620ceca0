#include "scenes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "box_ops.h"

namespace tg::detr {
namespace {

// splitmix64: turns (seed, index) into well-spread generator seeds.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t uniform_int(Generator& g, int64_t lo, int64_t hi) {  // [lo, hi]
  return lo + static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

Target Scene::target(int64_t canvas) const {
  Target t;
  t.classes = classes;
  const double s = static_cast<double>(canvas);
  for (const auto& b : boxes)
    t.boxes.push_back({(b[0] + b[2]) / (2 * s), (b[1] + b[3]) / (2 * s), (b[2] - b[0]) / s, (b[3] - b[1]) / s});
  return t;
}

std::vector<float> resize_bilinear(const float* src, int64_t h, int64_t w, int64_t out_h, int64_t out_w) {
  std::vector<float> out(out_h * out_w);
  const double sy = static_cast<double>(h) / out_h, sx = static_cast<double>(w) / out_w;
  for (int64_t y = 0; y < out_h; ++y) {
    const double fy = std::max(0.0, (y + 0.5) * sy - 0.5);
    const int64_t y0 = std::min<int64_t>(static_cast<int64_t>(fy), h - 1), y1 = std::min<int64_t>(y0 + 1, h - 1);
    const double ly = fy - y0;
    for (int64_t x = 0; x < out_w; ++x) {
      const double fx = std::max(0.0, (x + 0.5) * sx - 0.5);
      const int64_t x0 = std::min<int64_t>(static_cast<int64_t>(fx), w - 1), x1 = std::min<int64_t>(x0 + 1, w - 1);
      const double lx = fx - x0;
      out[y * out_w + x] = static_cast<float>((1 - ly) * ((1 - lx) * src[y0 * w + x0] + lx * src[y0 * w + x1]) +
                                              ly * ((1 - lx) * src[y1 * w + x0] + lx * src[y1 * w + x1]));
    }
  }
  return out;
}

SceneGenerator::SceneGenerator(data::ImageDataset items, SceneOptions options, uint64_t seed)
    : items_(std::move(items)), options_(options), seed_(seed) {
  TG_CHECK(items_.images.defined() && items_.images.dim() == 3 && items_.images.size(0) > 0,
           "scenes: expected a non-empty dataset of [N, H, W] images");
  TG_CHECK(items_.images.dtype() == DType::Float32, "scenes: expected float32 images");
  // scene() reads labels[item] for any item below N: one int64 label per image.
  TG_CHECK(items_.labels.defined() && items_.labels.dtype() == DType::Int64 && items_.labels.dim() == 1 &&
               items_.labels.size(0) == items_.images.size(0),
           "scenes: expected one int64 label per image (labels of shape [", items_.images.size(0), "]), got ",
           items_.labels.defined() ? std::string(dtype_name(items_.labels.dtype())) + " " + format_shape(items_.labels.shape())
                                   : std::string("undefined labels"));
  TG_CHECK(options_.min_items >= 1 && options_.min_items <= options_.max_items,
           "scenes: expected 1 <= min_items <= max_items, got ", options_.min_items, " and ", options_.max_items);
  TG_CHECK(options_.min_side >= 4 && options_.min_side <= options_.max_side && options_.max_side <= options_.canvas,
           "scenes: expected 4 <= min_side <= max_side <= canvas, got ", options_.min_side, ", ", options_.max_side,
           ", ", options_.canvas);
  items_.images = items_.images.contiguous();
  items_.labels = items_.labels.contiguous();
}

Scene SceneGenerator::scene(int64_t index) const {
  Generator g(mix(mix(seed_) ^ static_cast<uint64_t>(index)));
  const int64_t S = options_.canvas, N = items_.images.size(0);
  const int64_t h = items_.images.size(1), w = items_.images.size(2);
  Scene scene;
  scene.image = zeros({1, S, S});
  float* canvas = scene.image.data<float>();
  const float* all = items_.images.data<float>();
  const int64_t* labels = items_.labels.data<int64_t>();
  const int64_t count = uniform_int(g, options_.min_items, options_.max_items);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t item = uniform_int(g, 0, N - 1);
    const int64_t side = uniform_int(g, options_.min_side, options_.max_side);
    const std::vector<float> patch = resize_bilinear(all + item * h * w, h, w, side, side);
    // The tight box inside the patch: rows and columns holding a non-zero pixel.
    int64_t r0 = side, r1 = -1, c0 = side, c1 = -1;
    for (int64_t y = 0; y < side; ++y)
      for (int64_t x = 0; x < side; ++x)
        if (patch[y * side + x] > 0) {
          r0 = std::min(r0, y), r1 = std::max(r1, y), c0 = std::min(c0, x), c1 = std::max(c1, x);
        }
    if (r1 < 0) continue;  // a blank item has no box; leave it out
    // Place it; re-draw positions that overlap earlier items too much (bounded, deterministic).
    int64_t px = 0, py = 0;
    std::array<double, 4> box{};
    for (int attempt = 0; attempt < 10; ++attempt) {
      px = uniform_int(g, -c0, S - 1 - c1);  // the item's pixels, not its square, must fit
      py = uniform_int(g, -r0, S - 1 - r1);
      box = {static_cast<double>(px + c0), static_cast<double>(py + r0), static_cast<double>(px + c1 + 1),
             static_cast<double>(py + r1 + 1)};
      double worst = 0;
      for (const auto& other : scene.boxes) worst = std::max(worst, box_iou_value(box.data(), other.data()));
      if (worst <= options_.max_overlap) break;
    }
    // Max-composite: an overlapping item never erases another's pixels, so every box stays tight.
    for (int64_t y = r0; y <= r1; ++y)
      for (int64_t x = c0; x <= c1; ++x) {
        float& dst = canvas[(py + y) * S + (px + x)];
        dst = std::max(dst, patch[y * side + x]);
      }
    scene.classes.push_back(labels[item]);
    scene.boxes.push_back(box);
  }
  return scene;
}

SceneBatch make_batch(const SceneGenerator& gen, int64_t first, int64_t count) {
  TG_CHECK(count >= 1, "make_batch: expected count >= 1, got ", count);
  const int64_t S = gen.options().canvas;
  SceneBatch batch;
  batch.images = Tensor::empty({count, 1, S, S});
  float* dst = batch.images.data<float>();
  for (int64_t i = 0; i < count; ++i) {
    Scene s = gen.scene(first + i);
    std::memcpy(dst + i * S * S, s.image.data<float>(), sizeof(float) * S * S);
    batch.targets.push_back(s.target(S));
    batch.scenes.push_back(std::move(s));
  }
  return batch;
}

}  // namespace tg::detr
