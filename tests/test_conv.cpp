// Convolutions on tensors and the tape: PyTorch's golden fixtures (tools/fixtures/conv.py), every
// output mask of the kernel API convolution_backward, empty problems, what the tape saves,
// determinism, and every bad input of issue 5.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::GoldenCase;
using testing::load_golden_cases;

IntList ints(const nlohmann::json& j) { return j.get<IntList>(); }

// PyTorch sums in its own order (MKL-DNN or its own im2col + BLAS); ours differs. In float64 the
// sums here (at most a few hundred O(1) terms) agree to ~1e-14, so 1e-10 only catches real
// errors; in float32 the same sums carry ~1e-6 relative rounding, hence 1e-4 / 1e-5.
double rtol_for(DType dt) { return dt == DType::Float64 ? 1e-10 : 1e-4; }
double atol_for(DType dt) { return dt == DType::Float64 ? 1e-12 : 1e-5; }

// The case through its PyTorch-named wrapper (conv2d, conv_transpose3d, ...): the wrappers
// take every padding form convolution() takes, so asymmetric cases run through them too.
Tensor run_wrapper(const GoldenCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const auto& j = c.json;
  const int dims = j["dims"];
  const IntList s = ints(j["stride"]), p = ints(j["padding"]), d = ints(j["dilation"]), op = ints(j["output_padding"]);
  const int64_t g = j["groups"];
  if (!j["transposed"].get<bool>()) {
    if (dims == 1) return conv1d(x, w, b, s, p, d, g);
    if (dims == 2) return conv2d(x, w, b, s, p, d, g);
    return conv3d(x, w, b, s, p, d, g);
  }
  if (dims == 1) return conv_transpose1d(x, w, b, s, p, op, g, d);
  if (dims == 2) return conv_transpose2d(x, w, b, s, p, op, g, d);
  return conv_transpose3d(x, w, b, s, p, op, g, d);
}

ConvolutionGrads run_backward(const GoldenCase& c, std::array<bool, 3> mask) {
  const auto& j = c.json;
  const IntList bias_sizes = j["has_bias"].get<bool>() ? c.tensor("bias").shape() : IntList{};
  return convolution_backward(c.tensor("grad_output"), c.tensor("input"), c.tensor("weight"), bias_sizes,
                              ints(j["stride"]), ints(j["padding"]), ints(j["dilation"]), j["transposed"],
                              ints(j["output_padding"]), j["groups"], mask);
}

TEST(Conv, MatchesPyTorchThroughTheTape) {
  auto cases = load_golden_cases("conv");
  ASSERT_GE(cases.size(), 50u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    Tensor x = c.tensor("input").requires_grad_(), w = c.tensor("weight").requires_grad_();
    Tensor b = c.has("bias") ? c.tensor("bias").requires_grad_() : Tensor();
    Tensor y = run_wrapper(c, x, w, b);
    ASSERT_EQ(y.dtype(), c.dtype());
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    y.backward(c.tensor("grad_output"));
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
    expect_close(w.grad(), c.tensor("grad_weight"), rtol, atol, "grad_weight");
    if (b.defined()) expect_close(b.grad(), c.tensor("grad_bias"), rtol, atol, "grad_bias");
  }
}

TEST(Conv, KernelApiBackwardMatchesPyTorch) {
  for (const auto& c : load_golden_cases("conv")) {
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    ConvolutionGrads r = run_backward(c, {true, true, c.has("bias")});
    expect_close(r.grad_input, c.tensor("grad_input"), rtol, atol, "grad_input");
    expect_close(r.grad_weight, c.tensor("grad_weight"), rtol, atol, "grad_weight");
    if (c.has("bias")) expect_close(r.grad_bias, c.tensor("grad_bias"), rtol, atol, "grad_bias");
  }
}

TEST(Conv, GenericConvolutionEqualsTheWrappers) {
  // The same case through convolution() and through its wrapper: one code path, same bits.
  for (const auto& c : load_golden_cases("conv")) {
    SCOPED_TRACE(c.name());
    const auto& j = c.json;
    Tensor x = c.tensor("input"), w = c.tensor("weight"), b = c.has("bias") ? c.tensor("bias") : Tensor();
    Tensor generic = convolution(x, w, b, ints(j["stride"]), ints(j["padding"]), ints(j["dilation"]), j["transposed"],
                                 ints(j["output_padding"]), j["groups"]);
    EXPECT_TRUE(same_bits(generic, run_wrapper(c, x, w, b)));
  }
}

