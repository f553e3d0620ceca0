#include "spatial_transformer.h"

#include <cmath>

#include "../framework/grad_mode.h"
#include "../ops/activation.h"
#include "../ops/grid_sample.h"

namespace tg {

namespace {
constexpr int64_t kSide = 28;
}

SpatialTransformerClassifier::SpatialTransformerClassifier(int64_t loc_hidden, int64_t hidden, DType dtype,
                                                           Generator* gen) {
  loc1 = add_module("loc1", std::make_shared<Linear>(kSide * kSide, loc_hidden, true, dtype, gen));
  loc2 = add_module("loc2", std::make_shared<Linear>(loc_hidden, 6, true, dtype, gen));
  classifier = add_module("classifier", std::make_shared<MLP>(std::vector<int64_t>{kSide * kSide, hidden, 10}, dtype, gen));
  NoGradGuard no_grad;
  loc2->weight.zero_();
  loc2->bias.copy_(from_vector(std::vector<double>{1, 0, 0, 0, 1, 0}, {6}));
}

Tensor SpatialTransformerClassifier::theta(const Tensor& images) {
  const int64_t b = images.size(0);
  return loc2->forward(relu(loc1->forward(images.reshape({b, kSide * kSide})))).reshape({b, 2, 3});
}

Tensor SpatialTransformerClassifier::rectify(const Tensor& images) {
  const int64_t b = images.size(0);
  Tensor grid = affine_grid(theta(images), {b, 1, kSide, kSide}, false);
  return grid_sample(images.reshape({b, 1, kSide, kSide}), grid, GridSampleMode::Bilinear, GridSamplePadding::Zeros,
                     false);
}

Tensor SpatialTransformerClassifier::forward(const Tensor& images) {
  const int64_t b = images.size(0);
  return classifier->forward(rectify(images).reshape({b, kSide * kSide}));
}

Tensor random_affine_distort(const Tensor& images, Generator& gen, double max_degrees, double min_scale,
                             double max_scale, double max_shift) {
  TG_CHECK(images.dim() == 3, "random_affine_distort: expected images of shape [B, H, W], got ",
           format_shape(images.shape()));
  TG_CHECK(min_scale > 0 && max_scale >= min_scale, "random_affine_distort: expected 0 < min_scale <= max_scale, got ",
           min_scale, " and ", max_scale);
  NoGradGuard no_grad;
  const int64_t b = images.size(0), h = images.size(1), w = images.size(2);
  // The sampler reads the source at theta (x_out, y_out, 1): to show the content rotated by
  // a, scaled by s and moved by t, read at A (out - t) with A = R(-a) / s.
  Tensor theta = Tensor::empty({b, 2, 3}, DType::Float64);
  double* th = theta.data<double>();
  const double kPi = 3.14159265358979323846;
  for (int64_t i = 0; i < b; ++i) {
    const double a = (2 * gen.next_double() - 1) * max_degrees * kPi / 180;
    const double s = min_scale + (max_scale - min_scale) * gen.next_double();
    const double tx = (2 * gen.next_double() - 1) * max_shift, ty = (2 * gen.next_double() - 1) * max_shift;
    const double c = std::cos(a) / s, sn = std::sin(a) / s;
    double* t = th + 6 * i;
    t[0] = c, t[1] = sn, t[3] = -sn, t[4] = c;
    t[2] = -(t[0] * tx + t[1] * ty);
    t[5] = -(t[3] * tx + t[4] * ty);
  }
  Tensor grid = affine_grid(theta.to(images.dtype()), {b, 1, h, w}, false);
  return grid_sample(images.reshape({b, 1, h, w}), grid, GridSampleMode::Bilinear, GridSamplePadding::Zeros, false)
      .reshape({b, h, w});
}

}  // namespace tg
