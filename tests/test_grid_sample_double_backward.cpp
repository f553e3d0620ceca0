// Second derivatives of grid_sample (create_graph through its backward). PyTorch 1.13 has no
// double backward of grid_sample, so there is no golden: the checks are gradgradcheck (finite
// differences of the first derivatives) on every mode, padding and align_corners, a closed-form
// Hessian of one bilinear sample, the kernel's bits at 1, 2 and 3 threads, the first-order
// values unchanged by create_graph, and the errors (a third derivative, bad arguments).
#include <gtest/gtest.h>

#include <omp.h>

#include <string>

#include "test_util.h"

namespace tg {
namespace {

const char* const kModes[] = {"bilinear", "nearest", "bicubic"};
const char* const kPaddings[] = {"zeros", "border", "reflection"};

// A float64 grid whose points sit 0.15 to 0.35 pixels from an integer pixel coordinate (away
// from the kinks of bilinear and bicubic at integers and the ties of nearest at half-integers,
// so that finite differences of step 1e-6 are valid), inside the image, or one pixel beyond it
// when `outside` (smooth there for zeros padding, and for reflection with align_corners).
Tensor kink_free_grid(int64_t N, int64_t Ho, int64_t Wo, int64_t H, int64_t W, bool align_corners, bool outside,
                      uint64_t seed) {
  Generator gen(seed);
  Tensor u = uniform({N, Ho, Wo, 2, 3}, 0.0, 1.0, DType::Float64, &gen);
  std::vector<double> r = u.to_vector<double>(), g(N * Ho * Wo * 2);
  for (size_t i = 0; i < g.size(); ++i) {
    const int64_t size = i % 2 == 0 ? W : H;
    const int64_t lo = outside ? -1 : 0, hi = outside ? size : size - 1;
    const double cell = static_cast<double>(lo + static_cast<int64_t>(r[3 * i] * static_cast<double>(hi - lo)));
    const double frac = 0.15 + 0.2 * r[3 * i + 1];
    const double pixel = cell + (r[3 * i + 2] < 0.5 ? frac : 1.0 - frac);
    const double s = static_cast<double>(size);
    g[i] = align_corners ? 2.0 * pixel / (s - 1.0) - 1.0 : (2.0 * pixel + 1.0) / s - 1.0;
  }
  return from_vector(g, {N, Ho, Wo, 2});
}

struct Case {
  GridSampleMode mode;
  GridSamplePadding padding;
  bool align_corners;
  std::string name() const {
    return std::string(kModes[static_cast<int>(mode)]) + ", " + kPaddings[static_cast<int>(padding)] +
           (align_corners ? ", align_corners" : "");
  }
  // Points beyond the image where the function is smooth there (see kink_free_grid).
  bool outside() const {
    return padding == GridSamplePadding::Zeros || (padding == GridSamplePadding::Reflection && align_corners) ||
           mode == GridSampleMode::Bicubic;  // bicubic pads the taps, not the (smooth) point
  }
};

// gradgradcheck in float64 of grid_sample in input and grid together: the second derivatives
// in (input, grid, output gradient), every pair of them, against finite differences.
GradcheckResult check_second_derivatives(const Case& c, uint64_t seed) {
  Generator gen(seed);
  Tensor input = randn({2, 2, 4, 5}, DType::Float64, &gen).requires_grad_();
  Tensor grid = kink_free_grid(2, 2, 3, 4, 5, c.align_corners, c.outside(), seed + 7).requires_grad_();
  auto fn = [c](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{grid_sample(x[0], x[1], c.mode, c.padding, c.align_corners)};
  };
  GradcheckOptions o;
  o.seed = seed;
  return gradgradcheck(fn, {input, grid}, o);
}

TEST(GridSampleDoubleBackward, GradgradcheckBilinearEveryPaddingAndAlignCorners) {
  uint64_t seed = 100;
  for (GridSamplePadding p : {GridSamplePadding::Zeros, GridSamplePadding::Border, GridSamplePadding::Reflection})
    for (bool ac : {false, true}) {
      const Case c{GridSampleMode::Bilinear, p, ac};
      GradcheckResult r = check_second_derivatives(c, ++seed);
      EXPECT_TRUE(r.ok) << c.name() << ": " << r.message;
    }
}

TEST(GridSampleDoubleBackward, GradgradcheckNearestAndBicubic) {
  uint64_t seed = 200;
  for (GridSampleMode m : {GridSampleMode::Nearest, GridSampleMode::Bicubic})
    for (GridSamplePadding p : {GridSamplePadding::Zeros, GridSamplePadding::Border, GridSamplePadding::Reflection})
      for (bool ac : {false, true}) {
        const Case c{m, p, ac};
        GradcheckResult r = check_second_derivatives(c, ++seed);
        EXPECT_TRUE(r.ok) << c.name() << ": " << r.message;
      }
}

// One bilinear sample on a 2x2 image, align_corners: u = (gx + 1) / 2 * (W - 1) = (gx + 1) / 2,
// the same for v, so du/dgx = dv/dgy = 1/2. out = sum_k w_k(u, v) x_k with
// w = ((1-u)(1-v), u(1-v), (1-u)v, uv) over (nw, ne, sw, se), whose Hessian in (u, v) is
// [[0, c], [c, 0]] with c = x_nw - x_ne - x_sw + x_se: in the grid, [[0, c/4], [c/4, 0]].
// The mixed derivative d2 out / dgx dx_ne = d w_ne/du * du/dgx = (1 - v) / 2.
TEST(GridSampleDoubleBackward, BilinearHessianOfOnePointIsTheCrossTerm) {
  Tensor input = from_vector(std::vector<double>{1, 2, 4, 8}, {1, 1, 2, 2}).requires_grad_();
  const double gx = -0.4, gy = 0.2;  // u = 0.3, v = 0.6
  Tensor grid = from_vector(std::vector<double>{gx, gy}, {1, 1, 1, 2}).requires_grad_();
  for (GridSamplePadding p : {GridSamplePadding::Zeros, GridSamplePadding::Border, GridSamplePadding::Reflection}) {
    SCOPED_TRACE(kPaddings[static_cast<int>(p)]);
    Tensor out = grid_sample(input, grid, GridSampleMode::Bilinear, p, true);
    Tensor g = grad({out}, {grid}, {}, false, false, /*create_graph=*/true)[0];  // [1, 1, 1, 2]
    ASSERT_TRUE(g.requires_grad());
    const double c = 1.0 - 2.0 - 4.0 + 8.0;
    const double expected[2][2] = {{0.0, c / 4}, {c / 4, 0.0}};
    for (int i = 0; i < 2; ++i) {
      Tensor gi = select(g.reshape({2}), 0, i);
      std::vector<Tensor> row = grad({gi}, {grid, input}, {}, /*retain_graph=*/true);
      std::vector<double> h = row[0].to_vector<double>(), hx = row[1].to_vector<double>();
      EXPECT_NEAR(h[0], expected[i][0], 1e-15) << "d2 out / dg" << i << " dgx";
      EXPECT_NEAR(h[1], expected[i][1], 1e-15) << "d2 out / dg" << i << " dgy";
      if (i == 0) {  // d/dx_k of d out/dgx = dw_k/du / 2 = (-(1-v), 1-v, -v, v) / 2
        const double v = 0.6;
        const std::vector<double> want{-(1 - v) / 2, (1 - v) / 2, -v / 2, v / 2};
        for (int k = 0; k < 4; ++k) EXPECT_NEAR(hx[k], want[k], 1e-15) << k;
      }
    }
  }
}

// A point on the border clip limit has a zero first-order grid gradient in x for every input:
// all its second-order terms through gg_grid's x component vanish, exactly.
TEST(GridSampleDoubleBackward, ClippedPointHasZeroSecondOrderTerms) {
  Tensor input = from_vector(std::vector<double>{0, 1, 4, 9, 3, 5, 7, 2}, {1, 1, 2, 4});
  Tensor grid = from_vector(std::vector<double>{1.0, -0.3}, {1, 1, 1, 2});  // x on the right border
  Tensor go = from_vector(std::vector<double>{1.5}, {1, 1, 1, 1});
  Tensor gg = from_vector(std::vector<double>{1.0, 0.0}, {1, 1, 1, 2});
  GridSampleDoubleGrads r = grid_sampler_2d_double_backward(go, input, grid, gg, 0, 1, true);
  for (const Tensor* t : {&r.grad_grad_output, &r.grad_input, &r.grad_grid})
    for (double v : t->to_vector<double>()) EXPECT_EQ(v, 0.0);
}

// Big enough for the parallel paths: N = 1 (grad_input split over channels beside the position
// blocks), N = 3 and N = 4; float32 and float64; bilinear and bicubic; zeros and reflection
// with points inside, outside and far outside. Same bits at 1, 2 and 3 threads.
TEST(GridSampleDoubleBackward, KernelSameBitsAtOneTwoAndThreeThreads) {
  const int saved_threads = omp_get_max_threads();
  for (DType dt : {DType::Float32, DType::Float64})
    for (int64_t N : {1, 3, 4})
      for (int64_t mode : {0, 2})
        for (int64_t padding : {0, 2}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + ", N " + std::to_string(N) + ", mode " + std::to_string(mode) +
                       ", padding " + std::to_string(padding));
          Generator gen(11 + N);
          Tensor input = randn({N, 5, 24, 20}, dt, &gen), grid = uniform({N, 30, 30, 2}, -1.3, 1.3, dt, &gen);
          Tensor go = randn({N, 5, 30, 30}, dt, &gen), gg = randn({N, 30, 30, 2}, dt, &gen);
          auto run = [&](int threads) {
            omp_set_num_threads(threads);
            return grid_sampler_2d_double_backward(go, input, grid, gg, mode, padding, false);
          };
          GridSampleDoubleGrads r1 = run(1), r2 = run(2), r3 = run(3);
          EXPECT_TRUE(same_bits(r1.grad_grad_output, r2.grad_grad_output) &&
                      same_bits(r1.grad_grad_output, r3.grad_grad_output));
          EXPECT_TRUE(same_bits(r1.grad_input, r2.grad_input) && same_bits(r1.grad_input, r3.grad_input));
          EXPECT_TRUE(same_bits(r1.grad_grid, r2.grad_grid) && same_bits(r1.grad_grid, r3.grad_grid));
          // Each output alone (the mask) is the same as with all three.
          for (int k = 0; k < 3; ++k) {
            std::array<bool, 3> m{k == 0, k == 1, k == 2};
            GridSampleDoubleGrads one = grid_sampler_2d_double_backward(go, input, grid, gg, mode, padding, false, m);
            const Tensor& got = k == 0 ? one.grad_grad_output : k == 1 ? one.grad_input : one.grad_grid;
            const Tensor& all = k == 0 ? r3.grad_grad_output : k == 1 ? r3.grad_input : r3.grad_grid;
            EXPECT_TRUE(same_bits(got, all)) << "mask " << k;
          }
        }
  omp_set_num_threads(saved_threads);
}

// The whole second-order path through the tape (a gradient penalty: grid_sample, its recorded
// backward, the backward of that, the new kernel) at 1, 2 and 3 threads: the same bits.
TEST(GridSampleDoubleBackward, GradientPenaltySameBitsAtOneTwoAndThreeThreads) {
  const int saved_threads = omp_get_max_threads();
  for (int64_t mode : {0, 1, 2}) {
    SCOPED_TRACE(kModes[mode]);
    Generator gen(31);
    Tensor in0 = randn({3, 4, 24, 20}, DType::Float64, &gen);
    Tensor grid0 = uniform({3, 30, 30, 2}, -1.2, 1.2, DType::Float64, &gen);
    auto run = [&](int threads) {
      omp_set_num_threads(threads);
      Tensor input = in0.detach().requires_grad_(), grid = grid0.detach().requires_grad_();
      Tensor out = grid_sampler_2d(input, grid, mode, 2, true);
      std::vector<Tensor> g = grad({sum(mul(out, out))}, {input, grid}, {}, false, false, true);
      return grad({add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1])))}, {input, grid});
    };
    std::vector<Tensor> r1 = run(1), r2 = run(2), r3 = run(3);
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(same_bits(r1[k], r2[k]) && same_bits(r1[k], r3[k])) << k;
  }
  omp_set_num_threads(saved_threads);
}

