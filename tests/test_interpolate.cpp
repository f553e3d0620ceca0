// interpolate's nearest, nearest-exact and area modes against PyTorch 1.13
// (tools/fixtures/interpolate.py): every rank, by size and by scale factor (passed on or
// recomputed), output size 1, downsampling, an empty batch; the kernel API; 16-bit dtypes;
// determinism; and the front end's errors, each naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

InterpolateMode mode_of(const std::string& name) {
  if (name == "nearest") return InterpolateMode::Nearest;
  if (name == "nearest-exact") return InterpolateMode::NearestExact;
  if (name == "area") return InterpolateMode::Area;
  throw Error("unknown mode " + name);
}

InterpolateOptions options_of(const nlohmann::json& j) {
  InterpolateOptions o;
  o.mode(mode_of(j["mode"]));
  if (!j["size"].is_null()) o.size(j["size"].get<std::vector<int64_t>>());
  if (!j["scale_factor"].is_null()) o.scale_factor(j["scale_factor"].get<std::vector<double>>());
  if (!j["recompute_scale_factor"].is_null()) o.recompute_scale_factor(j["recompute_scale_factor"].get<bool>());
  return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  std::vector<double> x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

TEST(Interpolate, MatchesPyTorchThroughTheTape) {
  auto cases = load_golden_cases("interpolate");
  ASSERT_GE(cases.size(), 180u);
  int torch_grad_not_adjoint = 0;
  std::map<std::string, double> worst;  // "mode dtype output|grad" -> max |ours - torch|
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // Nearest modes copy and add in aten's order: 0 (bit for bit). Area: rtol 1e-6, atol 1e-7 in
    // float32 (we sum windows in double, aten in float), 1e-12 / 1e-14 in float64.
    const double rtol = c.json["tolerance"]["rtol"], atol = c.json["tolerance"]["atol"];
    Tensor x = c.tensor("input").requires_grad_();
    Tensor y = interpolate(x, options_of(c.json));
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    // The gradient of torch's forward (equal to torch's own input gradient except where
    // torch_grad_is_the_adjoint is false, see nearest_kernels.h).
    y.backward(c.tensor("grad_output"));
    Tensor grad = x.grad().defined() ? x.grad() : zeros_like(x);
    expect_close(grad, c.tensor("grad_input"), rtol, atol, "grad_input");
    if (!c.json["torch_grad_is_the_adjoint"].get<bool>()) ++torch_grad_not_adjoint;
    const std::string key = c.json["mode"].get<std::string>() + " " + c.json["dtype"].get<std::string>();
    worst[key + " output"] = std::max(worst[key + " output"], max_abs_diff(y, c.tensor("output")));
    worst[key + " grad_input"] = std::max(worst[key + " grad_input"], max_abs_diff(grad, c.tensor("grad_input")));
  }
  for (const auto& [what, w] : worst) std::cout << "[interpolate] worst |ours - torch| " << what << ": " << w << "\n";
  // PyTorch's nearest backward takes the shortcut src = dst / 2 for out == 2 in even with a
  // given scale of 2.1, its forward does not: those fixtures keep the forward's adjoint.
  EXPECT_EQ(torch_grad_not_adjoint, 4);
}

