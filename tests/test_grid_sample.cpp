// grid_sample and affine_grid on tensors and the tape, against PyTorch's goldens
// (tools/fixtures/grid_sample.py): every mode x padding x align_corners in float32 and float64,
// with points on pixel centres, half-pixels, clip limits, far outside and non-finite; every
// output mask of the kernel API; determinism across runs and thread counts; every bad input.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

GridSampleMode mode_of(const std::string& s) {
  return s == "bilinear" ? GridSampleMode::Bilinear : s == "nearest" ? GridSampleMode::Nearest : GridSampleMode::Bicubic;
}
GridSamplePadding padding_of(const std::string& s) {
  return s == "zeros" ? GridSamplePadding::Zeros : s == "border" ? GridSamplePadding::Border
                                                                  : GridSamplePadding::Reflection;
}

// The kernels follow PyTorch's arithmetic order (one FMA where PyTorch fuses, the same
// interpolation formulas), so values differ only by rounding: float64 to ~1e-15 relative,
// float32 to a few ulps (1e-6 relative) of the largest term. The gradients are sums over
// channels (grad_grid) or over the grid points landing on a pixel (grad_input), summed in
// possibly another order than PyTorch's: a few ulps of the largest summand, hence atol.
// Measured worst over all cases: 6e-15 (float64) and 5e-7 (float32) of 1 + |expected|; the
// tolerances leave 20x (float32) and 150x (float64) room, while any wrong tap, weight or
// clip decision (errors of order 0.1) still fails.
double rtol_for(DType dt) { return dt == DType::Float64 ? 1e-12 : 1e-5; }
double atol_for(DType dt) { return dt == DType::Float64 ? 1e-12 : 1e-5; }

TEST(GridSample, MatchesPyTorchOnEveryModePaddingAndAlignCorners) {
  int seen = 0;
  for (const auto& c : load_golden_cases("grid_sample")) {
    if (c.json["op"] != "grid_sample") continue;
    ++seen;
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    Tensor input = c.tensor("input").requires_grad_();
    Tensor grid = c.tensor("grid").requires_grad_();
    Tensor out = grid_sample(input, grid, mode_of(c.json["mode"]), padding_of(c.json["padding_mode"]),
                             c.json["align_corners"].get<bool>());
    ASSERT_EQ(out.dtype(), c.dtype());
    // expect_close compares NaN-aware: the non-finite cases hold NaN where PyTorch's do.
    expect_close(out, c.tensor("output"), rtol, atol, "output");
    out.backward(c.tensor("grad_output"));
    expect_close(input.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
    expect_close(grid.grad(), c.tensor("grad_grid"), rtol, atol, "grad_grid");
  }
  // 3 modes x 3 paddings x 2 align_corners x 2 dtypes, plus size-1 and non-finite cases.
  EXPECT_GE(seen, 36 + 8);
}

TEST(GridSample, IntegerFormAndKernelApiMatchTheGoldens) {
  for (const auto& c : load_golden_cases("grid_sample")) {
    if (c.json["op"] != "grid_sample" || c.json["nonfinite"].get<bool>()) continue;
    SCOPED_TRACE(c.name());
    const int64_t m = static_cast<int64_t>(mode_of(c.json["mode"]));
    const int64_t p = static_cast<int64_t>(padding_of(c.json["padding_mode"]));
    const bool ac = c.json["align_corners"].get<bool>();
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    expect_close(grid_sampler_2d(c.tensor("input"), c.tensor("grid"), m, p, ac), c.tensor("output"), rtol, atol,
                 "output");
    GridSampleGrads g = grid_sampler_2d_backward(c.tensor("grad_output"), c.tensor("input"), c.tensor("grid"), m, p, ac);
    expect_close(g.grad_input, c.tensor("grad_input"), rtol, atol, "grad_input");
    expect_close(g.grad_grid, c.tensor("grad_grid"), rtol, atol, "grad_grid");
  }
}

TEST(AffineGrid, MatchesPyTorch) {
  int seen = 0;
  for (const auto& c : load_golden_cases("grid_sample")) {
    if (c.json["op"] != "affine_grid") continue;
    ++seen;
    SCOPED_TRACE(c.name());
    // A 3-term dot product per element; grad_theta sums H*W of them (in double).
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    const std::vector<int64_t> size = c.json["size"].get<std::vector<int64_t>>();
    const bool ac = c.json["align_corners"].get<bool>();
    Tensor theta = c.tensor("theta").requires_grad_();
    Tensor grid = affine_grid(theta, size, ac);
    expect_close(grid, c.tensor("output"), rtol, atol, "output");
    grid.backward(c.tensor("grad_output"));
    expect_close(theta.grad(), c.tensor("grad_theta"), rtol, atol, "grad_theta");
    expect_close(affine_grid_generator_backward(c.tensor("grad_output"), size, ac), c.tensor("grad_theta"), rtol, atol,
                 "kernel API grad_theta");
  }
  EXPECT_EQ(seen, 8);
}

// Border clipping: a point exactly on the clip limit gets a zero grid gradient (PyTorch's
// choice for the clip's derivative), one just inside does not.
TEST(GridSample, BorderClipHasZeroGradientExactlyOnTheLimit) {
  Tensor input = from_vector(std::vector<double>{0, 1, 2, 3}, {1, 1, 1, 4});
  Tensor grid = from_vector(std::vector<double>{1.0, 0.0, 0.5, 0.0}, {1, 1, 2, 2});
  GridSampleGrads g = grid_sampler_2d_backward(ones({1, 1, 1, 2}, DType::Float64), input, grid, 0, 1, true);
  std::vector<double> gg = g.grad_grid.to_vector<double>();
  EXPECT_EQ(gg[0], 0.0);  // x = 1 is the right border (pixel 3): clipped, zero gradient
  EXPECT_DOUBLE_EQ(gg[2], 1.5);  // x = 0.5 is pixel 2.25: slope 1 per pixel = 1.5 per unit of x
}

// Nearest rounds half to even: x pixel 0.5 reads pixel 0, 1.5 reads pixel 2.
TEST(GridSample, NearestRoundsHalfToEvenAndHasZeroGridGradient) {
  Tensor input = from_vector(std::vector<double>{10, 20, 30, 40, 50}, {1, 1, 1, 5});
  // align_corners, W = 5: pixel = (x + 1) * 2, exact for these x: pixels 0.5, 1.5, 2.5.
  Tensor grid = from_vector(std::vector<double>{-0.75, 0, -0.25, 0, 0.25, 0}, {1, 1, 3, 2}).requires_grad_();
  Tensor out = grid_sample(input, grid, GridSampleMode::Nearest, GridSamplePadding::Zeros, true);
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{10, 30, 30}));
  sum(out).backward();
  EXPECT_EQ(grid.grad().to_vector<double>(), (std::vector<double>(6, 0.0)));
}