// create_graph changes how the first derivatives are recorded, not their values: the same
// bits as without it and as the kernel API, in every mode.
TEST(GridSampleDoubleBackward, CreateGraphGivesTheFirstOrderBits) {
  for (int64_t mode = 0; mode < 3; ++mode)
    for (DType dt : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(std::string(kModes[mode]) + ", " + dtype_name(dt));
      Generator gen(3);
      Tensor input = randn({2, 3, 5, 6}, dt, &gen), grid = uniform({2, 4, 4, 2}, -1.1, 1.1, dt, &gen);
      Tensor go = randn({2, 3, 4, 4}, dt, &gen);
      GridSampleGrads ref = grid_sampler_2d_backward(go, input, grid, mode, 2, false);
      for (bool create_graph : {false, true}) {
        Tensor a = input.clone().requires_grad_(), b = grid.clone().requires_grad_();
        Tensor out = grid_sampler_2d(a, b, mode, 2, false);
        std::vector<Tensor> g = grad({out}, {a, b}, {go}, false, false, create_graph);
        EXPECT_TRUE(same_bits(g[0], ref.grad_input)) << create_graph;
        EXPECT_TRUE(same_bits(g[1], ref.grad_grid)) << create_graph;
        EXPECT_EQ(g[1].requires_grad(), create_graph);
      }
    }
}