// Every mask, on a grouped strided case, a depthwise one, a transposed one and the empty batch.
TEST(Conv, EveryOutputMaskComputesExactlyWhatIsAsked) {
  for (const auto& c : load_golden_cases("conv")) {
    const std::string n = c.name();
    if (n != "conv2d_asym_pad_stride_dil_groups_f64" && n != "conv2d_depthwise_f32" &&
        n != "conv_transpose2d_groups_dilation_f64" && n != "conv3d_basic_f32" && n != "conv2d_empty_batch_f32")
      continue;
    SCOPED_TRACE(n);
    ConvolutionGrads all = run_backward(c, {true, true, true});
    ASSERT_TRUE(all.grad_input.defined() && all.grad_weight.defined() && all.grad_bias.defined());
    for (int mask = 0; mask < 8; ++mask) {
      const std::array<bool, 3> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      ConvolutionGrads r = run_backward(c, m);
      EXPECT_EQ(r.grad_input.defined(), m[0]) << mask;
      EXPECT_EQ(r.grad_weight.defined(), m[1]) << mask;
      EXPECT_EQ(r.grad_bias.defined(), m[2]) << mask;
      if (m[0]) EXPECT_TRUE(same_bits(r.grad_input, all.grad_input)) << mask;
      if (m[1]) EXPECT_TRUE(same_bits(r.grad_weight, all.grad_weight)) << mask;
      if (m[2]) EXPECT_TRUE(same_bits(r.grad_bias, all.grad_bias)) << mask;
    }
  }
}

TEST(Conv, TapeSavesOnlyWhatBackwardNeeds) {
  manual_seed(3);
  Tensor x = randn({1, 2, 5, 5}), w = randn({3, 2, 3, 3}), b = randn({3});
  {
    Tensor xr = x.detach().requires_grad_();  // only the input wants a gradient: keep the weight
    Tensor y = conv2d(xr, w, b);
    ASSERT_TRUE(y.grad_fn());
    const auto& saved = y.grad_fn()->saved();
    ASSERT_EQ(saved.size(), 2u);
    EXPECT_FALSE(saved[0].tensor.defined());
    EXPECT_TRUE(saved[1].tensor.defined());
  }
  {
    Tensor wr = w.detach().requires_grad_();  // only the weight: keep the input
    Tensor y = conv2d(x, wr, b);
    const auto& saved = y.grad_fn()->saved();
    EXPECT_TRUE(saved[0].tensor.defined());
    EXPECT_FALSE(saved[1].tensor.defined());
    y.backward(ones(y.shape()));
    ConvolutionGrads r = convolution_backward(ones(y.shape()), x, w, {3}, {1}, {0}, {1}, false, {0}, 1);
    EXPECT_TRUE(same_bits(wr.grad(), r.grad_weight));
  }
  {
    Tensor br = b.detach().requires_grad_();  // only the bias: keep nothing
    Tensor y = conv2d(x, w, br);
    const auto& saved = y.grad_fn()->saved();
    EXPECT_FALSE(saved[0].tensor.defined());
    EXPECT_FALSE(saved[1].tensor.defined());
    y.backward(full(y.shape(), 2.0));
    EXPECT_TRUE(same_bits(br.grad(), full({3}, 2.0 * 9)));  // 3x3 outputs of 2 each
  }
}

TEST(Conv, NonContiguousInputsGiveTheContiguousResult) {
  manual_seed(4);
  Tensor x = randn({2, 5, 6, 3}).permute({0, 3, 1, 2});  // (2, 3, 5, 6), channels last in memory
  Tensor w = randn({4, 3, 3, 3});
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(same_bits(conv2d(x, w, Tensor(), {1}, {1}), conv2d(x.contiguous(), w, Tensor(), {1}, {1})));
}

