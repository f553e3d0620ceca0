// Volumetric grid_sample (5-D input) and affine_grid (3-D) against PyTorch's goldens
// (tools/fixtures/grid_sample3d.py): trilinear and nearest x every padding x align_corners in
// float32 and float64, with points on voxel centres, half-voxels, clip limits, far outside, huge
// (up to 1e30) and non-finite; one-voxel axes, output size 1, empty batch; every output mask of
// the kernel API; the bad inputs. The registry's sample cases (ops/grid_sample/grid_sample_samples.cpp)
// put the op through the generic gradcheck, gradgradcheck and 16-bit tests;
// test_thread_determinism.cpp checks its bits across thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

GridSampleMode mode_of(const std::string& s) {
  return s == "bilinear" ? GridSampleMode::Bilinear : GridSampleMode::Nearest;
}
GridSamplePadding padding_of(const std::string& s) {
  return s == "zeros" ? GridSamplePadding::Zeros : s == "border" ? GridSamplePadding::Border
                                                                  : GridSamplePadding::Reflection;
}

// The forward takes PyTorch's taps with PyTorch's weights in its order ((x * y) * z products,
// summed tap by tap), so outputs differ from PyTorch's by a few ulps at most. grad_input sums the
// same products in the same order of positions. grad_grid is computed as edge differences
// weighted by the other two axes' weights, summed over channels in double (float32), where
// PyTorch sums tap by tap in the tensor's type: a few ulps of the largest term. Measured worst
// over all cases (|error| / (1 + |expected|)): output and grad_input bit-identical to PyTorch's
// in both dtypes; grad_grid 8.4e-7 (float32) and 1.9e-15 (float64); affine_grid 6.2e-7 and
// 2.0e-15. The tolerances leave 12x (float32) and 500x (float64) room, while a wrong tap,
// weight, clip or fold (errors of order 0.1; checked: rounding nearest's ties to even, or
// counting the reflection folds exactly instead of as PyTorch's saturating int, fails) fails.
double tol_for(DType dt) { return dt == DType::Float64 ? 1e-12 : 1e-5; }

TEST(GridSample3d, MatchesPyTorchOnEveryModePaddingAndAlignCorners) {
  int seen = 0;
  for (const auto& c : load_golden_cases("grid_sample3d")) {
    if (c.json["op"] != "grid_sample") continue;
    ++seen;
    SCOPED_TRACE(c.name());
    const double tol = tol_for(c.dtype());
    Tensor input = c.tensor("input").requires_grad_();
    Tensor grid = c.tensor("grid").requires_grad_();
    Tensor out = grid_sample(input, grid, mode_of(c.json["mode"]), padding_of(c.json["padding_mode"]),
                             c.json["align_corners"].get<bool>());
    ASSERT_EQ(out.dtype(), c.dtype());
    expect_close(out, c.tensor("output"), tol, tol, "output");  // NaN-aware (none expected: see below)
    out.backward(c.tensor("grad_output"));
    expect_close(input.grad(), c.tensor("grad_input"), tol, tol, "grad_input");
    expect_close(grid.grad(), c.tensor("grad_grid"), tol, tol, "grad_grid");
  }
  // 2 modes x 3 paddings x 2 align_corners x 2 dtypes, small and non-finite cases.
  EXPECT_GE(seen, 24 + 14 + 12);
}

TEST(GridSample3d, IntegerFormAndKernelApiMatchTheGoldens) {
  for (const auto& c : load_golden_cases("grid_sample3d")) {
    if (c.json["op"] != "grid_sample") continue;
    SCOPED_TRACE(c.name());
    const int64_t m = static_cast<int64_t>(mode_of(c.json["mode"]));
    const int64_t p = static_cast<int64_t>(padding_of(c.json["padding_mode"]));
    const bool ac = c.json["align_corners"].get<bool>();
    const double tol = tol_for(c.dtype());
    const Tensor input = c.tensor("input"), grid = c.tensor("grid");
    expect_close(grid_sampler_3d(input, grid, m, p, ac), c.tensor("output"), tol, tol, "output");
    GridSampleGrads g = grid_sampler_3d_backward(c.tensor("grad_output"), input, grid, m, p, ac);
    expect_close(g.grad_input, c.tensor("grad_input"), tol, tol, "grad_input");
    expect_close(g.grad_grid, c.tensor("grad_grid"), tol, tol, "grad_grid");
  }
}

