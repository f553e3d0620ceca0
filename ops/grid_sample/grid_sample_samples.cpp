// The registry's sample cases of grid_sample (2-D and 3-D) and affine_grid: the inputs the generic
// gradcheck, gradgradcheck and 16-bit tests run (tests/test_registry_*.cpp).
#include <vector>

#include "../internal/samples.h"
#include "internal/grid_sample_common.h"

namespace tg::grid_sample_detail {

namespace {

// A grid whose points sit 0.15 to 0.35 pixels from an integer pixel coordinate (so away from
// bilinear's and bicubic's kinks at integers and nearest's ties at half-integers) and inside
// the clip limits of border / reflection. `outside`: also points beyond the image, for zeros
// padding (smooth there) and reflection with align_corners (reflected about the corner-pixel
// centres, which maps a distance from an integer to the same distance).
// grid_shape is [N, Ho, Wo, 2] or [N, Do, Ho, Wo, 3]; sizes the input's extent along each grid
// coordinate: {W, H} or {W, H, D} (x indexes W, y indexes H, z indexes D).
Tensor kink_free_grid(const Shape& grid_shape, const std::vector<int64_t>& sizes, bool align_corners, bool outside,
                      DType dt) {
  Tensor grid = Tensor::empty(grid_shape, DType::Float64);
  double* d = grid.data<double>();
  Generator& gen = default_generator();
  const int64_t R = static_cast<int64_t>(sizes.size());
  for (int64_t i = 0; i < grid.numel(); ++i) {
    const int64_t size = sizes[i % R];
    const int64_t lo = outside ? -1 : 0, hi = outside ? size : size - 1;  // cells [lo, hi)
    const double cell = static_cast<double>(lo + static_cast<int64_t>(gen.next_double() * static_cast<double>(hi - lo)));
    const double frac = 0.15 + 0.2 * gen.next_double();
    const double pixel = cell + (gen.next_double() < 0.5 ? frac : 1.0 - frac);
    const double s = static_cast<double>(size);
    d[i] = align_corners ? 2.0 * pixel / (s - 1.0) - 1.0 : (2.0 * pixel + 1.0) / s - 1.0;
  }
  Tensor out = grid.to(dt);
  out.requires_grad_();
  return out;
}

}  // namespace

std::vector<SampleCase> grid_sample_samples() {
  auto make = [](int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo, bool ac, bool outside) {
    return [=](DType dt) {
      return std::vector<Tensor>{sample_tensor({N, C, H, W}, dt),
                                 kink_free_grid({N, Ho, Wo, 2}, {W, H}, ac, outside, dt)};
    };
  };
  auto run = [](GridSampleMode m, GridSamplePadding p, bool ac) {
    return [=](const std::vector<Tensor>& x) { return std::vector<Tensor>{grid_sample(x[0], x[1], m, p, ac)}; };
  };
  using M = GridSampleMode;
  using P = GridSamplePadding;
  return {
      {"bilinear, zeros, points outside, N 2, C 2, 3x4 -> 2x3", make(2, 2, 3, 4, 2, 3, false, true),
       run(M::Bilinear, P::Zeros, false)},
      {"bilinear, border, align_corners, N 1, C 3, 4x3 -> 3x2", make(1, 3, 4, 3, 3, 2, true, false),
       run(M::Bilinear, P::Border, true)},
      {"bilinear, reflection, align_corners, points outside, N 2, C 1, 3x4 -> 2x2", make(2, 1, 3, 4, 2, 2, true, true),
       run(M::Bilinear, P::Reflection, true)},
      {"bilinear, reflection, N 1, C 2, 4x4 -> 2x3", make(1, 2, 4, 4, 2, 3, false, false),
       run(M::Bilinear, P::Reflection, false)},
      {"nearest, zeros, points outside, N 2, C 2, 3x4 -> 2x2", make(2, 2, 3, 4, 2, 2, false, true),
       run(M::Nearest, P::Zeros, false)},
      {"bicubic, zeros, align_corners, points outside, N 1, C 2, 4x5 -> 2x3", make(1, 2, 4, 5, 2, 3, true, true),
       run(M::Bicubic, P::Zeros, true)},
      {"bicubic, border, N 2, C 1, 4x4 -> 2x2", make(2, 1, 4, 4, 2, 2, false, false),
       run(M::Bicubic, P::Border, false)},
      // Appended (the seeds go by index): with the cases above, bilinear has every padding
      // with align_corners both ways, for the generic gradgradcheck.
      {"bilinear, zeros, align_corners, points outside, N 1, C 2, 4x3 -> 2x3", make(1, 2, 4, 3, 2, 3, true, true),
       run(M::Bilinear, P::Zeros, true)},
      {"bilinear, border, N 2, C 2, 3x5 -> 2x2", make(2, 2, 3, 5, 2, 2, false, false),
       run(M::Bilinear, P::Border, false)},
      {"nearest, reflection, align_corners, N 1, C 2, 4x4 -> 2x3", make(1, 2, 4, 4, 2, 3, true, false),
       run(M::Nearest, P::Reflection, true)},
      {"bicubic, reflection, align_corners, points outside, N 1, C 1, 5x4 -> 2x2", make(1, 1, 5, 4, 2, 2, true, true),
       run(M::Bicubic, P::Reflection, true)},
  };
}


// Volumes: every padding with align_corners both ways for trilinear, and nearest, at sizes small
// enough for the float64 finite differences of the gradgradcheck.
std::vector<SampleCase> grid_sampler_3d_samples() {
  auto make = [](int64_t N, int64_t C, Shape in, Shape out, bool ac, bool outside) {
    return [=](DType dt) {
      const Shape grid_shape{N, out[0], out[1], out[2], 3};
      return std::vector<Tensor>{sample_tensor({N, C, in[0], in[1], in[2]}, dt),
                                 kink_free_grid(grid_shape, {in[2], in[1], in[0]}, ac, outside, dt)};
    };
  };
  auto run = [](GridSampleMode m, GridSamplePadding p, bool ac) {
    return [=](const std::vector<Tensor>& x) { return std::vector<Tensor>{grid_sample(x[0], x[1], m, p, ac)}; };
  };
  using M = GridSampleMode;
  using P = GridSamplePadding;
  return {
      {"trilinear, zeros, points outside, N 2, C 2, 2x3x4 -> 2x2x2", make(2, 2, {2, 3, 4}, {2, 2, 2}, false, true),
       run(M::Bilinear, P::Zeros, false)},
      {"trilinear, zeros, align_corners, points outside, N 1, C 2, 3x3x2 -> 2x1x2",
       make(1, 2, {3, 3, 2}, {2, 1, 2}, true, true), run(M::Bilinear, P::Zeros, true)},
      {"trilinear, border, align_corners, N 1, C 2, 3x3x3 -> 2x2x1", make(1, 2, {3, 3, 3}, {2, 2, 1}, true, false),
       run(M::Bilinear, P::Border, true)},
      {"trilinear, border, N 2, C 1, 2x3x3 -> 1x2x2", make(2, 1, {2, 3, 3}, {1, 2, 2}, false, false),
       run(M::Bilinear, P::Border, false)},
      {"trilinear, reflection, align_corners, points outside, N 1, C 1, 3x4x3 -> 2x1x2",
       make(1, 1, {3, 4, 3}, {2, 1, 2}, true, true), run(M::Bilinear, P::Reflection, true)},
      {"trilinear, reflection, N 1, C 2, 3x3x3 -> 1x2x2", make(1, 2, {3, 3, 3}, {1, 2, 2}, false, false),
       run(M::Bilinear, P::Reflection, false)},
      {"nearest, zeros, points outside, N 2, C 2, 2x3x3 -> 2x2x1", make(2, 2, {2, 3, 3}, {2, 2, 1}, false, true),
       run(M::Nearest, P::Zeros, false)},
      {"nearest, reflection, align_corners, N 1, C 2, 3x2x3 -> 1x2x2", make(1, 2, {3, 2, 3}, {1, 2, 2}, true, false),
       run(M::Nearest, P::Reflection, true)},
  };
}

std::vector<SampleCase> affine_grid_generator_backward_samples() {
  return {{"N 2, 3x4 grad, align_corners",
           [](DType dt) { return std::vector<Tensor>{sample_tensor({2, 3, 4, 2}, dt)}; },
           [](const std::vector<Tensor>& x) {
             return std::vector<Tensor>{affine_grid_generator_backward(x[0], {2, 1, 3, 4}, true)};
           }},
          {"3-D, N 1, 2x3x2 grad",
           [](DType dt) { return std::vector<Tensor>{sample_tensor({1, 2, 3, 2, 3}, dt)}; },
           [](const std::vector<Tensor>& x) {
             return std::vector<Tensor>{affine_grid_generator_backward(x[0], {1, 1, 2, 3, 2}, false)};
           }}};
}

std::vector<SampleCase> affine_grid_samples() {
  auto make = [](int64_t N, int64_t rows = 2) {
    return [=](DType dt) { return std::vector<Tensor>{sample_tensor({N, rows, rows + 1}, dt)}; };
  };
  auto run = [](std::vector<int64_t> size, bool ac) {
    return [=](const std::vector<Tensor>& x) { return std::vector<Tensor>{affine_grid(x[0], size, ac)}; };
  };
  return {{"N 2, 3x4, align_corners", make(2), run({2, 1, 3, 4}, true)},
          {"N 1, 5x2", make(1), run({1, 3, 5, 2}, false)},
          {"N 1, 1x3 (a size of 1 gives 0)", make(1), run({1, 1, 1, 3}, false)},
          // Appended (the seeds go by index): volumes, theta (N, 3, 4).
          {"3-D, N 2, 2x3x2, align_corners", make(2, 3), run({2, 1, 2, 3, 2}, true)},
          {"3-D, N 1, 1x2x3 (a size of 1 gives 0)", make(1, 3), run({1, 2, 1, 2, 3}, false)}};
}


}  // namespace tg::grid_sample_detail