TEST(Conv, EmptyChannelsGiveBiasAndZeroGradients) {
  // C_in = 0: nothing to sum, the output is the bias; the gradients are zeros (input, weight are
  // empty) and grad_bias is still the sum of grad_output.
  Tensor x = Tensor::empty({2, 0, 4, 4}).requires_grad_();
  Tensor w = Tensor::empty({3, 0, 3, 3}).requires_grad_();
  Tensor b = from_vector(std::vector<float>{1.f, -2.f, 0.5f}, {3}).requires_grad_();
  Tensor y = conv2d(x, w, b, {1}, {1});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 4}));
  std::vector<float> v = y.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], (i / 16 % 3 == 0 ? 1.f : i / 16 % 3 == 1 ? -2.f : 0.5f)) << i;
  y.backward(ones(y.shape()));
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_TRUE(same_bits(b.grad(), full({3}, 32.0)));  // 2 images x 16 positions of ones
  // The empty batch: empty output, zero weight gradient (checked against PyTorch's in the
  // golden cases), and a zero bias gradient.
  Tensor x0 = Tensor::empty({0, 2, 5, 5});
  ConvolutionGrads r =
      convolution_backward(Tensor::empty({0, 3, 5, 5}), x0, randn({3, 2, 3, 3}), {3}, {1}, {1}, {1}, false, {0}, 1);
  EXPECT_TRUE(same_bits(r.grad_weight, zeros({3, 2, 3, 3})));
  EXPECT_TRUE(same_bits(r.grad_bias, zeros({3})));
  EXPECT_EQ(r.grad_input.shape(), x0.shape());
}

// A case big enough for every parallel path (batch split, GEMM chunks, bias reduction).
struct BigCase {
  Tensor x, w, b, g;
};
BigCase big_case(bool transposed) {
  manual_seed(21);
  BigCase c;
  c.x = randn({3, 16, 20, 20});
  c.w = transposed ? randn({16, 8, 3, 3}) : randn({24, 8, 3, 3});
  c.b = randn({transposed ? 16 : 24});
  Tensor y = convolution(c.x, c.w, c.b, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  c.g = randn(y.shape());
  return c;
}

std::vector<Tensor> run_big(const BigCase& c, bool transposed) {
  Tensor y = convolution(c.x, c.w, c.b, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  ConvolutionGrads r =
      convolution_backward(c.g, c.x, c.w, {c.b.size(0)}, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  return {y, r.grad_input, r.grad_weight, r.grad_bias};
}

TEST(Conv, SameInputsSameBitsForAnyThreadCount) {
  const int saved = num_threads();
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "transposed" : "normal");
    BigCase c = big_case(transposed);
    set_num_threads(2);
    std::vector<Tensor> a = run_big(c, transposed), b = run_big(c, transposed);
    set_num_threads(1);
    std::vector<Tensor> one = run_big(c, transposed);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i], b[i])) << "run to run, result " << i;
      EXPECT_TRUE(same_bits(a[i], one[i])) << "1 vs 2 threads, result " << i;
    }
  }
  set_num_threads(saved);
}

// grad_weight by its definition, in double, for stride 1, dilation 1 and padding `pad` on every
// side: dw[co, ci, t] = sum_{n, o} g[n, co, o] * x[n, group(co) * Cig + ci, o + t - pad].
// 2-D tensors are taken as 3-D ones with D = 1.
std::vector<double> grad_weight_by_definition(const Tensor& x, const Tensor& g, const Shape& wshape, int64_t groups,
                                              int64_t pad, int64_t stride = 1) {
  const bool d3 = x.dim() == 5;
  const int64_t N = x.size(0), Ci = x.size(1), Di = d3 ? x.size(2) : 1, Hi = x.size(-2), Wi = x.size(-1);
  const int64_t Co = g.size(1), Do = d3 ? g.size(2) : 1, Ho = g.size(-2), Wo = g.size(-1);
  const int64_t Cig = wshape[1], kd = d3 ? wshape[2] : 1, kh = wshape[wshape.size() - 2], kw = wshape.back();
  const int64_t pd = d3 ? pad : 0;
  std::vector<double> xv = x.to(DType::Float64).to_vector<double>(), gv = g.to(DType::Float64).to_vector<double>();
  std::vector<double> dw(Co * Cig * kd * kh * kw, 0.0);
  for (int64_t co = 0; co < Co; ++co)
    for (int64_t ci = 0; ci < Cig; ++ci)
      for (int64_t a = 0; a < kd; ++a)
        for (int64_t b = 0; b < kh; ++b)
          for (int64_t e = 0; e < kw; ++e) {
            double sum = 0;
            for (int64_t n = 0; n < N; ++n)
              for (int64_t od = 0; od < Do; ++od)
                for (int64_t oh = 0; oh < Ho; ++oh)
                  for (int64_t ow = 0; ow < Wo; ++ow) {
                    const int64_t iz = od * stride + a - pd, iy = oh * stride + b - pad, ix = ow * stride + e - pad;
                    if (iz < 0 || iz >= Di || iy < 0 || iy >= Hi || ix < 0 || ix >= Wi) continue;
                    const int64_t c = co / (Co / groups) * Cig + ci;
                    sum += gv[(((n * Co + co) * Do + od) * Ho + oh) * Wo + ow] *
                           xv[(((n * Ci + c) * Di + iz) * Hi + iy) * Wi + ix];
                  }
            dw[(((co * Cig + ci) * kd + a) * kh + b) * kw + e] = sum;
          }
  return dw;
}

