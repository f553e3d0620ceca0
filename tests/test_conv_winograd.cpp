// The Winograd path of the float32 3x3 stride-1 convolutions (ops/conv/conv_kernels_winograd.cpp):
// forward and input gradient, normal and transposed, against the float64 convolution (which sums
// directly) within 2e-5 of the sum of |products|; that the path really ran (its bits differ from
// the direct sum's); the same bits for any thread count; and the fallback to the direct kernels
// for non-finite and huge values, whose results are then the direct kernels' bits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <tapegrad/ops/conv/conv_kernels.h>

#include "isa_test_util.h"
#include "test_util.h"

namespace tg {
namespace {

struct Case {
  const char* what;
  Shape x, w;
  int64_t pad, groups;
  bool transposed;
};

// Shapes that reach the path: sizes that are and are not multiples of the 4x4 tiles, paddings
// 0, 1 and 2, groups, 3-D, channel counts around the register tiles (8 and 4 outputs), with and
// without bias (each case runs both), one tile row per item and many.
const std::vector<Case> kCases = {
    {"ResNet-like 32 -> 32, 20 x 20", {2, 32, 20, 20}, {32, 32, 3, 3}, 1, 1, false},
    {"odd sizes 17 x 19, 25 -> 29 channels", {2, 25, 17, 19}, {29, 25, 3, 3}, 1, 1, false},
    {"no padding, 18 x 23", {1, 24, 18, 23}, {28, 24, 3, 3}, 0, 1, false},
    {"padding 2, 16 x 30", {2, 24, 16, 30}, {24, 24, 3, 3}, 2, 1, false},
    {"2 groups of 24 -> 28", {2, 48, 18, 18}, {56, 24, 3, 3}, 1, 2, false},
    {"wide rows, 16 x 70", {1, 24, 16, 70}, {26, 24, 3, 3}, 1, 1, false},
    {"256 -> 24 channels: items of fewer tiles", {1, 256, 24, 24}, {24, 256, 3, 3}, 1, 1, false},
    {"transposed 24 -> 30, padding 1", {2, 24, 17, 17}, {24, 30, 3, 3}, 1, 1, true},
    // 3-D: sums over the kernel's slices of 2-D ones, the slices past the volume's ends zeros
    {"3-D 3x3x3, 16 -> 20 (48 terms per product), 5 slices", {2, 16, 5, 18, 17}, {20, 16, 3, 3, 3}, 1, 1, false},
    {"3-D 2x3x3, no padding, 2 groups", {1, 32, 4, 18, 20}, {32, 16, 2, 3, 3}, 0, 2, false},
    {"3-D transposed 3x3x3", {1, 16, 3, 16, 19}, {16, 18, 3, 3, 3}, 1, 1, true},
};

IntList ones(const Case& c) { return IntList(c.x.size() - 2, 1); }
IntList zeros(const Case& c) { return IntList(c.x.size() - 2, 0); }
IntList pads(const Case& c) { return IntList(c.x.size() - 2, c.pad); }

Tensor conv(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  return convolution(x, w, b, ones(c), pads(c), ones(c), c.transposed, zeros(c), c.groups);
}

ConvolutionGrads conv_backward(const Case& c, const Tensor& g, const Tensor& x, const Tensor& w) {
  return convolution_backward(g, x, w, {w.size(c.transposed ? 1 : 0) * (c.transposed ? c.groups : 1)}, ones(c),
                              pads(c), ones(c), c.transposed, zeros(c), c.groups);
}

// |got - want| <= 2e-5 * bound + 1e-30 everywhere (bound: the same map on |x| and |w|, in double).
void expect_within(const Tensor& got, const Tensor& want, const Tensor& bound, const std::string& what) {
  const std::vector<double> a = got.to(DType::Float64).to_vector<double>(), b = want.to_vector<double>(),
                            s = bound.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - b[i]);
    worst = std::max(worst, err / (s[i] + 1e-300));
    if (!(err <= 2e-5 * s[i] + 1e-30)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": worst error " << worst << " x the sum of |products|";
}

// The same Inf and NaN entries, and the finite ones within 1e-4 relative of the largest.
void expect_same_nonfinite_and_close(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to(DType::Float64).to_vector<double>(),
                            b = want.to(DType::Float64).to_vector<double>();
  double scale = 0;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  size_t bad = 0, nonfinite = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) {
      ++nonfinite;
      if (!(std::isnan(b[i]) ? std::isnan(a[i]) : a[i] == b[i])) ++bad;
    } else if (!(std::fabs(a[i] - b[i]) <= 1e-4 * scale)) {
      ++bad;
    }
  }
  EXPECT_GT(nonfinite, 0u);
  EXPECT_EQ(bad, 0u);
}