// A third derivative through the grid's second-order term is not implemented: an error naming
// the op, with or without create_graph at the second order, never a silent zero.
TEST(GridSampleDoubleBackward, ThirdDerivativeIsAnError) {
  Generator gen(4);
  Tensor input = randn({1, 2, 4, 4}, DType::Float64, &gen).requires_grad_();
  Tensor grid = kink_free_grid(1, 2, 2, 4, 4, false, false, 9).requires_grad_();
  Tensor out = grid_sample(input, grid, GridSampleMode::Bilinear, GridSamplePadding::Zeros, false);
  Tensor g = grad({sum(out)}, {grid}, {}, false, false, true)[0];
  Tensor penalty = sum(mul(g, g));
  Tensor g2 = grad({penalty}, {grid}, {}, false, false, true)[0];
  ASSERT_TRUE(g2.requires_grad());
  const std::string recorded = error_of([&] { grad({sum(g2)}, {grid}, {}, true, true, /*create_graph=*/true); });
  EXPECT_NE(recorded.find("grid_sampler_2d_double_backward"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("create_graph"), std::string::npos) << recorded;
  const std::string plain = error_of([&] { grad({sum(g2)}, {grid}); });
  EXPECT_EQ(plain,
            "grid_sampler_2d_double_backward_backward: expected at most second derivatives of grid_sample, got a "
            "request for a third (the backward of grid_sampler_2d_double_backward, grid_sample's second-order term "
            "in the grid, is not implemented)");
}

// A gradient penalty in float32 agrees with float64 (the double-backward kernel's float sums
// are accumulated in double, as the first-order ones).
TEST(GridSampleDoubleBackward, Float32GradientPenaltyMatchesFloat64) {
  for (int64_t mode : {0, 2}) {
    SCOPED_TRACE(kModes[mode]);
    Generator gen(21);
    Tensor in64 = randn({2, 3, 6, 5}, DType::Float64, &gen);
    Tensor grid64 = kink_free_grid(2, 3, 4, 6, 5, false, true, 22);
    std::vector<std::vector<double>> results;
    for (DType dt : {DType::Float64, DType::Float32}) {
      Tensor input = in64.to(dt).detach().requires_grad_(), grid = grid64.to(dt).detach().requires_grad_();
      Tensor out = grid_sampler_2d(input, grid, mode, 0, false);
      std::vector<Tensor> g = grad({sum(mul(out, out))}, {input, grid}, {}, false, false, true);
      Tensor penalty = add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1])));
      std::vector<Tensor> h = grad({penalty}, {input, grid});
      std::vector<double> all = h[0].to(DType::Float64).to_vector<double>();
      for (double v : h[1].to(DType::Float64).to_vector<double>()) all.push_back(v);
      results.push_back(all);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_NEAR(results[1][i], results[0][i], 1e-4 * (1 + std::abs(results[0][i]))) << i;
  }
}