TEST(GridSample, EveryOutputMaskComputesExactlyWhatIsAsked) {
  for (const auto& c : load_golden_cases("grid_sample")) {
    // One case per mode, float64, reflection without align_corners (the longest path).
    if (c.json["op"] != "grid_sample" || c.dtype() != DType::Float64 || c.json["padding_mode"] != "reflection" ||
        c.json["align_corners"].get<bool>() || c.json["nonfinite"].get<bool>() || c.name().rfind("size1", 0) == 0)
      continue;
    SCOPED_TRACE(c.name());
    const int64_t m = static_cast<int64_t>(mode_of(c.json["mode"]));
    Tensor g = c.tensor("grad_output"), input = c.tensor("input"), grid = c.tensor("grid");
    GridSampleGrads all = grid_sampler_2d_backward(g, input, grid, m, 2, false, {true, true});
    for (int mask = 0; mask < 4; ++mask) {
      const std::array<bool, 2> om{(mask & 1) != 0, (mask & 2) != 0};
      GridSampleGrads r = grid_sampler_2d_backward(g, input, grid, m, 2, false, om);
      EXPECT_EQ(r.grad_input.defined(), om[0]) << mask;
      EXPECT_EQ(r.grad_grid.defined(), om[1]) << mask;
      if (om[0]) { EXPECT_TRUE(same_bits(r.grad_input, all.grad_input)) << mask; }
      if (om[1]) { EXPECT_TRUE(same_bits(r.grad_grid, all.grad_grid)) << mask; }
    }
  }
}