// PyTorch 1.13's 3-D kernel never produces NaN from a NaN coordinate: the point has no tap
// in bounds (zeros) or clips to the last voxel (border, reflection; forward only).
TEST(GridSample3d, NonFiniteCoordinatesGiveNoNaN) {
  int seen = 0;
  for (const auto& c : load_golden_cases("grid_sample3d")) {
    if (c.json["op"] != "grid_sample" || !c.json["nonfinite"].get<bool>()) continue;
    ++seen;
    for (const char* key : {"output", "grad_input", "grad_grid"})
      for (double v : c.tensor(key).to(DType::Float64).to_vector<double>()) ASSERT_FALSE(std::isnan(v)) << c.name();
  }
  EXPECT_EQ(seen, 12);
}

TEST(AffineGrid3d, MatchesPyTorch) {
  int seen = 0;
  for (const auto& c : load_golden_cases("grid_sample3d")) {
    if (c.json["op"] != "affine_grid") continue;
    ++seen;
    SCOPED_TRACE(c.name());
    // A 4-term dot product per element; grad_theta sums D*H*W of them (in double).
    const double tol = tol_for(c.dtype());
    const std::vector<int64_t> size = c.json["size"].get<std::vector<int64_t>>();
    const bool ac = c.json["align_corners"].get<bool>();
    Tensor theta = c.tensor("theta").requires_grad_();
    Tensor grid = affine_grid(theta, size, ac);
    expect_close(grid, c.tensor("output"), tol, tol, "output");
    grid.backward(c.tensor("grad_output"));
    expect_close(theta.grad(), c.tensor("grad_theta"), tol, tol, "grad_theta");
    expect_close(affine_grid_generator_backward(c.tensor("grad_output"), size, ac), c.tensor("grad_theta"), tol, tol,
                 "kernel API grad_theta");
  }
  EXPECT_EQ(seen, 8);
}

// PyTorch 1.13's 3-D nearest rounds ties half away from zero (its 2-D kernel: half to even).
TEST(GridSample3d, NearestRoundsTiesAwayFromZero) {
  Tensor input = arange(1, 9, 1, DType::Float64).reshape({1, 1, 1, 1, 8});
  // W = 8 without align_corners: voxel = ((x + 1) * 8 - 1) / 2, exact: 1.5, 2.5, 3.5, 4.5.
  Tensor grid = zeros({1, 1, 1, 4, 3}, DType::Float64);
  std::vector<double> xs{-0.5, -0.25, 0.0, 0.25};
  for (int i = 0; i < 4; ++i) grid.data<double>()[3 * i] = xs[i];
  EXPECT_EQ(grid_sample(input, grid, GridSampleMode::Nearest).to_vector<double>(),
            (std::vector<double>{3, 4, 5, 6}));
}

TEST(GridSample3d, EveryOutputMaskComputesExactlyWhatIsAsked) {
  for (const auto& c : load_golden_cases("grid_sample3d")) {
    if (c.json["op"] != "grid_sample" || c.dtype() != DType::Float64 || c.json["padding_mode"] != "reflection" ||
        c.json["align_corners"].get<bool>() || c.name().rfind("small", 0) == 0)
      continue;
    SCOPED_TRACE(c.name());
    const int64_t m = static_cast<int64_t>(mode_of(c.json["mode"]));
    Tensor g = c.tensor("grad_output"), input = c.tensor("input"), grid = c.tensor("grid");
    GridSampleGrads all = grid_sampler_3d_backward(g, input, grid, m, 2, false, {true, true});
    for (int mask = 0; mask < 4; ++mask) {
      const std::array<bool, 2> om{(mask & 1) != 0, (mask & 2) != 0};
      GridSampleGrads r = grid_sampler_3d_backward(g, input, grid, m, 2, false, om);
      EXPECT_EQ(r.grad_input.defined(), om[0]) << mask;
      EXPECT_EQ(r.grad_grid.defined(), om[1]) << mask;
      if (om[0]) { EXPECT_TRUE(same_bits(r.grad_input, all.grad_input)) << mask; }
      if (om[1]) { EXPECT_TRUE(same_bits(r.grad_grid, all.grad_grid)) << mask; }
    }
  }
}

