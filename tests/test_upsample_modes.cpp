// upsample_linear1d, upsample_bicubic2d and upsample_trilinear3d against PyTorch 1.13
// (tools/fixtures/upsample_modes.py): sizes and scales (1.7, 0.6, 2, 0.5), both align_corners
// settings, up and down, output and input size 1; the empty batch; the backward as the adjoint
// of the forward, the same bits at any thread count; the errors for bad input.
#include <gtest/gtest.h>

#include "golden.h"
#include "isa_test_util.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

// A fixture's scale: null is "not given".
std::optional<double> optional_number(const nlohmann::json& j) {
  return j.is_null() ? std::nullopt : std::optional<double>(j.get<double>());
}

// The forward of the case's mode with the case's arguments.
Tensor run_mode(const nlohmann::json& c, const Tensor& x) {
  const auto& o = c["output_size"];
  const auto& s = c["scales"];
  const bool ac = c["align_corners"];
  const std::string mode = c["mode"];
  if (mode == "linear") return upsample_linear1d(x, {o[0]}, ac, optional_number(s[0]));
  if (mode == "bicubic") return upsample_bicubic2d(x, {o[0], o[1]}, ac, optional_number(s[0]), optional_number(s[1]));
  return upsample_trilinear3d(x, {o[0], o[1], o[2]}, ac, optional_number(s[0]), optional_number(s[1]),
                              optional_number(s[2]));
}

TEST(UpsampleModes, MatchPyTorchThroughTheTape) {
  auto cases = load_golden_cases("upsample_modes");
  ASSERT_GE(cases.size(), 70u);
  double worst_rel[2] = {0, 0};  // float32, float64: reported, the bound is the fixture's
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // The fixture's tolerance: float32 forward within ~1e-6 of torch (bicubic's weights in float,
    // summed in another order), backward sums in float in aten, in double here.
    const double rtol = c.json["tolerance"]["rtol"], atol = c.json["tolerance"]["atol"];
    Tensor x = c.tensor("input").requires_grad_();
    Tensor y = run_mode(c.json, x);
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    y.backward(c.tensor("grad_output"));
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
    for (auto [got, want] : {std::pair{y, c.tensor("output")}, std::pair{x.grad(), c.tensor("grad_input")}}) {
      std::vector<double> a = got.to(DType::Float64).to_vector<double>(), e = want.to(DType::Float64).to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        worst_rel[c.dtype() == DType::Float64] =
            std::max(worst_rel[c.dtype() == DType::Float64], std::abs(a[i] - e[i]) / std::max(std::abs(e[i]), 1.0));
    }
  }
  std::printf("worst |ours - torch| / max(|torch|, 1): float32 %.3g, float64 %.3g\n", worst_rel[0], worst_rel[1]);
}

TEST(UpsampleModes, KernelBackwardsAreTheAdjointsOfTheForwards) {
  manual_seed(4);
  auto check = [](const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx) {
    // <up(x), g> == <x, up^T(g)>
    const double lhs = sum(mul(y, g)).item(), rhs = sum(mul(x, gx)).item();
    EXPECT_NEAR(lhs, rhs, 1e-10 * (std::abs(lhs) + 1));
  };
  const auto f64 = DType::Float64;
  Tensor x1 = randn({2, 3, 9}, f64), g1 = randn({2, 3, 20}, f64);
  check(x1, upsample_linear1d(x1, {20}, false, 2.3), g1, upsample_linear1d_backward(g1, {20}, {2, 3, 9}, false, 2.3));
  Tensor x2 = randn({2, 3, 9, 7}, f64), g2 = randn({2, 3, 20, 4}, f64);
  check(x2, upsample_bicubic2d(x2, {20, 4}, true), g2, upsample_bicubic2d_backward(g2, {20, 4}, {2, 3, 9, 7}, true));
  Tensor x3 = randn({2, 2, 5, 9, 7}, f64), g3 = randn({2, 2, 11, 4, 13}, f64);
  check(x3, upsample_trilinear3d(x3, {11, 4, 13}, false), g3,
        upsample_trilinear3d_backward(g3, {11, 4, 13}, {2, 2, 5, 9, 7}, false));
}