// Sizes above the kernels' parallel threshold, N = 1 (grad_input split over channels with
// the grid blocks alongside), N = 3 (not a multiple of 2 threads: split passes) and N = 4
// (fused pass per sample): same bits twice and at 1 and 2 threads, as the kernels promise.
TEST(GridSample, SameBitsAcrossRunsAndThreadCounts) {
  const int saved_threads = num_threads();
  for (int64_t N : {1, 3, 4}) {
    for (int64_t mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE("N " + std::to_string(N) + ", mode " + std::to_string(mode));
      manual_seed(5);
      Tensor input = randn({N, 6, 24, 24}), grid = uniform({N, 20, 20, 2}, -1.2, 1.2), g = randn({N, 6, 20, 20});
      auto run = [&](int threads) {
        set_num_threads(threads);
        Tensor out = grid_sampler_2d(input, grid, mode, 2, false);
        GridSampleGrads gr = grid_sampler_2d_backward(g, input, grid, mode, 2, false);
        return std::make_tuple(out, gr.grad_input, gr.grad_grid);
      };
      auto [o1, gi1, gg1] = run(1);
      auto [o2, gi2, gg2] = run(2);
      auto [o3, gi3, gg3] = run(2);
      EXPECT_TRUE(same_bits(o1, o2) && same_bits(o2, o3));
      EXPECT_TRUE(same_bits(gi1, gi2) && same_bits(gi2, gi3));
      EXPECT_TRUE(same_bits(gg1, gg2) && same_bits(gg2, gg3));
    }
  }
  set_num_threads(saved_threads);
}

// Recorded with only one input requiring grad, the tape asks the kernel for that gradient
// alone and gets the kernel API's value.
TEST(GridSample, TapeComputesOnlyTheRequestedGradient) {
  manual_seed(3);
  Tensor input = randn({2, 3, 5, 6}, DType::Float64), grid = uniform({2, 4, 4, 2}, -1.1, 1.1, DType::Float64);
  Tensor g = randn({2, 3, 4, 4}, DType::Float64);
  GridSampleGrads ref = grid_sampler_2d_backward(g, input, grid, 0, 0, false);
  Tensor a = input.clone().requires_grad_();
  grid_sample(a, grid).backward(g);
  EXPECT_TRUE(same_bits(a.grad(), ref.grad_input));
  Tensor b = grid.clone().requires_grad_();
  grid_sample(input, b).backward(g);
  EXPECT_TRUE(same_bits(b.grad(), ref.grad_grid));
}

// Reflection of coordinates millions of periods out: the fold a - trunc(a / 2 span) 2 span is
// one fused multiply-add, as in PyTorch's AVX2 / AVX-512 kernels (values from PyTorch 1.13 on
// this project's machines). Unfused, the product's rounding decided the answer: 5.5 and 1.5
// where PyTorch samples 3.5, on every kernel path.
TEST(GridSample, ReflectionFoldsHugeCoordinatesAsPyTorch) {
  struct Case {
    DType dtype;
    double x, y, grad_x;
  };
  for (const Case& c : {Case{DType::Float32, -6373000.0, 3.5, 5.5}, Case{DType::Float32, -14490000.0, 7.5, 5.5},
                        Case{DType::Float64, -4.258e15, 3.5, 5.5}}) {
    SCOPED_TRACE(std::to_string(c.x));
    Tensor input = arange(0, 11).to(c.dtype).reshape({1, 1, 1, 11});
    Tensor grid = from_vector(std::vector<double>{c.x, 0.0}, {1, 1, 1, 2}).to(c.dtype).requires_grad_();
    Tensor y = grid_sample(input, grid, GridSampleMode::Bilinear, GridSamplePadding::Reflection, false);
    EXPECT_EQ(y.to(DType::Float64).item(), c.y);
    sum(y).backward();
    EXPECT_EQ(grid.grad().to(DType::Float64).to_vector<double>()[0], c.grad_x);
  }
}