// Large enough for the parallel paths: N = 1 (grad_input split over channels) and N = 3 (split
// passes), against a float64 run of the same data (float32's error is rounding only).
TEST(GridSample3d, LargeVolumesMatchFloat64) {
  for (int64_t N : {1, 3}) {
    manual_seed(61 + N);
    Tensor x = randn({N, 5, 12, 14, 10}, DType::Float64), grid = rand({N, 16, 16, 16, 3}, DType::Float64) * 2.3 - 1.15;
    Tensor g = randn({N, 5, 16, 16, 16}, DType::Float64);
    for (int64_t pad : {0, 2}) {
      GridSampleGrads r64 = grid_sampler_3d_backward(g, x, grid, 0, pad, false);
      GridSampleGrads r32 = grid_sampler_3d_backward(g.to(DType::Float32), x.to(DType::Float32),
                                                     grid.to(DType::Float32), 0, pad, false);
      // float32 grid coordinates move points by ~1e-7 voxels: same taps, gradients within 1e-4.
      expect_close(grid_sampler_3d(x.to(DType::Float32), grid.to(DType::Float32), 0, pad, false),
                   grid_sampler_3d(x, grid, 0, pad, false), 1e-4, 1e-4, "output");
      expect_close(r32.grad_input, r64.grad_input, 1e-4, 1e-4, "grad_input");
      expect_close(r32.grad_grid, r64.grad_grid, 1e-4, 1e-4, "grad_grid");
    }
  }
}

// The second derivative through gg_grid (the Hessian of the trilinear weights) is implemented:
// a gradient penalty on grad_grid differentiates back into the grid. Checked by finite
// differences of the first derivative in float64 (the registry's gradgradcheck does the same for
// every sample case; this one is a penalty a user writes).
TEST(GridSample3d, GradientPenaltyOnTheGridIsDifferentiable) {
  manual_seed(71);
  Tensor x = randn({1, 2, 3, 4, 3}, DType::Float64);
  Tensor grid0 = rand({1, 2, 2, 2, 3}, DType::Float64) * 1.6 - 0.8;
  auto penalty = [&](const Tensor& grid, bool create_graph) {
    Tensor gr = grid.detach().requires_grad_();
    Tensor out = grid_sample(x, gr, GridSampleMode::Bilinear, GridSamplePadding::Border, true);
    Tensor gg = grad({sum(mul(out, out))}, {gr}, {}, false, true, create_graph)[0];
    return std::make_pair(gr, sum(mul(gg, gg)));
  };
  auto [gr, p] = penalty(grid0, true);
  std::vector<double> analytic = grad({p}, {gr})[0].to_vector<double>();
  std::vector<double> base = grid0.to_vector<double>();
  const double h = 1e-6;
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<double> plus = base, minus = base;
    plus[i] += h;
    minus[i] -= h;
    const double fp = penalty(from_vector(plus, grid0.shape()), false).second.item<double>();
    const double fm = penalty(from_vector(minus, grid0.shape()), false).second.item<double>();
    EXPECT_NEAR(analytic[i], (fp - fm) / (2 * h), 1e-5 * (1 + std::abs(analytic[i]))) << i;
  }
}