TEST(Interpolate, KernelApiIsWhatTheFrontEndCalls) {
  manual_seed(3);
  Tensor x = randn({2, 3, 4, 5, 6}, DType::Float64);
  Tensor y = interpolate(x, InterpolateOptions().scale_factor({1.7, 0.6, 2.0}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6, 3, 12}));
  EXPECT_TRUE(same_bits(y, upsample_nearest3d(x, {6, 3, 12}, 1.7, 0.6, 2.0)));
  // recompute_scale_factor: the scales are not passed on, the sizes alone decide
  Tensor r = interpolate(x, InterpolateOptions().scale_factor({1.7, 0.6, 2.0}).recompute_scale_factor(true));
  EXPECT_TRUE(same_bits(r, upsample_nearest3d(x, {6, 3, 12})));
  EXPECT_FALSE(same_bits(r, y));  // 1 / 1.7 and 4 / 6 pick other rows
  Tensor e = interpolate(x, InterpolateOptions().size({3, 7, 4}).mode(InterpolateMode::NearestExact));
  EXPECT_TRUE(same_bits(e, upsample_nearest_exact3d(x, {3, 7, 4})));
  Tensor a = interpolate(x, InterpolateOptions().scale_factor(0.5).mode(InterpolateMode::Area));
  EXPECT_TRUE(same_bits(a, adaptive_avg_pool3d(x, {2, 2, 3})));
  // the backward kernels are the adjoints of the forward ones: <up(x), g> == <x, up^T(g)>
  Tensor g = randn({2, 3, 6, 3, 12}, DType::Float64);
  Tensor gx = upsample_nearest3d_backward(g, {6, 3, 12}, {2, 3, 4, 5, 6}, 1.7, 0.6, 2.0);
  EXPECT_NEAR(sum(mul(y, g)).item(), sum(mul(x, gx)).item(), 1e-12 * sum(abs(mul(y, g))).item());
  Tensor x1 = randn({2, 3, 7}), g1 = randn({2, 3, 4});
  EXPECT_NEAR(sum(mul(upsample_nearest_exact1d(x1, {4}), g1)).item(),
              sum(mul(x1, upsample_nearest_exact1d_backward(g1, {4}, {2, 3, 7}))).item(), 1e-5);
  Tensor x2 = randn({1, 2, 3, 5}), g2 = randn({1, 2, 1, 7});
  EXPECT_NEAR(sum(mul(adaptive_avg_pool1d(x2.reshape({1, 2, 15}), {7}), g2.reshape({1, 2, 7}))).item(),
              sum(mul(x2.reshape({1, 2, 15}), adaptive_avg_pool1d_backward(g2.reshape({1, 2, 7}), {1, 2, 15})))
                  .item(),
              1e-5);
}

TEST(Interpolate, SixteenBitIsTheFloat32ResultRoundedOnce) {
  manual_seed(5);
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (InterpolateMode mode : {InterpolateMode::Nearest, InterpolateMode::NearestExact, InterpolateMode::Area}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + interpolate_mode_name(mode));
      Tensor x = randn({2, 3, 5, 7}).to(dt);
      Tensor g = randn({2, 3, 8, 4}).to(dt);
      Tensor x16 = x.detach().requires_grad_(), x32 = x.to(DType::Float32).requires_grad_();
      const auto o = InterpolateOptions().size({8, 4}).mode(mode);
      Tensor y16 = interpolate(x16, o), y32 = interpolate(x32, o);
      EXPECT_EQ(y16.dtype(), dt);
      EXPECT_TRUE(same_bits(y16, y32.to(dt)));
      y16.backward(g);
      y32.backward(g.to(DType::Float32));
      EXPECT_TRUE(same_bits(x16.grad(), x32.grad().to(dt)));
    }
  }
}

TEST(Interpolate, BackwardIsDeterministicAcrossThreadCounts) {
  manual_seed(6);
  Tensor g = randn({1, 3, 61, 40});  // few planes: the forward splits rows
  Tensor x = randn({1, 3, 23, 17});
  const int threads = num_threads();
  set_num_threads(1);
  Tensor y1 = upsample_nearest2d(x, {61, 40}), b1 = upsample_nearest2d_backward(g, {61, 40}, {1, 3, 23, 17});
  set_num_threads(2);
  Tensor y2 = upsample_nearest2d(x, {61, 40}), b2 = upsample_nearest2d_backward(g, {61, 40}, {1, 3, 23, 17});
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(y1, y2));
  EXPECT_TRUE(same_bits(b1, b2));
}