TEST(UpsampleModes, SameBitsAtOneTwoAndThreeThreads) {
  manual_seed(5);
  // Shapes large enough to run in parallel (>= 2^14 outputs), with fewer planes than threads
  // for bicubic so that rows are split too.
  Tensor x2 = randn({1, 2, 40, 33}), g2 = randn({1, 2, 97, 120});
  Tensor x3 = randn({1, 3, 9, 10, 11}), g3 = randn({1, 3, 20, 21, 22});
  auto run = [&] {
    return std::vector<Tensor>{upsample_bicubic2d(x2, {97, 120}, false),
                               upsample_bicubic2d_backward(g2, {97, 120}, {1, 2, 40, 33}, false),
                               upsample_trilinear3d(x3, {20, 21, 22}, true),
                               upsample_trilinear3d_backward(g3, {20, 21, 22}, {1, 3, 9, 10, 11}, true)};
  };
  const int saved = num_threads();
  set_num_threads(1);
  std::vector<Tensor> one = run();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    std::vector<Tensor> many = run();
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i].to_vector<float>(), many[i].to_vector<float>()) << i;
  }
  set_num_threads(saved);
}

// Each instruction-set path against the generic one (tests/isa_test_util.h). Tolerance relative
// to the largest value, float32 1e-6, float64 2e-14, as the bilinear kernels' (test_isa_families):
// the same sums in the same order, but the AVX2 and AVX-512 copies fuse a * b + c into one
// rounding where the generic copy rounds twice.
TEST(UpsampleModes, EveryInstructionSetMatchesTheGenericPath) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    manual_seed(7);
    Tensor x1 = randn({2, 3, 13}, dt), g1 = randn({2, 3, 29}, dt);
    Tensor x2 = randn({2, 3, 7, 9}, dt), g2 = randn({2, 3, 17, 5}, dt);
    Tensor x3 = randn({1, 3, 5, 7, 9}, dt), g3 = randn({1, 3, 11, 3, 19}, dt);
    testing::expect_same_on_every_isa(
        [&] {
          return std::vector<Tensor>{upsample_linear1d(x1, {29}, false),
                                     upsample_linear1d_backward(g1, {29}, {2, 3, 13}, true),
                                     upsample_bicubic2d(x2, {17, 5}, false, 2.5, 0.6),
                                     upsample_bicubic2d_backward(g2, {17, 5}, {2, 3, 7, 9}, true),
                                     upsample_trilinear3d(x3, {11, 3, 19}, false),
                                     upsample_trilinear3d_backward(g3, {11, 3, 19}, {1, 3, 5, 7, 9}, true)};
        },
        dt == DType::Float32 ? 1e-6 : 2e-14);
  }
}

TEST(UpsampleModes, EmptyBatchGivesAnEmptyOutputAndGradient) {
  Tensor x1 = zeros({0, 2, 5}).requires_grad_();
  Tensor y1 = upsample_linear1d(x1, {7}, false);
  EXPECT_EQ(y1.shape(), (Shape{0, 2, 7}));
  Tensor x2 = zeros({0, 2, 3, 4}).requires_grad_();
  Tensor y2 = upsample_bicubic2d(x2, {5, 6}, true);
  EXPECT_EQ(y2.shape(), (Shape{0, 2, 5, 6}));
  Tensor x3 = zeros({0, 1, 2, 3, 4}, DType::Float64).requires_grad_();
  Tensor y3 = upsample_trilinear3d(x3, {3, 4, 5}, false);
  EXPECT_EQ(y3.shape(), (Shape{0, 1, 3, 4, 5}));
  y2.backward(zeros({0, 2, 5, 6}));
  EXPECT_EQ(x2.grad().shape(), (Shape{0, 2, 3, 4}));
  EXPECT_EQ(upsample_trilinear3d_backward(zeros({0, 1, 3, 4, 5}), {3, 4, 5}, {0, 1, 2, 3, 4}, false).shape(),
            (Shape{0, 1, 2, 3, 4}));
}

TEST(UpsampleModes, BicubicOvershootsAndReplicatesTheBorder) {
  // A step 0 0 1 1 upsampled: cubic convolution overshoots (values below 0 and above 1), and the
  // constant rows stay constant (the border taps clamp, they do not read zeros).
  Tensor x = from_vector(std::vector<double>{0, 0, 1, 1}, {1, 1, 1, 4}).to(DType::Float64);
  std::vector<double> y = upsample_bicubic2d(x, {1, 16}, false).to_vector<double>();
  EXPECT_LT(*std::min_element(y.begin(), y.end()), 0.0);
  EXPECT_GT(*std::max_element(y.begin(), y.end()), 1.0);
  EXPECT_EQ(y.front(), 0.0);
  EXPECT_EQ(y.back(), 1.0);
  Tensor c = full({1, 2, 3, 5}, 2.5).to(DType::Float64);
  for (double v : upsample_bicubic2d(c, {7, 4}, false, 0.3, 0.7).to_vector<double>()) EXPECT_NEAR(v, 2.5, 1e-14);
}

