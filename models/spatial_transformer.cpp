#include "spatial_transformer.h"

#include <cmath>

#include "../framework/grad_mode.h"
#include "../ops/activation.h"
#include "../ops/grid_sample/grid_sample.h"

namespace tg {

namespace {
constexpr int64_t kSide = 28;

// (B, 28, 28), (B, 1, 28, 28) or (B, 784) -> (B, 1, 28, 28).
Tensor as_images(const Tensor& images) { return images.reshape({images.size(0), 1, kSide, kSide}); }

// Conv2d(c_in, c_mid, k1) MaxPool2d(2) ReLU Conv2d(c_mid, c_out, k2) MaxPool2d(2) ReLU.
std::shared_ptr<Sequential> conv_pool_relu_twice(int64_t c_in, int64_t c_mid, int64_t k1, int64_t c_out, int64_t k2,
                                                 DType dtype, Generator* gen) {
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Conv2d>(c_in, c_mid, IntList{k1}, IntList{1}, IntList{0}, IntList{1}, 1, true, dtype,
                                        gen));
  s->push_back(std::make_shared<MaxPool2d>(IntList{2}));
  s->push_back(std::make_shared<ReLU>());
  s->push_back(std::make_shared<Conv2d>(c_mid, c_out, IntList{k2}, IntList{1}, IntList{0}, IntList{1}, 1, true, dtype,
                                        gen));
  s->push_back(std::make_shared<MaxPool2d>(IntList{2}));
  s->push_back(std::make_shared<ReLU>());
  return s;
}
}  // namespace

ConvClassifier::ConvClassifier(int64_t hidden, DType dtype, Generator* gen) {
  features = add_module("features", conv_pool_relu_twice(1, 10, 5, 20, 5, dtype, gen));  // 28 -> 24 -> 12 -> 8 -> 4
  head = add_module("head", std::make_shared<MLP>(std::vector<int64_t>{20 * 4 * 4, hidden, 10}, dtype, gen));
}

Tensor ConvClassifier::forward(const Tensor& images) {
  const int64_t b = images.size(0);
  return head->forward(features->forward(as_images(images)).reshape({b, 20 * 4 * 4}));
}

SpatialTransformerClassifier::SpatialTransformerClassifier(int64_t loc_hidden, int64_t hidden, DType dtype,
                                                           Generator* gen) {
  // 28 -> 22 -> 11 -> 7 -> 3
  localization = add_module("localization", conv_pool_relu_twice(1, 8, 7, 10, 5, dtype, gen));
  fc_loc = add_module("fc_loc", std::make_shared<MLP>(std::vector<int64_t>{10 * 3 * 3, loc_hidden, 6}, dtype, gen));
  fc_loc_out = std::dynamic_pointer_cast<Linear>((*fc_loc)[2]);
  classifier = add_module("classifier", std::make_shared<ConvClassifier>(hidden, dtype, gen));
  NoGradGuard no_grad;
  fc_loc_out->weight.zero_();
  fc_loc_out->bias.copy_(from_vector(std::vector<double>{1, 0, 0, 0, 1, 0}, {6}));
}

std::vector<Tensor> SpatialTransformerClassifier::localisation_parameters() const {
  std::vector<Tensor> p = localization->parameters(), fc = fc_loc->parameters();
  p.insert(p.end(), fc.begin(), fc.end());
  return p;
}

Tensor SpatialTransformerClassifier::theta(const Tensor& images) {
  const int64_t b = images.size(0);
  Tensor features = localization->forward(as_images(images)).reshape({b, 10 * 3 * 3});
  return fc_loc->forward(features).reshape({b, 2, 3});
}

Tensor SpatialTransformerClassifier::rectify(const Tensor& images) {
  const int64_t b = images.size(0);
  Tensor grid = affine_grid(theta(images), {b, 1, kSide, kSide}, false);
  return grid_sample(as_images(images), grid, GridSampleMode::Bilinear, GridSamplePadding::Zeros, false);
}

Tensor SpatialTransformerClassifier::forward(const Tensor& images) { return classifier->forward(rectify(images)); }

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