TEST(GridSampleDoubleBackward, RejectsBadInputNamingTheArgument) {
  Tensor input = zeros({2, 3, 5, 6}), grid = zeros({2, 4, 4, 2}), go = zeros({2, 3, 4, 4}), gg = zeros({2, 4, 4, 2});
  EXPECT_NO_THROW(grid_sampler_2d_double_backward(go, input, grid, gg, 0, 0, false));
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(go, input, grid, zeros({2, 4, 4, 1}), 0, 0, false); }),
            "grid_sampler_2d_double_backward: expected gg_grid of grid's shape [2, 4, 4, 2], got [2, 4, 4, 1]");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(go, input, grid, Tensor(), 0, 0, false); }),
            "grid_sampler_2d_double_backward: expected gg_grid of grid's shape [2, 4, 4, 2], got undefined");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(go, input, grid, gg.to(DType::Float64), 0, 0, false); }),
            "grid_sampler_2d_double_backward: expected gg_grid of input's dtype float32, got float64");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(zeros({2, 3, 4, 5}), input, grid, gg, 0, 0, false); }),
            "grid_sampler_2d_double_backward: expected grad_output of shape [N, C, Ho, Wo] = [2, 3, 4, 4], got "
            "[2, 3, 4, 5]");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(go, input, grid, gg, 3, 0, false); }),
            "grid_sampler_2d_double_backward: expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 "
            "(bicubic), got 3");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_double_backward(go, input, zeros({2, 4, 4, 3}), gg, 0, 0, false); }),
            "grid_sampler_2d_double_backward: expected grid to have shape [N, Ho, Wo, 2], got [2, 4, 4, 3]");
}

}  // namespace
}  // namespace tg