TEST(GridSample, RejectsBadInputNamingTheArgument) {
  Tensor input = zeros({2, 3, 5, 6}), grid = zeros({2, 4, 4, 2}), g = zeros({2, 3, 4, 4});
  EXPECT_NO_THROW(grid_sample(input, grid));
  EXPECT_EQ(error_of([&] { grid_sample(zeros({3, 5, 6}), grid); }),
            "grid_sample: expected input to have shape [N, C, H, W], got [3, 5, 6]");
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({2, 4, 4, 3})); }),
            "grid_sample: expected grid to have shape [N, Ho, Wo, 2], got [2, 4, 4, 3]");
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({2, 4, 2})); }),
            "grid_sample: expected grid to have shape [N, Ho, Wo, 2], got [2, 4, 2]");
  EXPECT_EQ(error_of([&] { grid_sample(input, zeros({1, 4, 4, 2})); }),
            "grid_sample: expected grid and input to have the same batch size N, got input [2, 3, 5, 6] and grid "
            "[1, 4, 4, 2]");
  EXPECT_EQ(error_of([&] { grid_sample(zeros({2, 3, 0, 6}), grid); }),
            "grid_sample: expected input to have non-empty spatial dimensions H and W, got [2, 3, 0, 6]");
  EXPECT_EQ(error_of([&] { grid_sample(zeros({2, 3, 5, 0}), grid); }),
            "grid_sample: expected input to have non-empty spatial dimensions H and W, got [2, 3, 5, 0]");
  EXPECT_EQ(error_of([&] { grid_sample(input, grid.to(DType::Float64)); }),
            "grid_sample: expected grid of input's dtype float32, got float64");
  EXPECT_EQ(error_of([&] { grid_sample(input.to(DType::Int64), grid.to(DType::Int64)); }),
            "grid_sample: expected input of a floating dtype (float32, float64, bfloat16 or float16), got int64");
  EXPECT_EQ(error_of([&] { grid_sampler_2d(input, grid, 3, 0, false); }),
            "grid_sampler_2d: expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 (bicubic), got 3");
  EXPECT_EQ(error_of([&] { grid_sampler_2d(input, grid, 0, -1, false); }),
            "grid_sampler_2d: expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), got -1");
  EXPECT_EQ(error_of([&] { grid_sample(input, grid, static_cast<GridSampleMode>(5)); }),
            "grid_sample: expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 (bicubic), got 5");
  // Empty N or C is fine (PyTorch allows it): empty output, zero gradients.
  EXPECT_EQ(grid_sample(zeros({0, 3, 5, 6}), zeros({0, 4, 4, 2})).shape(), (Shape{0, 3, 4, 4}));
  EXPECT_EQ(grid_sample(zeros({2, 0, 5, 6}), grid).shape(), (Shape{2, 0, 4, 4}));

  // The kernel API checks the same, and grad_output against [N, C, Ho, Wo].
  EXPECT_NO_THROW(grid_sampler_2d_backward(g, input, grid, 0, 0, false));
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(zeros({2, 3, 4, 5}), input, grid, 0, 0, false); }),
            "grid_sampler_2d_backward: expected grad_output of shape [N, C, Ho, Wo] = [2, 3, 4, 4], got [2, 3, 4, 5]");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(zeros({2, 2, 4, 4}), input, grid, 0, 0, false); }),
            "grid_sampler_2d_backward: expected grad_output of shape [N, C, Ho, Wo] = [2, 3, 4, 4], got [2, 2, 4, 4]");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(zeros({3, 3, 4, 4}), input, grid, 0, 0, false); }),
            "grid_sampler_2d_backward: expected grad_output of shape [N, C, Ho, Wo] = [2, 3, 4, 4], got [3, 3, 4, 4]");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(g.to(DType::Float64), input, grid, 0, 0, false); }),
            "grid_sampler_2d_backward: expected grad_output of input's dtype float32, got float64");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(g, input, grid, 0, 3, false); }),
            "grid_sampler_2d_backward: expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), got 3");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(g, input, zeros({2, 4, 4, 1}), 0, 0, false); }),
            "grid_sampler_2d_backward: expected grid to have shape [N, Ho, Wo, 2], got [2, 4, 4, 1]");
}

TEST(AffineGrid, RejectsBadInputNamingTheArgument) {
  Tensor theta = zeros({2, 2, 3});
  EXPECT_NO_THROW(affine_grid(theta, {2, 1, 4, 5}));
  EXPECT_EQ(error_of([&] { affine_grid(zeros({2, 3, 3}), {2, 1, 4, 5}); }),
            "affine_grid: expected theta to have shape [N, 2, 3] (2-D affine matrices), got [2, 3, 3]");
  EXPECT_EQ(error_of([&] { affine_grid(theta, {2, 1, 4}); }),
            "affine_grid: expected size [N, C, H, W] (2-D affine grid) or [N, C, D, H, W] (3-D), got [2, 1, 4]");
  EXPECT_EQ(error_of([&] { affine_grid(theta, {3, 1, 4, 5}); }),
            "affine_grid: expected theta's batch size to match size[0] = 3, got theta [2, 2, 3]");
  EXPECT_EQ(error_of([&] { affine_grid(theta, {2, 1, 0, 5}); }),
            "affine_grid: expected a non-negative N and C and a positive H and W in size, got [2, 1, 0, 5]");
  EXPECT_EQ(error_of([&] { affine_grid(theta.to(DType::Int64), {2, 1, 4, 5}); }),
            "affine_grid: expected theta of a floating dtype (float32, float64, bfloat16 or float16), got int64");
  EXPECT_EQ(error_of([&] { affine_grid_generator_backward(zeros({2, 4, 5, 3}), {2, 1, 4, 5}, false); }),
            "affine_grid_generator_backward: expected grad_grid of shape [N, H, W, 2] = [2, 4, 5, 2], got [2, 4, 5, "
            "3]");
}

}  // namespace
}  // namespace tg
