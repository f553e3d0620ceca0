// Bilinear upsampling against PyTorch (tools/fixtures/upsample.py): sizes and scales, both
// align_corners settings, up and down; interpolate's scale rule; non-contiguous input;
// determinism; the error for each kind of bad input.
#include <gtest/gtest.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

std::optional<double> optional_scale(const nlohmann::json& j) {
  return j.is_null() ? std::nullopt : std::optional<double>(j.get<double>());
}

TEST(Upsample, MatchesPyTorchThroughTheTape) {
  auto cases = load_golden_cases("upsample");
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // The fixture's rtol: float32 differs from PyTorch by an ulp or two (separable sums).
    const double rtol = c.json["tolerance"]["rtol"], atol = rtol * 1e-2;
    Tensor x = c.tensor("input").requires_grad_();
    std::array<int64_t, 2> out{c.json["output_size"][0], c.json["output_size"][1]};
    Tensor y = upsample_bilinear2d(x, out, c.json["align_corners"], optional_scale(c.json["scales_h"]),
                                   optional_scale(c.json["scales_w"]));
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    y.backward(c.tensor("grad_output"));
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
  }
}

TEST(Upsample, InterpolateByScaleFloorsTheSizeAndPassesTheScaleOn) {
  manual_seed(1);
  Tensor x = randn({1, 2, 5, 5}, DType::Float64);
  Tensor y = interpolate(x, 1.7);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 8, 8}));  // floor(5 * 1.7) = 8
  // The scale (1/1.7 per step) differs from in/out (5/8): the two results differ.
  Tensor by_scale = upsample_bilinear2d(x, {8, 8}, false, 1.7, 1.7);
  Tensor by_size = upsample_bilinear2d(x, {8, 8}, false);
  EXPECT_EQ(y.to_vector<double>(), by_scale.to_vector<double>());
  EXPECT_NE(y.to_vector<double>(), by_size.to_vector<double>());
  EXPECT_EQ(interpolate(x, {3, 7}).shape(), (Shape{1, 2, 3, 7}));
}

TEST(Upsample, SameSizeIsTheIdentityAndChannelsLastViewsWork) {
  manual_seed(2);
  Tensor x = randn({2, 3, 4, 5});
  EXPECT_EQ(upsample_bilinear2d(x, {4, 5}, false).to_vector<float>(), x.to_vector<float>());
  Tensor nhwc = randn({2, 4, 5, 3});
  Tensor view = nhwc.permute({0, 3, 1, 2});  // (N, C, H, W) view of channels-last memory
  EXPECT_EQ(upsample_bilinear2d(view, {7, 9}, true).to_vector<float>(),
            upsample_bilinear2d(view.contiguous(), {7, 9}, true).to_vector<float>());
}

TEST(Upsample, BackwardIsDeterministicAndTheAdjointOfForward) {
  manual_seed(4);
  Tensor x = randn({2, 8, 16, 16}, DType::Float64), g = randn({2, 8, 40, 24}, DType::Float64);
  Tensor a = upsample_bilinear2d_backward(g, {40, 24}, {2, 8, 16, 16}, false);
  Tensor b = upsample_bilinear2d_backward(g, {40, 24}, {2, 8, 16, 16}, false);
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
  // <up(x), g> == <x, up^T(g)>
  double lhs = sum(mul(upsample_bilinear2d(x, {40, 24}, false), g)).item();
  double rhs = sum(mul(x, a)).item();
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::abs(lhs));
}

// A batch of 0 samples gives an empty output and gradient, as in PyTorch (and as the other modes).
TEST(Upsample, EmptyBatchGivesEmptyResults) {
  Tensor x = zeros({0, 3, 4, 4});
  x.requires_grad_();
  Tensor y = upsample_bilinear2d(x, {8, 6}, false);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 8, 6}));
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(interpolate(zeros({0, 2, 5, 5}), 2.0, true).shape(), (Shape{0, 2, 10, 10}));
}

TEST(Upsample, RejectsBadInputNamingTheArgument) {
  Tensor x = zeros({1, 2, 3, 4});
  EXPECT_EQ(error_of([&] { upsample_bilinear2d(zeros({2, 3, 4}), {4, 4}, false); }),
            "upsample_bilinear2d: expected a 4-D input (N, C, H, W), got [2, 3, 4]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d(x, {0, 4}, false); }),
            "upsample_bilinear2d: expected output_size of 2 values > 0, got [0, 4]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d(zeros({1, 2, 0, 4}), {4, 4}, false); }),
            "upsample_bilinear2d: expected input_size (N, C, H, W) with N >= 0 and the other sizes > 0, got [1, 2, 0, 4]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d(x, {4, 4}, false, -2.0); }),
            "upsample_bilinear2d: expected scales_h to be a positive finite number, got -2");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d(zeros({1, 2, 3, 4}, DType::Int64), {4, 4}, false); }),
            "upsample_bilinear2d: expected a floating input, got int64");
  EXPECT_EQ(error_of([&] { interpolate(x, 0.2); }),
            "interpolate: scale_factor 0.2 turns the input size [3, 4] into an empty output [0, 0]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d_backward(zeros({1, 2, 5, 5}), {5, 6}, {1, 2, 3, 4}, false); }),
            "upsample_bilinear2d_backward: expected grad_out of shape [1, 2, 5, 6] (N, C, Ho, Wo), got [1, 2, 5, 5]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d_backward(zeros({1, 2, 5, 6}), {5, 6}, {1, 2, 3, 0}, false); }),
            "upsample_bilinear2d_backward: expected input_size (N, C, H, W) with N >= 0 and the other sizes > 0, got "
            "[1, 2, 3, 0]");
  EXPECT_EQ(error_of([&] { upsample_bilinear2d_backward(zeros({1, 2, 5, 6}), {5, -1}, {1, 2, 3, 4}, false); }),
            "upsample_bilinear2d_backward: expected output_size of 2 values > 0, got [5, -1]");
}

}  // namespace
}  // namespace tg