// Linear 1-D has no height axis: an Inf is Inf between its neighbours, NaN only where a zero
// weight meets it (PyTorch 1.13's values). It ran the 2-D kernel on one row, whose height
// weights (1, 0) made every Inf a NaN; bilinear on such a row keeps PyTorch's NaN.
TEST(Interpolate, LinearKeepsInfWhereTheOneDimensionalKernelDoes) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (bool ac : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (ac ? " align_corners" : ""));
      Tensor x = from_vector(std::vector<double>{1, inf, 2}, {1, 1, 3}).to(dt).requires_grad_();
      Tensor y = interpolate(x, InterpolateOptions().size(5).mode(InterpolateMode::Linear).align_corners(ac));
      const std::vector<double> v = y.to(DType::Float64).to_vector<double>();
      EXPECT_TRUE(std::isnan(v[0]));
      for (int i = 1; i < 4; ++i) EXPECT_EQ(v[i], inf) << i;
      EXPECT_EQ(v[4], 2.0);
      y.backward(arange(0, 5).to(dt).reshape({1, 1, 5}));
      const std::vector<double> g = x.grad().to(DType::Float64).to_vector<double>();
      const std::vector<double> want = ac ? std::vector<double>{0.5, 4.0, 5.5} : std::vector<double>{0.6, 3.6, 5.8};
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], want[i], dt == DType::BFloat16 ? 0.05 : 1e-6) << i;
    }
  }
  Tensor x2 = from_vector(std::vector<double>{1, inf, 2}, {1, 1, 1, 3});
  const std::vector<double> b = interpolate(x2, std::array<int64_t, 2>{1, 5}, false).to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(b[i])) << i << " (PyTorch's bilinear: NaN)";
}

// The README's rule: a nearest output exactly twice the input with a given scale (width 3 at
// 2.1) takes source columns floor(j / 2.1) = 0 0 0 1 1 2 in every rank and for any number of
// channels. (PyTorch 1.13 runs 2-D and 3-D inputs of one channel as channels-last and there
// takes 0 0 1 1 2 2; with two channels, or in 1-D, it takes ours.)
TEST(Interpolate, NearestTwiceTheInputWithAScaleIgnoresTheLayout) {
  const std::vector<double> expected{0, 0, 0, 1, 1, 2};
  for (const Shape& shape : std::vector<Shape>{{1, 1, 3}, {1, 2, 3}, {1, 1, 1, 3}, {1, 2, 1, 3}, {1, 1, 1, 1, 3},
                                               {1, 2, 1, 1, 3}}) {
    SCOPED_TRACE(format_shape(shape));
    Shape row(shape.size(), 1);
    row.back() = 3;
    const Tensor x = arange(0.0, 3.0, 1.0, DType::Float64).reshape(row).expand(shape).contiguous();
    std::vector<double> scales(shape.size() - 2, 1.0);
    scales.back() = 2.1;
    const Tensor y = interpolate(x, InterpolateOptions().scale_factor(scales));
    ASSERT_EQ(y.size(-1), 6);
    const std::vector<double> v = y.to_vector<double>();
    for (size_t plane = 0; plane < v.size() / 6; ++plane)
      EXPECT_EQ(std::vector<double>(v.begin() + plane * 6, v.begin() + plane * 6 + 6), expected) << plane;
  }
}

TEST(Interpolate, OldBilinearCallsStillWork) {
  manual_seed(7);
  Tensor x = randn({1, 2, 5, 5});
  EXPECT_TRUE(same_bits(interpolate(x, 1.7), upsample_bilinear2d(x, {8, 8}, false, 1.7, 1.7)));
  EXPECT_TRUE(same_bits(interpolate(x, {3, 7}, true), upsample_bilinear2d(x, {3, 7}, true)));
  EXPECT_TRUE(same_bits(interpolate(x, InterpolateOptions().size({3, 7}).mode(InterpolateMode::Bilinear)),
                        upsample_bilinear2d(x, {3, 7}, false)));
}