// Grids large enough for the direct kernels (the weight gradient's needs slices of >= 64
// positions), grouped and depthwise, stride 1 and 2, and column channels that fill one, two and
// four vectors of a weight-gradient tile (with a partial last tile): grad_weight against its
// definition, and the same bits for 1 and 2 threads (2 threads share the tiles out otherwise).
TEST(Conv, DirectPathsSameBitsForAnyThreadCount) {
  const int saved = num_threads();
  struct Shape3 {
    Shape x, w;
    int64_t groups, stride;
  };
  for (const Shape3& s : {Shape3{{3, 8, 24, 26}, {12, 4, 3, 3}, 2, 1}, Shape3{{2, 6, 30, 30}, {6, 1, 3, 3}, 6, 1},
                          Shape3{{2, 5, 9, 10, 12}, {7, 5, 3, 3, 3}, 1, 1}, Shape3{{2, 8, 14, 14}, {20, 8, 3, 3}, 1, 1},
                          Shape3{{3, 6, 12, 16}, {70, 6, 3, 3}, 1, 1}, Shape3{{2, 16, 28, 28}, {40, 16, 3, 3}, 1, 2}}) {
    SCOPED_TRACE(format_shape(s.x));
    manual_seed(5);
    Tensor x = randn(s.x), w = randn(s.w);
    const IntList pad{1};
    const IntList stride{s.stride};
    Tensor y = convolution(x, w, Tensor(), stride, pad, {1}, false, {0}, s.groups);
    Tensor g = randn(y.shape());
    auto run = [&] {
      ConvolutionGrads r =
          convolution_backward(g, x, w, {}, stride, pad, {1}, false, {0}, s.groups, {true, true, false});
      return std::vector<Tensor>{convolution(x, w, Tensor(), stride, pad, {1}, false, {0}, s.groups), r.grad_input,
                                 r.grad_weight};
    };
    set_num_threads(2);
    std::vector<Tensor> a = run(), b = run();
    set_num_threads(1);
    std::vector<Tensor> one = run();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i], b[i])) << "run to run, result " << i;
      EXPECT_TRUE(same_bits(a[i], one[i])) << "1 vs 2 threads, result " << i;
    }
    // float32: sums of up to ~2000 products of unit normals (|dw| ~ 50), in float32 per pass
    const Tensor expected = from_vector(grad_weight_by_definition(x, g, s.w, s.groups, 1, s.stride), s.w);
    expect_close(a[2], expected, 1e-4, 1e-4, "grad_weight float32");
    // float64 through the same kernel: exact up to rounding
    ConvolutionGrads r64 = convolution_backward(g.to(DType::Float64), x.to(DType::Float64), w.to(DType::Float64), {},
                                                stride, pad, {1}, false, {0}, s.groups, {false, true, false});
    expect_close(r64.grad_weight, expected, 1e-10, 1e-10, "grad_weight float64");
  }
  set_num_threads(saved);
}

// ---- bad input: each names the op and the argument ----

void expect_error(const std::string& msg, std::initializer_list<const char*> pieces) {
  EXPECT_NE(msg, "<no error>");
  for (const char* p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(ConvErrors, WrongRank) {
  Tensor w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(randn({3, 8, 8}), w); }), {"conv2d", "input", "4 dims", "[3, 8, 8]"});
  expect_error(error_of([&] { conv2d(randn({1, 3, 8, 8}), randn({4, 3, 3})); }), {"conv2d", "weight", "[4, 3, 3]"});
  expect_error(error_of([&] { conv1d(randn({1, 3, 8, 8}), w); }), {"conv1d", "weight", "3 dims"});
  expect_error(error_of([&] {
                 convolution(randn({1, 3, 8}), randn({4, 3}), Tensor(), {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution", "weight", "3, 4 or 5 dims"});
  expect_error(error_of([&] { conv3d(randn({1, 3, 8, 8}), randn({4, 3, 3, 3, 3})); }), {"conv3d", "input", "5 dims"});
}

TEST(ConvErrors, ChannelsAndGroups) {
  // C_in != groups * weight.size(1)
  expect_error(error_of([&] {
                 conv2d(randn({1, 5, 8, 8}), randn({4, 3, 3, 3}));
               }),
               {"conv2d", "input", "channels", "got 5"});
  expect_error(error_of([&] {
                 conv2d(randn({1, 6, 8, 8}), randn({4, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 2);
               }),
               {"conv2d", "2 * 2 = 4", "got 6"});
  // the transposed rule: C_in == weight.size(0)
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 3, 8, 8}), randn({4, 2, 3, 3}));
               }),
               {"conv_transpose2d", "weight.size(0) = 4", "got 3"});
  // channels not divisible by groups
  expect_error(error_of([&] {
                 conv2d(randn({1, 8, 8, 8}), randn({6, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 4);
               }),
               {"conv2d", "out_channels", "divisible by groups (4)"});
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 6, 8, 8}), randn({6, 2, 3, 3}), Tensor(), {1}, {0}, {0}, 4);
               }),
               {"conv_transpose2d", "in_channels (6)", "divisible by groups (4)"});
  expect_error(error_of([&] {
                 conv2d(randn({1, 3, 8, 8}), randn({4, 3, 3, 3}), Tensor(), {1}, {0}, {1}, 0);
               }),
               {"conv2d", "groups", "positive", "got 0"});
}