TEST(GridSample3d, RejectsBadInputNamingTheArgument) {
  Tensor input = zeros({2, 3, 4, 5, 6}), grid = zeros({2, 3, 4, 4, 3}), g = zeros({2, 3, 3, 4, 4});
  EXPECT_NO_THROW(grid_sample(input, grid));
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({2, 4, 4, 2})); }),
            "grid_sample: expected grid to have shape [N, Do, Ho, Wo, 3] for a 5-D input, got [2, 4, 4, 2]");
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({2, 3, 4, 4, 2})); }),
            "grid_sample: expected grid to have shape [N, Do, Ho, Wo, 3] for a 5-D input, got [2, 3, 4, 4, 2]");
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({1, 3, 4, 4, 3})); }),
            "grid_sample: expected grid and input to have the same batch size N, got input [2, 3, 4, 5, 6] and grid "
            "[1, 3, 4, 4, 3]");
  EXPECT_EQ(error_of([&] { grid_sample(input, grid, GridSampleMode::Bicubic); }),
            "grid_sample: expected interpolation_mode 0 (bilinear, i.e. trilinear) or 1 (nearest) for a 5-D input, "
            "got 2 (bicubic supports only 4-D input)");
  EXPECT_EQ(error_of([&] { grid_sampler_3d(input, grid, 2, 0, false); }),
            "grid_sampler_3d: expected interpolation_mode 0 (bilinear, i.e. trilinear) or 1 (nearest) for a 5-D "
            "input, got 2 (bicubic supports only 4-D input)");
  EXPECT_EQ(error_of([&] { grid_sampler_3d(zeros({2, 3, 5, 6}), zeros({2, 4, 4, 2}), 0, 0, false); }),
            "grid_sampler_3d: expected input to have shape [N, C, D, H, W], got [2, 3, 5, 6]");
  EXPECT_EQ(error_of([&] { grid_sample(zeros({2, 3, 0, 5, 6}), grid); }),
            "grid_sample: expected input to have non-empty spatial dimensions D, H and W, got [2, 3, 0, 5, 6]");
  EXPECT_EQ(error_of([&] { grid_sample(input, grid.to(DType::Float64)); }),
            "grid_sample: expected grid of input's dtype float32, got float64");
  // Empty N or C is fine (PyTorch allows it): empty output, zero gradients.
  EXPECT_EQ(grid_sample(zeros({0, 3, 4, 5, 6}), zeros({0, 2, 4, 4, 3})).shape(), (Shape{0, 3, 2, 4, 4}));
  EXPECT_EQ(grid_sample(zeros({2, 0, 4, 5, 6}), grid).shape(), (Shape{2, 0, 3, 4, 4}));

  EXPECT_NO_THROW(grid_sampler_3d_backward(g, input, grid, 1, 2, true));
  EXPECT_EQ(error_of([&] { grid_sampler_3d_backward(zeros({2, 3, 3, 4, 5}), input, grid, 0, 0, false); }),
            "grid_sampler_3d_backward: expected grad_output of shape [N, C, Do, Ho, Wo] = [2, 3, 3, 4, 4], got "
            "[2, 3, 3, 4, 5]");
  EXPECT_EQ(error_of([&] { grid_sampler_3d_backward(g, input, grid, 2, 0, false); }),
            "grid_sampler_3d_backward: expected interpolation_mode 0 (bilinear, i.e. trilinear) or 1 (nearest) for "
            "a 5-D input, got 2 (bicubic supports only 4-D input)");
  EXPECT_EQ(error_of([&] { grid_sampler_3d_backward(g, input, grid, 0, 3, false); }),
            "grid_sampler_3d_backward: expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), got 3");
}

TEST(AffineGrid3d, RejectsBadInputNamingTheArgument) {
  Tensor theta = zeros({2, 3, 4});
  EXPECT_EQ(affine_grid(theta, {2, 1, 3, 4, 5}).shape(), (Shape{2, 3, 4, 5, 3}));
  EXPECT_EQ(error_of([&] { affine_grid(zeros({2, 2, 3}), {2, 1, 3, 4, 5}); }),
            "affine_grid: expected theta to have shape [N, 3, 4] (3-D affine matrices, for a size of 5 values), got "
            "[2, 2, 3]");
  EXPECT_EQ(error_of([&] { affine_grid(theta, {2, 1, 4, 5}); }),
            "affine_grid: expected theta to have shape [N, 2, 3] (2-D affine matrices), got [2, 3, 4]");
  EXPECT_EQ(error_of([&] { affine_grid(theta, {2, 1, 3, 0, 5}); }),
            "affine_grid: expected a non-negative N and C and a positive D, H and W in size, got [2, 1, 3, 0, 5]");
  EXPECT_EQ(error_of([&] { affine_grid_generator_backward(zeros({2, 3, 4, 5, 2}), {2, 1, 3, 4, 5}, false); }),
            "affine_grid_generator_backward: expected grad_grid of shape [N, D, H, W, 3] = [2, 3, 4, 5, 3], got "
            "[2, 3, 4, 5, 2]");
}

}  // namespace
}  // namespace tg