TEST(ConvWinograd, ForwardAndInputGradientWithinTheBoundOfFloat64) {
  for (const Case& c : kCases) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(c.what) + (with_bias ? ", bias" : ", no bias"));
      manual_seed(5);
      const Tensor x = randn(c.x), w = randn(c.w);
      const int64_t out_ch = c.transposed ? c.w[1] * c.groups : c.w[0];
      const Tensor b = with_bias ? randn({out_ch}) : Tensor();
      const Tensor y = conv(c, x, w, b);
      const Tensor g = randn(y.shape());
      const Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64);
      const Tensor b64 = with_bias ? b.to(DType::Float64) : Tensor();
      expect_within(y, conv(c, x64, w64, b64), conv(c, abs(x64), abs(w64), with_bias ? abs(b64) : Tensor()),
                    "output");
      const ConvolutionGrads r = conv_backward(c, g, x, w);
      const Tensor g64 = g.to(DType::Float64);
      const ConvolutionGrads r64 = conv_backward(c, g64, x64, w64);
      const ConvolutionGrads bound = conv_backward(c, abs(g64), abs(x64), abs(w64));
      expect_within(r.grad_input, r64.grad_input, bound.grad_input, "grad_input");
    }
  }
}

// The path ran: its bits differ from the direct sum's (set_conv_winograd(false)) somewhere, in
// the forward and in the input gradient. Without it the test above could pass on the direct
// kernels alone.
TEST(ConvWinograd, ThePathRunsAndCanBeTurnedOff) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    manual_seed(6);
    const Tensor x = randn(c.x), w = randn(c.w);
    const Tensor b = randn({c.transposed ? c.w[1] * c.groups : c.w[0]});
    const Tensor y = conv(c, x, w, b), g = randn(y.shape());
    const ConvolutionGrads r = conv_backward(c, g, x, w);
    EXPECT_TRUE(kernels::conv_winograd_enabled());
    const bool was = kernels::set_conv_winograd(false);
    EXPECT_TRUE(was);
    const Tensor y_direct = conv(c, x, w, b);
    const ConvolutionGrads r_direct = conv_backward(c, g, x, w);
    kernels::set_conv_winograd(true);
    EXPECT_FALSE(same_bits(y, y_direct)) << "the forward did not take the Winograd path";
    EXPECT_FALSE(same_bits(r.grad_input, r_direct.grad_input)) << "the input gradient did not take the Winograd path";
    EXPECT_TRUE(same_bits(r.grad_weight, r_direct.grad_weight)) << "the weight gradient sums directly";
    EXPECT_TRUE(same_bits(conv(c, x, w, b), y)) << "turned on again, the same bits";
  }
}

// Below 16 channels, 24 terms per product or 16x16 positions (where it was not faster), and with
// padding past the kernel's size - 1, the direct kernels run.
TEST(ConvWinograd, SmallPlanesAndFewChannelsSumDirectly) {
  const std::vector<Case> small = {
      {"14 x 14 planes", {2, 32, 14, 14}, {32, 32, 3, 3}, 1, 1, false},
      {"8 input channels", {2, 8, 24, 24}, {32, 8, 3, 3}, 1, 1, false},
      {"8 output channels", {2, 32, 24, 24}, {8, 32, 3, 3}, 1, 1, false},
      {"16 channels in 2-D (16 terms per product)", {2, 16, 24, 24}, {16, 16, 3, 3}, 1, 1, false},
      // outputs whose windows hold only zeros: exactly the bias, which tiles would round with
      // their neighbours'
      {"padding 3", {1, 24, 20, 20}, {24, 24, 3, 3}, 3, 1, false},
      {"3-D padding 3", {1, 16, 4, 18, 18}, {16, 16, 3, 3, 3}, 3, 1, false},
  };
  for (const Case& c : small) {
    SCOPED_TRACE(c.what);
    manual_seed(10);
    const Tensor x = randn(c.x), w = randn(c.w), b = randn({c.w[0]});
    const Tensor y = conv(c, x, w, b);
    const Tensor gx = conv_backward(c, randn(y.shape()), x, w).grad_input;
    manual_seed(10);
    const Tensor x2 = randn(c.x), w2 = randn(c.w), b2 = randn({c.w[0]});
    const bool was = kernels::set_conv_winograd(false);
    const Tensor y_direct = conv(c, x2, w2, b2);
    const Tensor gx_direct = conv_backward(c, randn(y.shape()), x2, w2).grad_input;
    kernels::set_conv_winograd(was);
    EXPECT_TRUE(same_bits(y, y_direct));
    EXPECT_TRUE(same_bits(gx, gx_direct));
  }
}