TEST(UpsampleModes, SixteenBitIsTheFloat32ResultRoundedOnce) {
  manual_seed(6);
  Tensor x = randn({2, 3, 6, 7}), x3 = randn({1, 2, 4, 5, 6}), x1 = randn({2, 3, 9});
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = x.to(dt), h3 = x3.to(dt), h1 = x1.to(dt);
    auto values = [](const Tensor& t) { return t.to(DType::Float32).to_vector<float>(); };
    const DType f32 = DType::Float32;
    EXPECT_EQ(values(upsample_bicubic2d(h, {11, 5}, false)), values(upsample_bicubic2d(h.to(f32), {11, 5}, false).to(dt)));
    EXPECT_EQ(values(upsample_trilinear3d(h3, {7, 3, 9}, true)),
              values(upsample_trilinear3d(h3.to(f32), {7, 3, 9}, true).to(dt)));
    EXPECT_EQ(values(upsample_linear1d(h1, {20}, false)), values(upsample_linear1d(h1.to(f32), {20}, false).to(dt)));
  }
}

TEST(UpsampleModes, RejectBadInputNamingTheArgument) {
  EXPECT_EQ(error_of([&] { upsample_linear1d(zeros({2, 3}), {4}, false); }),
            "upsample_linear1d: expected a 3-D input (N, C, L), got [2, 3]");
  EXPECT_EQ(error_of([&] { upsample_bicubic2d(zeros({1, 2, 3}), {4, 4}, false); }),
            "upsample_bicubic2d: expected a 4-D input (N, C, H, W), got [1, 2, 3]");
  EXPECT_EQ(error_of([&] { upsample_trilinear3d(zeros({1, 2, 3, 4}), {4, 4, 4}, false); }),
            "upsample_trilinear3d: expected a 5-D input (N, C, D, H, W), got [1, 2, 3, 4]");
  EXPECT_EQ(error_of([&] { upsample_bicubic2d(zeros({1, 2, 3, 4}), {0, 4}, false); }),
            "upsample_bicubic2d: expected output_size of 2 values > 0, got [0, 4]");
  EXPECT_EQ(error_of([&] { upsample_linear1d(zeros({1, 2, 3}), {-1}, false); }),
            "upsample_linear1d: expected output_size of 1 value > 0, got [-1]");
  EXPECT_EQ(error_of([&] { upsample_trilinear3d(zeros({1, 2, 0, 4, 4}), {4, 4, 4}, false); }),
            "upsample_trilinear3d: expected input (N, C, D, H, W) with N >= 0 and the other sizes > 0, got "
            "[1, 2, 0, 4, 4]");
  EXPECT_EQ(error_of([&] { upsample_trilinear3d(zeros({1, 2, 3, 4, 4}), {4, 4, 4}, false, 1.0, -2.0); }),
            "upsample_trilinear3d: expected scales_h to be a positive finite number, got -2");
  EXPECT_EQ(error_of([&] { upsample_linear1d(zeros({1, 2, 3}, DType::Int64), {4}, false); }),
            "upsample_linear1d: expected a floating input, got int64");
  EXPECT_EQ(error_of([&] { upsample_bicubic2d_backward(zeros({1, 2, 5, 5}), {5, 6}, {1, 2, 3, 4}, false); }),
            "upsample_bicubic2d_backward: expected grad_out of shape [1, 2, 5, 6] (N, C, output_size), got "
            "[1, 2, 5, 5]");
  EXPECT_EQ(error_of([&] { upsample_linear1d_backward(zeros({1, 2, 5}), {5}, {1, 0, 3}, false); }),
            "upsample_linear1d_backward: expected input_size (N, C, L) with N >= 0 and the other sizes > 0, got "
            "[1, 0, 3]");
  EXPECT_EQ(error_of([&] { upsample_trilinear3d_backward(zeros({1, 2, 5, 5, 5}), {5, 5, 0}, {1, 2, 3, 4, 4}, false); }),
            "upsample_trilinear3d_backward: expected output_size of 3 values > 0, got [5, 5, 0]");
}

}  // namespace
}  // namespace tg