TEST(Interpolate, RejectsBadOptionsNamingTheArgument) {
  Tensor x3 = zeros({1, 2, 4}), x4 = zeros({1, 2, 3, 4}), x5 = zeros({1, 2, 3, 4, 5});
  using M = InterpolateMode;
  auto by = [](M m) { return InterpolateOptions().size(std::vector<int64_t>{4}).mode(m); };
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().size({6, 8}).mode(M::Linear)); }),
            "interpolate: mode 'linear' needs a 3-D input (N, C, L), got a 4-D input [1, 2, 3, 4]");
  EXPECT_EQ(error_of([&] { interpolate(x3, by(M::Bilinear)); }),
            "interpolate: mode 'bilinear' needs a 4-D input (N, C, H, W), got a 3-D input [1, 2, 4]");
  EXPECT_EQ(error_of([&] { interpolate(x5, InterpolateOptions().size({2, 2, 2}).mode(M::Bicubic)); }),
            "interpolate: mode 'bicubic' needs a 4-D input (N, C, H, W), got a 5-D input [1, 2, 3, 4, 5]");
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().size({2, 2}).mode(M::Trilinear)); }),
            "interpolate: mode 'trilinear' needs a 5-D input (N, C, D, H, W), got a 4-D input [1, 2, 3, 4]");
  EXPECT_EQ(error_of([&] { interpolate(zeros({2, 4}), by(M::Nearest)); }),
            "interpolate: expected a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input for mode "
            "'nearest', got [2, 4]");
  EXPECT_EQ(error_of([&] { interpolate(x3, InterpolateOptions().size(4).scale_factor(2.0)); }),
            "interpolate: expected only one of size and scale_factor, got both");
  EXPECT_EQ(error_of([&] { interpolate(x3, InterpolateOptions()); }),
            "interpolate: expected size or scale_factor, got neither");
  EXPECT_EQ(error_of([&] { interpolate(x3, by(M::Nearest).align_corners(false)); }),
            "interpolate: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
            "trilinear), got align_corners with mode 'nearest'");
  EXPECT_EQ(error_of([&] { interpolate(x3, by(M::Area).align_corners(true)); }),
            "interpolate: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
            "trilinear), got align_corners with mode 'area'");
  EXPECT_EQ(error_of([&] { interpolate(x3, by(M::Nearest).recompute_scale_factor(true)); }),
            "interpolate: recompute_scale_factor is not meaningful with an explicit size (set size or "
            "scale_factor)");
  EXPECT_EQ(error_of([&] { interpolate(x4, by(M::Nearest)); }),
            "interpolate: expected size to have 2 values (one per spatial dim of input [1, 2, 3, 4]), got 1 values "
            "[4]");
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().scale_factor({2.0, 2.0, 2.0})); }),
            "interpolate: expected scale_factor to have 2 values (one per spatial dim of input [1, 2, 3, 4]), got 3 "
            "values [2, 2, 2]");
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().size({0, 3})); }),
            "interpolate: expected size to be positive, got [0, 3]");
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().scale_factor({0.2, 1.0})); }),
            "interpolate: scale_factor [0.2, 1] turns the input size [3, 4] into an empty output [0, 4]");
  EXPECT_EQ(error_of([&] { interpolate(x4, InterpolateOptions().scale_factor(-1.0)); }),
            "interpolate: expected scale_factor to be a positive finite number, got -1");
  // size(n), and so size({n}), is one value for every dim, as PyTorch's int size
  EXPECT_EQ(interpolate(x5, InterpolateOptions().size(2)).shape(), (Shape{1, 2, 2, 2, 2}));
  EXPECT_EQ(interpolate(x5, InterpolateOptions().size(3)).shape(), (Shape{1, 2, 3, 3, 3}));
}

TEST(Interpolate, KernelsRejectBadInputNamingTheArgument) {
  EXPECT_EQ(error_of([&] { upsample_nearest2d(zeros({1, 2, 3}), {4, 4}); }),
            "upsample_nearest2d: expected a 4-D input (N, C, H, W), got [1, 2, 3]");
  EXPECT_EQ(error_of([&] { upsample_nearest_exact1d(zeros({1, 0, 3}), {4}); }),
            "upsample_nearest_exact1d: expected input (N, C, L) with non-zero C and spatial sizes, got [1, 0, 3]");
  EXPECT_EQ(error_of([&] { upsample_nearest3d(zeros({1, 1, 2, 2, 2}), {2, 0, 2}); }),
            "upsample_nearest3d: expected output_size of 3 values > 0, got [2, 0, 2]");
  EXPECT_EQ(error_of([&] { upsample_nearest1d(zeros({1, 1, 2}), {4}, -2.0); }),
            "upsample_nearest1d: expected every scale to be a positive finite number, got -2");
  EXPECT_EQ(error_of([&] { upsample_nearest1d(zeros({1, 1, 2}, DType::Int64), {4}); }),
            "upsample_nearest1d: expected a floating input, got int64");
  EXPECT_EQ(error_of([&] { upsample_nearest2d_backward(zeros({1, 2, 5, 5}), {5, 6}, {1, 2, 3, 4}); }),
            "upsample_nearest2d_backward: expected grad_output of shape [1, 2, 5, 6] (N, C, output_size), got "
            "[1, 2, 5, 5]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool1d(zeros({1, 2, 3, 4}), {2}); }),
            "adaptive_avg_pool1d: expected input to have 2 (C, L) or 3 (N, C, L) dims, got [1, 2, 3, 4]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool3d(zeros({1, 2, 3, 4, 5}), {2, 2}); }),
            "adaptive_avg_pool3d: expected output_size to have 1 or 3 values, got 2 values [2, 2]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool3d(zeros({2, 3, 0, 4}), {2}); }),
            "adaptive_avg_pool3d: expected input with non-zero C, D, H and W, got [2, 3, 0, 4]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool3d_backward(zeros({1, 2, 2, 2}), {1, 2, 4, 4, 4}); }),
            "adaptive_avg_pool3d_backward: expected grad_output with the leading dims of input_size [1, 2, 4, 4, 4] "
            "and a non-empty output size, got [1, 2, 2, 2]");
}