TEST(ConvErrors, StrideDilationPadding) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {0}); }), {"conv2d", "stride", "positive"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1, -1}); }), {"conv2d", "stride", "[1, -1]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {0}); }), {"conv2d", "dilation", "positive"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {-1}); }), {"conv2d", "padding", "non-negative"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0, 1, 0, -2}); }), {"conv2d", "padding", "non-negative"});
}

TEST(ConvErrors, WrongNumberOfValues) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1, 1, 1}); }), {"conv2d", "stride", "1 or 2 values", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {1, 1, 1}); }), {"conv2d", "padding", "1, 2 or 4", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {1, 2, 3}); }), {"conv2d", "dilation", "got 3"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {1, 1, 1});
               }),
               {"conv_transpose2d", "output_padding", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {}); }), {"conv2d", "stride", "got 0 values"});
}

TEST(ConvErrors, OutputTooSmall) {
  expect_error(error_of([&] {
                 conv2d(randn({1, 3, 3, 3}), randn({4, 3, 5, 5}));
               }),
               {"conv2d", "output size is too small", "[-1, -1]"});
  expect_error(error_of([&] {
                 conv1d(randn({1, 3, 5}), randn({4, 3, 3}), Tensor(), {1}, {0}, {3});
               }),
               {"conv1d", "output size", "[-1]"});
  // a transposed convolution with padding that eats all of its output
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 1}), randn({3, 2, 1}), Tensor(), {1}, {1});
               }),
               {"conv_transpose1d", "output size", "[-1]"});
}

TEST(ConvErrors, BiasAndDtype) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, randn({5})); }), {"conv2d", "bias", "[4]", "got [5]"});
  expect_error(error_of([&] { conv2d(x, w, randn({1, 4})); }), {"conv2d", "bias", "[1, 4]"});
  expect_error(error_of([&] { conv2d(x, w.to(DType::Float64)); }), {"conv2d", "weight", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x, w, randn({4}, DType::Float64)); }), {"conv2d", "bias", "float64"});
  expect_error(error_of([&] { conv2d(x.to(DType::Int64), w.to(DType::Int64)); }), {"conv2d", "floating", "int64"});
}

TEST(ConvErrors, OutputPadding) {
  Tensor x = randn({1, 3, 8, 8});
  // out of range: must be smaller than stride or dilation
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {2});
               }),
               {"conv_transpose2d", "output_padding[0] = 2", "stride (2)", "dilation (1)"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {0}, {0, 1});
               }),
               {"conv_transpose2d", "output_padding[1] = 1"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {-1});
               }),
               {"conv_transpose2d", "output_padding", "non-negative"});
  // given without transposed
  expect_error(error_of([&] {
                 convolution(x, randn({4, 3, 3, 3}), Tensor(), {2}, {0}, {1}, false, {1}, 1);
               }),
               {"convolution", "output_padding", "only for transposed"});
  // smaller than the dilation is enough (PyTorch's rule)
  EXPECT_NO_THROW(conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {0}, {1}, 1, {2}));
}

TEST(ConvErrors, KernelApiBackward) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 7, 6}), x, w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "grad_output", "[1, 4, 6, 6]", "[1, 4, 7, 6]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}), x, w, {5}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "bias_sizes", "[5]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}, DType::Float64), x, w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "grad_output", "float64"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}), x, w, {4}, {0}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "stride"});
}

}  // namespace
}  // namespace tg