// The same with the padding past the kernel's size - 1 on one side only ((before, after) pairs):
// outputs whose windows are all padding are exactly the bias, forward and transposed.
TEST(ConvWinograd, WideAfterPaddingSumsDirectly) {
  struct Pads {
    int64_t size;
    IntList padding;
  };
  for (const Pads& c : {Pads{16, {2, 3, 2, 3}}, Pads{18, {0, 4, 0, 4}}, Pads{19, {1, 1, 0, 3}}}) {
    SCOPED_TRACE(::testing::PrintToString(c.padding) + " on " + std::to_string(c.size));
    manual_seed(12);
    const Tensor x = randn({1, 32, c.size, c.size}), w = randn({32, 32, 3, 3}), b = full({32}, 0.3125);
    const Tensor y = conv2d(x, w, b, {1}, c.padding);
    const bool was = kernels::set_conv_winograd(false);
    const Tensor y_direct = conv2d(x, w, b, {1}, c.padding);
    kernels::set_conv_winograd(was);
    EXPECT_TRUE(same_bits(y, y_direct));
  }
}

TEST(ConvWinograd, SameBitsForAnyThreadCount) {
  const int saved = num_threads();
  const Case c{"big enough for every thread", {4, 24, 40, 36}, {32, 24, 3, 3}, 1, 1, false};
  manual_seed(7);
  const Tensor x = randn(c.x), w = randn(c.w), b = randn({32});
  set_num_threads(2);
  const Tensor y2 = conv(c, x, w, b), g = randn(y2.shape());
  const ConvolutionGrads r2 = conv_backward(c, g, x, w);
  set_num_threads(1);
  const Tensor y1 = conv(c, x, w, b);
  const ConvolutionGrads r1 = conv_backward(c, g, x, w);
  set_num_threads(3);
  const Tensor y3 = conv(c, x, w, b);
  const ConvolutionGrads r3 = conv_backward(c, g, x, w);
  set_num_threads(saved);
  EXPECT_TRUE(same_bits(y1, y2));
  EXPECT_TRUE(same_bits(y1, y3));
  EXPECT_TRUE(same_bits(r1.grad_input, r2.grad_input));
  EXPECT_TRUE(same_bits(r3.grad_input, r2.grad_input));
}

// Inf, NaN or a value beyond 1e12 in the input, the weights or grad_output: the direct kernels
// run, so the result is theirs bit for bit (Inf and NaN only where the definition puts them);
// except the forward with an Inf or NaN weight, which convolves the weights' finite part (on the
// Winograd path) and adds the non-finite taps where they meet the image.
TEST(ConvWinograd, NonFiniteAndHugeValuesTakeTheDirectKernels) {
  const Case& c = kCases[1];
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double bad : {inf, -inf, nan, 3e12, -1e30}) {
    for (int where : {0, 1, 2}) {  // input, weight, grad_output
      SCOPED_TRACE("value " + std::to_string(bad) + " in " + (where == 0 ? "input" : where == 1 ? "weight" : "grad"));
      manual_seed(8);
      std::vector<double> xv = randn(c.x).to(DType::Float64).to_vector<double>();
      std::vector<double> wv = randn(c.w).to(DType::Float64).to_vector<double>();
      const Tensor b = randn({c.w[0]});
      std::vector<double> gv = randn(conv(c, randn(c.x), randn(c.w), b).shape()).to(DType::Float64).to_vector<double>();
      (where == 0 ? xv : where == 1 ? wv : gv)[37] = bad;
      const Tensor x = from_vector(xv, c.x).to(DType::Float32), w = from_vector(wv, c.w).to(DType::Float32);
      const Tensor g = from_vector(gv, conv(c, x, w, b).shape()).to(DType::Float32);
      const Tensor y = conv(c, x, w, b);
      const ConvolutionGrads r = conv_backward(c, g, x, w);
      kernels::set_conv_winograd(false);
      const Tensor y_direct = conv(c, x, w, b);
      const ConvolutionGrads r_direct = conv_backward(c, g, x, w);
      kernels::set_conv_winograd(true);
      const Tensor &gx = r.grad_input, &gx_direct = r_direct.grad_input;
      if (where == 1 && !std::isfinite(bad)) {
        // the forward adds the non-finite weights' taps to the convolution of the finite part,
        // which takes the Winograd path: Inf and NaN where the direct sum has them, the rest close
        expect_same_nonfinite_and_close(y, y_direct);
      } else if (where == 0) {
        EXPECT_TRUE(same_bits(y, y_direct)) << "forward";
      }
      if (where != 0) {
        EXPECT_TRUE(same_bits(gx, gx_direct)) << "input gradient";
      }
    }
  }
}

// Every instruction-set path runs its own copy of the transforms and products (vectors of 4, 8
// or 16 tiles, register tiles of 4 or 8 outputs): each against the generic one.
TEST(ConvWinograd, EveryInstructionSetPathMatchesGeneric) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    manual_seed(9);
    const Tensor x = randn(c.x), w = randn(c.w);
    const Tensor b = randn({c.transposed ? c.w[1] * c.groups : c.w[0]});
    const Tensor g = randn(conv(c, x, w, b).shape());
    testing::expect_same_on_every_isa(
        [&] {
          const ConvolutionGrads r = conv_backward(c, g, x, w);
          return std::vector<Tensor>{conv(c, x, w, b), r.grad_input};
        },
        2e-5);
  }
}

}  // namespace
}  // namespace tg