TEST(Interpolate, HostileSizesAreErrorsNotAllocations) {
  Tensor x = zeros({1, 1, 2, 2});
  const int64_t k2_31 = int64_t{1} << 31;
  EXPECT_NE(error_of([&] { interpolate(x, InterpolateOptions().size({k2_31 * 2, k2_31 * 2})); })
                .find("upsample_nearest2d: expected the product of the sizes of the output shape"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { interpolate(x, InterpolateOptions().scale_factor(1e30)); }),
            "interpolate: expected scale_factor * input size to fit in int64, got 1e+30 * 2");
  EXPECT_NE(error_of([&] { adaptive_avg_pool3d(zeros({1, 1, 2, 2, 2}), {k2_31, k2_31, 2}); })
                .find("adaptive_avg_pool3d: expected the product of the sizes of the output shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              upsample_nearest_exact3d_backward(zeros({1, 1, 2, 2, 2}), {2, 2, 2}, {k2_31, k2_31, 4, 1, 1});
            })
                .find("upsample_nearest_exact3d_backward: expected the product of the sizes of input_size"),
            std::string::npos);
}


// The interpolating modes reach their kernels with PyTorch's arguments: the output size, the
// user's scale factor unless recompute_scale_factor, and align_corners. (Their index and weight
// rules are checked against PyTorch in test_upsample_modes.cpp.)
TEST(Interpolate, InterpolatingModesCallTheirKernels) {
  using M = InterpolateMode;
  manual_seed(3);
  const Tensor x3 = randn({2, 3, 5}), x4 = randn({2, 3, 5, 4}), x5 = randn({1, 2, 3, 4, 5});
  auto same = [](const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  };
  for (bool ac : {false, true}) {
    same(interpolate(x3, InterpolateOptions().size(8).mode(M::Linear).align_corners(ac)),
         upsample_linear1d(x3, {8}, ac));
    same(interpolate(x4, InterpolateOptions().size({7, 3}).mode(M::Bicubic).align_corners(ac)),
         upsample_bicubic2d(x4, {7, 3}, ac));
    same(interpolate(x5, InterpolateOptions().size({4, 2, 6}).mode(M::Trilinear).align_corners(ac)),
         upsample_trilinear3d(x5, {4, 2, 6}, ac));
  }
  // scale 1.7: sizes floor(in * 1.7); the scale itself goes to the kernel unless recomputed
  same(interpolate(x3, InterpolateOptions().scale_factor(1.7).mode(M::Linear)), upsample_linear1d(x3, {8}, false, 1.7));
  same(interpolate(x3, InterpolateOptions().scale_factor(1.7).mode(M::Linear).recompute_scale_factor(true)),
       upsample_linear1d(x3, {8}, false));
  same(interpolate(x4, InterpolateOptions().scale_factor(1.7).mode(M::Bicubic)),
       upsample_bicubic2d(x4, {8, 6}, false, 1.7, 1.7));
  same(interpolate(x5, InterpolateOptions().scale_factor({0.6, 1.7, 2.0}).mode(M::Trilinear)),
       upsample_trilinear3d(x5, {1, 6, 10}, false, 0.6, 1.7, 2.0));
  same(interpolate(x5, InterpolateOptions().scale_factor({0.6, 1.7, 2.0}).mode(M::Trilinear).recompute_scale_factor(true)),
       upsample_trilinear3d(x5, {1, 6, 10}, false));
}

}  // namespace
}  // namespace tg
