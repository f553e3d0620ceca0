// Convolutions on tensors and the tape: PyTorch's golden fixtures (tools/fixtures/conv.py), every
// output mask of the kernel API convolution_backward, empty problems, what the tape saves,
// determinism, Inf and NaN on every kernel path, and every bad input of issue 5.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

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
  ASSERT_GE(cases.size(), 68u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    Tensor x = c.tensor("input").requires_grad_(), w = c.tensor("weight").requires_grad_();
    Tensor b = c.has("bias") ? c.tensor("bias").requires_grad_() : Tensor();
    ASSERT_EQ(x.dtype(), c.dtype());  // the comparison runs in the case's dtype
    Tensor y = run_wrapper(c, x, w, b);
    ASSERT_EQ(y.dtype(), c.dtype());
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    y.backward(c.tensor("grad_output"));
    ASSERT_TRUE(x.grad().defined() && w.grad().defined());
    EXPECT_EQ(x.grad().dtype(), c.dtype());
    EXPECT_EQ(w.grad().dtype(), c.dtype());
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
    expect_close(w.grad(), c.tensor("grad_weight"), rtol, atol, "grad_weight");
    if (b.defined()) {
      ASSERT_TRUE(b.grad().defined());
      EXPECT_EQ(b.grad().dtype(), c.dtype());
      expect_close(b.grad(), c.tensor("grad_bias"), rtol, atol, "grad_bias");
    }
  }
}

// The issue's matrix, so that a case dropped from tools/fixtures/conv.py does not go unnoticed:
// 1D, 2D and 3D each with stride, padding, dilation, groups, depthwise, asymmetric padding, an
// empty batch, with and without bias; transposed in each of them with stride, padding,
// dilation, groups, output_padding, asymmetric padding, with and without bias. And every case
// in float32 and float64 with every file in the case's own dtype: a float64 file in a float32
// case would hold our float32 result to float64 values, a float32 one in a float64 case would
// hide float64 errors behind float32 rounding.
TEST(Conv, FixturesCoverTheIssueInBothDtypes) {
  std::map<std::string, std::set<std::string>> dtypes_of;  // case name without _f32 / _f64
  std::set<std::string> seen;                              // "2D transposed groups", ...
  for (const auto& c : load_golden_cases("conv")) {
    SCOPED_TRACE(c.name());
    const auto& j = c.json;
    const std::string n = c.name(), suffix = c.dtype() == DType::Float32 ? "_f32" : "_f64";
    ASSERT_GT(n.size(), 4u);
    EXPECT_EQ(n.substr(n.size() - 4), suffix);
    dtypes_of[n.substr(0, n.size() - 4)].insert(j["dtype"].get<std::string>());
    for (const auto& [key, file] : j["tensors"].items()) EXPECT_EQ(c.tensor(key).dtype(), c.dtype()) << key;

    const int dims = j["dims"];
    const bool transposed = j["transposed"];
    const std::string at = std::to_string(dims) + "D " + (transposed ? "transposed " : "");
    auto any_above = [&](const char* key, int64_t v) {
      for (int64_t x : ints(j[key]))
        if (x > v) return true;
      return false;
    };
    const IntList pad = ints(j["padding"]);
    const int64_t groups = j["groups"], C_in = c.tensor("input").size(1), N = c.tensor("input").size(0);
    if (any_above("stride", 1)) seen.insert(at + "stride");
    if (any_above("padding", 0)) seen.insert(at + "padding");
    if (any_above("dilation", 1)) seen.insert(at + "dilation");
    if (any_above("output_padding", 0)) seen.insert(at + "output_padding");
    if (groups > 1) seen.insert(at + "groups");
    if (groups > 1 && groups == C_in) seen.insert(at + "depthwise");
    if (pad.size() == static_cast<size_t>(2 * dims)) {
      for (int d = 0; d < dims; ++d)
        if (pad[2 * d] != pad[2 * d + 1]) seen.insert(at + "asymmetric padding");
    }
    seen.insert(at + (j["has_bias"].get<bool>() ? "bias" : "no bias"));
    EXPECT_EQ(c.has("bias"), j["has_bias"].get<bool>());
    if (N == 0) seen.insert(std::to_string(dims) + "D empty batch");
  }
  for (const auto& [base, dts] : dtypes_of)
    EXPECT_EQ(dts, (std::set<std::string>{"float32", "float64"})) << base << " is not in both dtypes";
  for (int dims = 1; dims <= 3; ++dims) {
    const std::string d = std::to_string(dims) + "D ";
    for (const char* f : {"stride", "padding", "dilation", "groups", "depthwise", "asymmetric padding", "bias",
                          "no bias"})
      EXPECT_TRUE(seen.count(d + f)) << "no golden case for " << d << f;
    for (const char* f : {"stride", "padding", "dilation", "groups", "output_padding", "asymmetric padding", "bias",
                          "no bias"})
      EXPECT_TRUE(seen.count(d + "transposed " + f)) << "no golden case for " << d << "transposed " << f;
    EXPECT_TRUE(seen.count(d + "empty batch")) << "no golden case for " << d << "empty batch";
  }
}

TEST(Conv, KernelApiBackwardMatchesPyTorch) {
  for (const auto& c : load_golden_cases("conv")) {
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    ConvolutionGrads r = run_backward(c, {true, true, c.has("bias")});
    ASSERT_TRUE(r.grad_input.defined() && r.grad_weight.defined());
    EXPECT_EQ(r.grad_input.dtype(), c.dtype());
    EXPECT_EQ(r.grad_weight.dtype(), c.dtype());
    if (c.has("bias")) EXPECT_EQ(r.grad_bias.dtype(), c.dtype());
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

// Every mask on every golden case (1D, 2D, 3D, grouped, depthwise, transposed, empty batch; the
// full result is checked against PyTorch above): each subset gives the full computation's bits
// for what it asks and leaves the rest undefined.
TEST(Conv, EveryOutputMaskComputesExactlyWhatIsAsked) {
  for (const auto& c : load_golden_cases("conv")) {
    SCOPED_TRACE(c.name());
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

// Empty in N or in C, in 1D, 2D and 3D, normal and transposed, grouped, with and without bias,
// through the tape and the kernel API with every mask. The shape is the one a non-empty batch
// gets; with no batch the output is empty and every gradient zero; with no input channels each
// output element is its channel's bias (0 without one), the input and weight gradients are
// empty and grad_bias is the sum of grad_output over the batch and the positions.
TEST(Conv, EmptyBatchOrChannelsInEveryGeometry) {
  for (int dims = 1; dims <= 3; ++dims)
    for (bool transposed : {false, true})
      for (bool empty_batch : {true, false})
        for (bool with_bias : {true, false})
          for (DType dt : {DType::Float32, DType::Float64}) {
            const int64_t N = empty_batch ? 0 : 2, C_in = empty_batch ? 4 : 0, C_out = 6, groups = 2;
            SCOPED_TRACE(std::to_string(dims) + "D" + (transposed ? " transposed" : "") +
                         (empty_batch ? " N = 0" : " C_in = 0") + (with_bias ? " bias " : " no bias ") +
                         dtype_name(dt));
            // 5 per dim, kernel 3, stride 2, padding 1: 3 per dim, or 10 transposed (output_padding 1)
            Shape xs{N, C_in}, ws = transposed ? Shape{C_in, C_out / groups} : Shape{C_out, C_in / groups};
            Shape expected{N, C_out};
            for (int d = 0; d < dims; ++d) {
              xs.push_back(5);
              ws.push_back(3);
              expected.push_back(transposed ? 10 : 3);
            }
            const IntList op{transposed ? 1 : 0};
            manual_seed(11);
            Tensor x = Tensor::empty(xs, dt).requires_grad_(), w = randn(ws, dt).requires_grad_();
            Tensor b = with_bias ? randn({C_out}, dt).requires_grad_() : Tensor();
            Tensor y = convolution(x, w, b, {2}, {1}, {1}, transposed, op, groups);
            ASSERT_EQ(y.shape(), expected);
            ASSERT_EQ(y.dtype(), dt);
            const std::vector<double> yv = y.to(DType::Float64).to_vector<double>();
            const std::vector<double> bv = with_bias ? b.to(DType::Float64).to_vector<double>() : std::vector<double>();
            const int64_t L = y.numel() / std::max<int64_t>(1, N * C_out);
            for (size_t i = 0; i < yv.size(); ++i)
              ASSERT_EQ(yv[i], with_bias ? bv[i / L % C_out] : 0.0) << "output element " << i;

            const Tensor g = randn(y.shape(), dt);
            std::vector<double> sum_g(C_out, 0.0);
            const std::vector<double> gv = g.to(DType::Float64).to_vector<double>();
            for (size_t i = 0; i < gv.size(); ++i) sum_g[i / L % C_out] += gv[i];
            const Tensor expected_db = from_vector(sum_g, {C_out}).to(dt);
            // float32: a sum of 2 * 1000 unit normals, summed in double by us, in float32 or
            // double by the op: 1e-4 relative is far below any wrong term (|g| ~ 1)
            const double rtol = dt == DType::Float64 ? 1e-12 : 1e-4, atol = dt == DType::Float64 ? 1e-12 : 1e-4;

            y.backward(g);
            ASSERT_TRUE(x.grad().defined() && w.grad().defined());
            EXPECT_TRUE(same_bits(x.grad(), zeros(xs, dt)));
            EXPECT_TRUE(same_bits(w.grad(), zeros(ws, dt)));  // non-empty when only N is 0
            if (with_bias) expect_close(b.grad(), expected_db, rtol, atol, "grad_bias through the tape");

            for (int mask = 0; mask < 8; ++mask) {
              const std::array<bool, 3> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
              ConvolutionGrads r = convolution_backward(g, x, w, with_bias ? IntList{C_out} : IntList{}, {2}, {1},
                                                        {1}, transposed, op, groups, m);
              EXPECT_EQ(r.grad_input.defined(), m[0]) << mask;
              EXPECT_EQ(r.grad_weight.defined(), m[1]) << mask;
              EXPECT_EQ(r.grad_bias.defined(), m[2]) << mask;
              if (m[0]) EXPECT_TRUE(same_bits(r.grad_input, zeros(xs, dt))) << mask;
              if (m[1]) EXPECT_TRUE(same_bits(r.grad_weight, zeros(ws, dt))) << mask;
              if (m[2]) expect_close(r.grad_bias, expected_db, rtol, atol, "grad_bias, mask " + std::to_string(mask));
            }
          }
}

// The zeros of an empty batch's weight gradient are written, not found: the buffer it gets is
// one the allocator's block cache (framework/storage.cpp: blocks of 64 KB and more, the most
// recently freed of the same size first) has just taken back full of NaN. A gradient left
// unwritten would be NaN.
TEST(Conv, EmptyBatchWritesItsZerosIntoReusedMemory) {
  struct Geom {
    Shape x, w;
    bool transposed;
  };
  // weights of 16384 elements: 64 KB in float32, 128 KB in float64
  for (const Geom& c : {Geom{{0, 32, 9}, {64, 32, 8}, false}, Geom{{0, 32, 6, 6}, {32, 32, 4, 4}, false},
                        Geom{{0, 16, 5, 5, 5}, {16, 16, 4, 4, 4}, false}, Geom{{0, 32, 3, 3}, {32, 32, 4, 4}, true},
                        Geom{{0, 16, 2, 2, 2}, {16, 16, 4, 4, 4}, true}})
    for (DType dt : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(format_shape(c.w) + (c.transposed ? " transposed " : " ") + dtype_name(dt));
      const Tensor x = Tensor::empty(c.x, dt), w = randn(c.w, dt);
      const IntList op(c.x.size() - 2, 0);
      const Shape ys = convolution(x, w, Tensor(), {1}, {0}, {1}, c.transposed, op, 1).shape();
      const Tensor g = Tensor::empty(ys, dt);
      { Tensor junk = full(c.w, std::nan(""), dt); }
      {
        // the premise: the next buffer of this size is the NaN one
        Tensor probe = Tensor::empty(c.w, dt);
        ASSERT_TRUE(std::isnan(probe.to(DType::Float64).to_vector<double>()[0])) << "block cache not reused";
      }
      ConvolutionGrads r = convolution_backward(g, x, w, {}, {1}, {0}, {1}, c.transposed, op, 1, {false, true, false});
      EXPECT_TRUE(same_bits(r.grad_weight, zeros(c.w, dt)));
      // and through the tape, where the leaf adopts the buffer
      { Tensor junk = full(c.w, std::nan(""), dt); }
      Tensor wr = w.detach().requires_grad_();
      convolution(x, wr, Tensor(), {1}, {0}, {1}, c.transposed, op, 1).backward(g);
      EXPECT_TRUE(same_bits(wr.grad(), zeros(c.w, dt)));
    }
}

// Finite differences in float64 on what the registry's samples (ops/conv.cpp) leave out: a
// transposed 3D convolution with groups, per-dim stride and dilation, asymmetric padding and
// output_padding allowed by the stride in one dim and by the dilation alone in another; a
// transposed 2D one with asymmetric padding and dilation; a depthwise 1D one with a channel
// multiplier; a grouped 3D one with per-dim stride and dilation.
TEST(ConvGradcheck, CasesTheRegistrySamplesLeaveOut) {
  struct G {
    const char* name;
    Shape x, w;
    bool bias;
    IntList stride, padding, dilation;
    bool transposed;
    IntList output_padding;
    int64_t groups;
  };
  const G cases[] = {
      {"conv_transpose3d", {1, 4, 2, 2, 3}, {4, 1, 2, 2, 2}, true, {2, 1, 1}, {1, 0, 0, 1, 1, 0}, {1, 2, 1}, true,
       {1, 1, 0}, 2},
      {"conv_transpose2d", {2, 2, 3, 3}, {2, 3, 3, 2}, false, {2}, {1, 0, 0, 2}, {2, 1}, true, {1, 0}, 1},
      {"conv1d depthwise x2", {2, 3, 7}, {6, 1, 3}, true, {2}, {0, 2}, {1}, false, {0}, 3},
      {"conv3d", {1, 4, 4, 5, 4}, {2, 2, 2, 3, 2}, false, {1, 2, 1}, {1, 0, 1}, {2, 1, 1}, false, {0}, 2},
  };
  manual_seed(8);
  for (const G& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
    std::vector<Tensor> inputs{randn(c.x, DType::Float64).requires_grad_(),
                               randn(c.w, DType::Float64).requires_grad_(),
                               c.bias ? randn({C_out}, DType::Float64).requires_grad_() : Tensor()};
    GradcheckResult r = gradcheck(
        [&c](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{convolution(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.transposed,
                                                 c.output_padding, c.groups)};
        },
        inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
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
                          Shape3{{3, 6, 12, 16}, {70, 6, 3, 3}, 1, 1}, Shape3{{2, 16, 28, 28}, {40, 16, 3, 3}, 1, 2},
                          // grouped column tiles (two per group, the second partial); image
                          // channels in two steps (their boxes exceed one step's budget)
                          Shape3{{2, 40, 20, 20}, {140, 20, 3, 3}, 2, 1}, Shape3{{1, 96, 64, 64}, {40, 96, 3, 3}, 1, 1}}) {
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
    set_num_threads(3);
    std::vector<Tensor> three = run();
    set_num_threads(1);
    std::vector<Tensor> one = run();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i], b[i])) << "run to run, result " << i;
      EXPECT_TRUE(same_bits(a[i], one[i])) << "1 vs 2 threads, result " << i;
      EXPECT_TRUE(same_bits(three[i], one[i])) << "1 vs 3 threads, result " << i;
    }
    // float32: sums of N * positions products of unit normals (|dw| ~ 50 for 2000 of them), each
    // element summed in float32 over a pass: a rounding error that grows with the count
    const Tensor expected = from_vector(grad_weight_by_definition(x, g, s.w, s.groups, 1, s.stride), s.w);
    const double terms = double(y.size(0)) * double(y.numel() / (y.size(0) * y.size(1)));
    expect_close(a[2], expected, 1e-4, std::max(1e-4, 2e-7 * terms), "grad_weight float32");
    // float64 through the same kernel: exact up to rounding
    ConvolutionGrads r64 = convolution_backward(g.to(DType::Float64), x.to(DType::Float64), w.to(DType::Float64), {},
                                                stride, pad, {1}, false, {0}, s.groups, {false, true, false});
    expect_close(r64.grad_weight, expected, 1e-10, 1e-10, "grad_weight float64");
  }
  set_num_threads(saved);
}

// ---- Inf and NaN ----
//
// What a convolution does with Inf and NaN, checked element by element against its definition
// summed term by term in double: only the taps that fall inside the image contribute, the
// padding adds nothing (never 0 * Inf). Classes (NaN, +Inf, -Inf, finite) do not depend on the
// order of a sum, so the class check is exact; finite values get the tolerances above.
//
// The kernels (conv_kernels.cpp) write everything as three pieces in the geometry of a normal
// convolution: the image (the input, or a transposed convolution's output), the columns (one
// value per window: the output, or a transposed convolution's input) and the weight:
//   correlate          columns[o] = sum_t w[t] * image[o * s - p + t * d]  normal forward,
//                                                                          transposed grad_input
//   correlate_adjoint  image[i] = sum_{o, t hitting i} w[t] * columns[o]   normal grad_input,
//                                                                          transposed forward
//   weight_grad        dw[t] = sum_o columns[o] * image[o * s - p + t * d]  grad_weight
// Their direct paths read zero padding and garbage grid positions; only a non-finite value
// multiplied by one of those zeros can go wrong. The garbage positions and the adjoint's
// padding of y are covered by the kernels' non-finite fallbacks (InfAndNaNPropagateAsDefined).
// The image's padding meets a non-finite value only in correlate (a non-finite weight) and in
// weight_grad (a non-finite column value at a border window): NonFiniteWeightOrColumnsAtThePadding.
//
// PyTorch 1.13 (/usr/bin/python3, F.conv2d / F.conv_transpose2d and autograd, 10x10 images,
// 3x3, pad 1) splits exactly there, by backend:
//   - oneDNN (aten::mkldnn_convolution: float32, not transposed, batch 2) follows the
//     definition: w[0,0,0,0] = inf leaves y[:, 0, 0, :] finite, and grad_output[0,0,0,0] = inf
//     leaves grad_weight[0,0,0,0] finite.
//   - the slow im2col path (aten::_slow_conv2d_*: float64, batch 1, mkldnn disabled, and every
//     transposed convolution) multiplies the padding's zeros in: y[:, 0, 0, :] = nan and
//     grad_weight[0,0,0,0] = nan; conv_transpose2d's grad_input gets NaN at the border.
//   - both sum only the taps inside the image in col2im (correlate_adjoint): an inf weight
//     leaves grad_input (and conv_transpose2d's forward) free of NaN.
// On case "narrow" below (this file's weight spots; grad_output spots at a corner and borders),
// oneDNN's classes equal the definition's everywhere, the slow path's differ in 52 of 300
// outputs and 112 of 315 weight gradients, all at the border.

struct RefGeom {
  int64_t N, Ci, Co, G;
  std::array<int64_t, 3> in, out, k, s, p, d;  // image, columns, kernel, ... (right-aligned)
};

// f(n, co, c, o, t, i): every (sample, column channel, image channel, window, tap), with i the
// image position the tap reads (flat index into one image plane) or -1 outside the image.
template <class F>
void for_each_term(const RefGeom& r, F&& f) {
  const int64_t Cog = r.Co / r.G, Cig = r.Ci / r.G;
  const int64_t K = r.k[0] * r.k[1] * r.k[2];
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t co = 0; co < r.Co; ++co)
      for (int64_t ci = 0; ci < Cig; ++ci)
        for (int64_t o = 0; o < r.out[0] * r.out[1] * r.out[2]; ++o)
          for (int64_t t = 0; t < K; ++t) {
            const int64_t oz = o / (r.out[1] * r.out[2]), oy = o / r.out[2] % r.out[1], ox = o % r.out[2];
            const int64_t a = t / (r.k[1] * r.k[2]), b = t / r.k[2] % r.k[1], e = t % r.k[2];
            const int64_t iz = oz * r.s[0] - r.p[0] + a * r.d[0], iy = oy * r.s[1] - r.p[1] + b * r.d[1],
                          ix = ox * r.s[2] - r.p[2] + e * r.d[2];
            const bool inside = iz >= 0 && iz < r.in[0] && iy >= 0 && iy < r.in[1] && ix >= 0 && ix < r.in[2];
            f(n, co, co / Cog * Cig + ci, o, t, inside ? (iz * r.in[1] + iy) * r.in[2] + ix : int64_t(-1));
          }
}

struct RefResults {
  std::vector<double> columns, image, weight;  // correlate, correlate_adjoint, weight_grad
};

RefResults conv_reference(const RefGeom& r, const std::vector<double>& image, const std::vector<double>& columns,
                          const std::vector<double>& w) {
  const int64_t Li = r.in[0] * r.in[1] * r.in[2], Lo = r.out[0] * r.out[1] * r.out[2];
  const int64_t Cig = r.Ci / r.G, K = r.k[0] * r.k[1] * r.k[2];
  RefResults res{std::vector<double>(r.N * r.Co * Lo, 0.0), std::vector<double>(r.N * r.Ci * Li, 0.0),
                 std::vector<double>(r.Co * Cig * K, 0.0)};
  for_each_term(r, [&](int64_t n, int64_t co, int64_t c, int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;  // outside the image: nothing, whatever w or the column value is
    const double wv = w[(co * Cig + c % Cig) * K + t], cv = columns[(n * r.Co + co) * Lo + o];
    const double iv = image[(n * r.Ci + c) * Li + i];
    res.columns[(n * r.Co + co) * Lo + o] += wv * iv;
    res.weight[(co * Cig + c % Cig) * K + t] += cv * iv;
    res.image[(n * r.Ci + c) * Li + i] += wv * cv;
  });
  return res;
}

// Per element: NaN where the reference is NaN, the same signed Inf where it is Inf, within
// rtol / atol where it is finite. Reports the first few differences with their coordinates.
void expect_same_classes(const Tensor& got, const std::vector<double>& ref, double rtol, double atol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  const std::vector<double> v = got.to(DType::Float64).to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double e = ref[i], x = v[i];
    const bool ok = std::isnan(e)   ? std::isnan(x)
                    : std::isinf(e) ? x == e
                                    : std::isfinite(x) && std::abs(x - e) <= atol + rtol * std::abs(e);
    if (!ok && ++bad <= 5) {
      Shape at(got.dim());
      for (int64_t d = got.dim() - 1, rest = int64_t(i); d >= 0; rest /= got.size(d), --d) at[d] = rest % got.size(d);
      ADD_FAILURE() << what << " at " << format_shape(at) << " of " << format_shape(got.shape()) << ": got " << x
                    << ", expected " << e;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements of the wrong class or value";
}

// Non-finite values at chosen places of an (N, C, spatial...) tensor: where[] holds one letter
// per spatial dim, right-aligned to the tensor's dims (F first, M middle, L last position).
struct Spot {
  int64_t n, c;
  const char* where;
  double value;
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// first corner, last corner, first row, last row, first column, last column, interior
const std::vector<Spot> kImageSpots = {{0, 0, "FFF", kNaN},  {1, 1, "LLL", kInf},  {0, 2, "MFM", -kInf},
                                       {1, 3, "MLM", -kInf}, {0, 4, "LMF", kInf},  {1, 5, "FML", kNaN},
                                       {0, 6, "MMM", kInf}};
// corner taps (they reach the padding at two borders), a middle tap, an edge tap
const std::vector<Spot> kWeightSpots = {{0, 0, "FFF", kInf}, {-1, -1, "LLL", -kInf}, {1, 0, "MMM", kNaN},
                                        {2, -1, "MFL", kInf}};

// Negative n / c count from the end. With keep_last, channels go modulo C - 1: the last channel
// stays finite, so that results summing over channels keep finite elements.
std::vector<double> with_spots(const Tensor& t, const std::vector<Spot>& spots, bool keep_last) {
  std::vector<double> v = t.to(DType::Float64).to_vector<double>();
  const Shape& sh = t.shape();
  const int sd = int(sh.size()) - 2;
  const int64_t nc = keep_last && sh[1] > 1 ? sh[1] - 1 : sh[1];
  for (const Spot& s : spots) {
    const int64_t n = (s.n % sh[0] + sh[0]) % sh[0], c = (s.c % nc + nc) % nc;
    int64_t flat = n * sh[1] + c;
    for (int d = 0; d < sd; ++d) {
      const char w = s.where[3 - sd + d];
      const int64_t len = sh[2 + d];
      flat = flat * len + (w == 'F' ? 0 : w == 'L' ? len - 1 : len / 2);
    }
    v[flat] = s.value;
  }
  return v;
}

bool has_nonfinite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return true;
  return false;
}
bool has_finite(const std::vector<double>& v) {
  for (double x : v)
    if (std::isfinite(x)) return true;
  return false;
}

struct NonFiniteCase {
  const char* name;  // and the kernel paths it runs (see conv_kernels.cpp)
  Shape x, w;
  IntList stride, padding, dilation;
  bool transposed;
  int64_t groups;
};

// Runs one case in float32 and float64, with the non-finite values in one tensor at a time
// (input, weight, grad_output: with all three most of every result would be NaN), and checks
// forward, grad_input and grad_weight against the definition: at_padding picks the results
// where a non-finite weight or column value meets the image's padding (see above), otherwise
// all the others.
void check_nonfinite_case(const NonFiniteCase& c, bool at_padding) {
  SCOPED_TRACE(c.name);
  manual_seed(17);
  const Tensor x0 = randn(c.x, DType::Float64), w0 = randn(c.w, DType::Float64);
  const IntList op(c.x.size() - 2, 0);
  const Tensor y0 = convolution(x0, w0, Tensor(), c.stride, c.padding, c.dilation, c.transposed, op, c.groups);
  const Tensor g0 = randn(y0.shape(), DType::Float64);
  const int dims = int(c.x.size()) - 2;
  auto per_dim = [&](const IntList& l, int d) { return l.size() == 1 ? l[0] : l[d]; };
  // the geometry of the pieces: the image is the output of a transposed convolution
  const Shape& img = c.transposed ? y0.shape() : c.x;
  const Shape& cols = c.transposed ? c.x : y0.shape();
  RefGeom r{c.x[0], img[1], cols[1], c.groups, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  for (int d = 0; d < dims; ++d) {
    const int s = 3 - dims + d;
    r.in[s] = img[2 + d], r.out[s] = cols[2 + d], r.k[s] = c.w[2 + d];
    r.s[s] = per_dim(c.stride, d), r.p[s] = per_dim(c.padding, d), r.d[s] = per_dim(c.dilation, d);
  }
  const std::string columns_tensor = c.transposed ? "input" : "grad_output";
  for (const std::string where : {"input", "weight", "grad_output"}) {
    SCOPED_TRACE("non-finite " + where);
    const std::vector<double> xv = where == "input" ? with_spots(x0, kImageSpots, true) : x0.to_vector<double>();
    const std::vector<double> wv = where == "weight" ? with_spots(w0, kWeightSpots, false) : w0.to_vector<double>();
    const std::vector<double> gv = where == "grad_output" ? with_spots(g0, kImageSpots, true) : g0.to_vector<double>();
    for (DType dt : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(dt == DType::Float32 ? "float32" : "float64");
      const Tensor x = from_vector(xv, c.x).to(dt), w = from_vector(wv, c.w).to(dt);
      const Tensor g = from_vector(gv, y0.shape()).to(dt);
      // the reference from the values the kernels see (float32 rounding included)
      const std::vector<double> xr = x.to(DType::Float64).to_vector<double>();
      const std::vector<double> wr = w.to(DType::Float64).to_vector<double>();
      const std::vector<double> gr = g.to(DType::Float64).to_vector<double>();
      const RefResults ref = c.transposed ? conv_reference(r, gr, xr, wr) : conv_reference(r, xr, gr, wr);
      const Tensor y = convolution(x, w, Tensor(), c.stride, c.padding, c.dilation, c.transposed, op, c.groups);
      const ConvolutionGrads grads =
          convolution_backward(g, x, w, {}, c.stride, c.padding, c.dilation, c.transposed, op, c.groups,
                               {true, true, false});
      struct Result {
        const char* name;
        const Tensor& got;
        const std::vector<double>& ref;
        bool enters;      // the non-finite tensor is one of its operands
        bool at_padding;  // correlate with a non-finite weight, weight_grad with non-finite columns
      };
      const Result results[] = {
          {"forward", y, c.transposed ? ref.image : ref.columns, where != "grad_output",
           !c.transposed && where == "weight"},
          {"grad_input", grads.grad_input, c.transposed ? ref.columns : ref.image, where != "input",
           c.transposed && where == "weight"},
          {"grad_weight", grads.grad_weight, ref.weight, where != "weight", where == columns_tensor},
      };
      // float32: sums of up to ~1000 products of unit normals (|dw| ~ 50), float32 lanes
      const double rtol = dt == DType::Float64 ? 1e-10 : 1e-4, atol = dt == DType::Float64 ? 1e-10 : 1e-4;
      for (const Result& res : results) {
        if (res.at_padding != at_padding) continue;
        // a result the non-finite tensor enters must hold both classes, or it checks nothing
        if (res.enters) {
          EXPECT_TRUE(has_nonfinite(res.ref) && has_finite(res.ref)) << res.name << ": reference of one class only";
        }
        expect_same_classes(res.got, res.ref, rtol, atol, res.name);
      }
    }
  }
}

// One case per kernel path (traced with prints in a scratch copy of conv_kernels.cpp). Names
// give the normal convolution's pieces: forward = correlate, grad_input = correlate_adjoint,
// grad_weight = weight_grad. The fallbacks these cases reach, each checked by removing it:
//   adjoint: non-finite weights skip the direct path (GEMM + col2im, or the depthwise scatter);
//   weight_grad_direct and the GEMM on a flat grid: a non-finite dw (a garbage position met an
//   Inf or NaN of x) is redone with zeroed garbage columns; depthwise: per tap, on NaN.
const std::vector<NonFiniteCase> kNonFiniteCases = {
    // flat grid (3x3, pad 1, width 26): direct forward; direct adjoint (GEMM + col2im with the
    // non-finite weights); direct weight gradient (24 x 28 = 672 >= 512 grid positions) whose
    // garbage columns meet x's first column, redone by the GEMM
    {"grouped: direct forward, direct adjoint, direct grad_weight", {2, 8, 24, 26}, {8, 4, 3, 3}, {1}, {1}, {1}, false,
     2},
    // 14x14 stride 2: phase-split boxes, flat grid of 7 x 8 (56 positions), weight gradient by
    // GEMM with garbage columns (redone); the phases are too narrow for the direct adjoint
    {"stride 2: direct forward, GEMM adjoint, GEMM grad_weight on a flat grid", {2, 8, 14, 14}, {6, 8, 3, 3}, {2}, {1},
     {1}, false, 1},
    // stride 2, wide: the adjoint runs directly too, one correlation per phase of the image
    {"stride 2 wide: direct forward, direct adjoint by phases, GEMM grad_weight", {2, 8, 10, 40}, {6, 8, 3, 3}, {2},
     {1}, {1}, false, 1},
    // width 5 with pad 1: too much garbage for a flat grid, everything im2col / col2im + GEMM
    {"narrow: GEMM forward, GEMM adjoint, GEMM grad_weight", {2, 7, 6, 5}, {5, 7, 3, 3}, {1}, {1}, {1}, false, 1},
    // groups == channels on a flat grid: direct forward and adjoint (depthwise scatter with the
    // non-finite weights), flat depthwise weight gradient with its per-tap redo
    {"depthwise: direct forward, depthwise grad_weight", {2, 7, 30, 30}, {7, 1, 3, 3}, {1}, {1}, {1}, false, 7},
    // channel multiplier 2, narrow: depthwise forward, adjoint and weight gradient, row by row
    {"depthwise x2, narrow, stride 2: depthwise loops", {2, 7, 9, 6}, {14, 1, 3, 3}, {2}, {1}, {1}, false, 7},
    // channel multiplier 2 on a flat grid: as the depthwise case above
    {"depthwise x2, flat", {2, 7, 12, 16}, {14, 1, 3, 3}, {1}, {1}, {1}, false, 7},
    // 1x1, stride 1, no padding: the image is the column matrix of every GEMM
    {"unit 1x1", {2, 7, 5, 9}, {6, 7, 1, 1}, {1}, {0}, {1}, false, 1},
    // transposed, stride 2, kernel 4: forward = direct adjoint by phases (GEMM + col2im with the
    // non-finite weights), grad_input = direct correlate, grad_weight = GEMM on a flat grid
    // whose garbage meets grad_output's values (redone)
    {"transposed stride 2 kernel 4", {2, 7, 6, 9}, {7, 3, 4, 4}, {2}, {1}, {1}, true, 1},
    // 1D, direct forward and adjoint: dilation 2 (GEMM weight gradient on a flat grid, redone),
    // and a long row (direct weight gradient, 602 >= 512 positions, redone)
    {"1D dilation 2", {2, 7, 40}, {5, 7, 3}, {1}, {2}, {2}, false, 1},
    {"1D long: direct grad_weight", {2, 7, 600}, {5, 7, 3}, {1}, {1}, {1}, false, 1},
    // 3D, flat: direct forward and adjoint, 6 x 8 x 12 = 576 grid positions: direct weight
    // gradient (redone); and a narrow strided one, all GEMM
    {"3D: direct grad_weight", {2, 7, 6, 8, 10}, {5, 7, 3, 3, 3}, {1}, {1}, {1}, false, 1},
    {"3D stride 2 narrow", {2, 7, 5, 6, 5}, {5, 7, 3, 3, 3}, {2}, {1}, {1}, false, 1},
};

TEST(ConvNonFinite, InfAndNaNPropagateAsDefined) {
  for (const NonFiniteCase& c : kNonFiniteCases) check_nonfinite_case(c, false);
}

// Where a non-finite weight (correlate) or column value (weight_grad) meets the image's zero
// padding, the definition adds nothing; oneDNN agrees, PyTorch's slow im2col path gives NaN.
// Failed on every case with padding (not on the unit one) until 353d29b: correlate and
// weight_grad, on their direct, GEMM and depthwise paths alike, multiplied the padding's zeros
// in, as PyTorch's slow path does.
TEST(ConvNonFinite, NonFiniteWeightOrColumnsAtThePadding) {
  for (const NonFiniteCase& c : kNonFiniteCases) check_nonfinite_case(c, true);
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
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {0}); }), {"conv2d", "dilation", "positive", "[0, 0]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {-1}); }), {"conv2d", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0, 1, 0, -2}); }),
               {"conv2d", "padding", "non-negative", "[0, 1, 0, -2]"});
  // negative dilation, the second dim alone; other ranks and the transposed path
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {1, -2}); }), {"conv2d", "dilation", "[1, -2]"});
  expect_error(error_of([&] { conv1d(randn({1, 3, 8}), randn({4, 3, 3}), Tensor(), {-1}); }),
               {"conv1d", "stride", "positive", "[-1]"});
  expect_error(error_of([&] {
                 conv3d(randn({1, 3, 6, 6, 6}), randn({4, 3, 3, 3, 3}), Tensor(), {1}, {0}, {1, 0, 1});
               }),
               {"conv3d", "dilation", "positive", "[1, 0, 1]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2, 0}); }),
               {"conv_transpose2d", "stride", "positive", "[2, 0]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {-1}); }),
               {"conv_transpose2d", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {1}, {0}, 1, {0}); }),
               {"conv_transpose2d", "dilation", "positive", "[0, 0]"});
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
  // per rank: 4 padding values are (before, after) in 2-D, wrong in 1-D and 3-D
  Tensor x1 = randn({1, 3, 8}), w1 = randn({4, 3, 3});
  Tensor x3 = randn({1, 3, 6, 6, 6}), w3 = randn({4, 3, 3, 3, 3});
  expect_error(error_of([&] { conv1d(x1, w1, Tensor(), {1, 1}); }), {"conv1d", "stride", "1-D", "got 2 values"});
  expect_error(error_of([&] { conv1d(x1, w1, Tensor(), {1}, {1, 1, 1, 1}); }),
               {"conv1d", "padding", "1, 1 or 2", "got 4 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1}, {1, 1, 1, 1}); }),
               {"conv3d", "padding", "1, 3 or 6", "got 4 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1}, {0}, {1, 1}); }),
               {"conv3d", "dilation", "1 or 3 values", "got 2 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1, 2}); }), {"conv3d", "stride", "1 or 3 values", "got 2"});
  expect_error(error_of([&] {
                 conv_transpose3d(x3, randn({3, 2, 3, 3, 3}), Tensor(), {2}, {0}, {1, 1});
               }),
               {"conv_transpose3d", "output_padding", "1 or 3 values", "got 2"});
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
  // exactly 0 is too small too: a 4-tall kernel on 3 rows, one of two dims
  expect_error(error_of([&] { conv2d(randn({1, 3, 3, 8}), randn({4, 3, 4, 3})); }),
               {"conv2d", "output size", "[0, 6]"});
  // a window larger than the input with a stride: (3 - 4) / 2 + 1 is 1 with a division that
  // truncates, 0 with PyTorch's floor
  expect_error(error_of([&] { conv2d(randn({1, 3, 3, 8}), randn({4, 3, 4, 3}), Tensor(), {2}); }),
               {"conv2d", "output size", "[0, 3]"});
  // transposed, 0: asymmetric padding (1, 0) of a 1-long output
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 1}), randn({3, 2, 1}), Tensor(), {1}, {1, 0});
               }),
               {"conv_transpose1d", "output size", "[0]"});
  // 3-D, the middle dim only
  expect_error(error_of([&] { conv3d(randn({1, 2, 4, 2, 4}), randn({2, 2, 3, 3, 3})); }),
               {"conv3d", "output size", "[2, 0, 2]"});
  // and one more row is enough
  EXPECT_EQ(conv2d(randn({1, 3, 4, 8}), randn({4, 3, 4, 3})).shape(), (Shape{1, 4, 1, 6}));
}

// PyTorch: "Only zero batch or zero channel inputs are supported"; the spec: the input may be
// empty only in N or C. Padding would otherwise give such an input a non-empty output.
TEST(ConvErrors, EmptySpatialInput) {
  expect_error(error_of([&] { conv2d(randn({1, 3, 0, 8}), randn({4, 3, 1, 1}), Tensor(), {1}, {1}); }),
               {"conv2d", "input", "[1, 3, 0, 8]"});
  expect_error(error_of([&] { conv1d(randn({2, 3, 0}), randn({4, 3, 1}), Tensor(), {1}, {2}); }),
               {"conv1d", "input", "[2, 3, 0]"});
  expect_error(error_of([&] { conv_transpose2d(randn({1, 3, 4, 0}), randn({3, 4, 3, 3})); }),
               {"conv_transpose2d", "input", "[1, 3, 4, 0]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 2, 3, 3}), randn({1, 3, 0, 3, 3}), randn({4, 3, 1, 1, 1}), {},
                                      {1}, {1, 0, 0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "input", "[1, 3, 0, 3, 3]"});
}

TEST(ConvErrors, BiasAndDtype) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, randn({5})); }), {"conv2d", "bias", "[4]", "got [5]"});
  expect_error(error_of([&] { conv2d(x, w, randn({1, 4})); }), {"conv2d", "bias", "[1, 4]"});
  // transposed: out_channels = weight.size(1) * groups = 3 * 2, not weight.size(0) = 4
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 4, 5, 5}), randn({4, 3, 3, 3}), randn({4}), {1}, {0}, {0}, 2);
               }),
               {"conv_transpose2d", "bias", "[6]", "got [4]"});
  EXPECT_EQ(conv_transpose2d(randn({1, 4, 5, 5}), randn({4, 3, 3, 3}), randn({6}), {1}, {0}, {0}, 2).shape(),
            (Shape{1, 6, 7, 7}));
  expect_error(error_of([&] { conv1d(randn({1, 3, 8}), randn({4, 3, 3}), randn({3})); }),
               {"conv1d", "bias", "[4]", "got [3]"});
  expect_error(error_of([&] { conv2d(x, w.to(DType::Float64)); }), {"conv2d", "weight", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x, w, randn({4}, DType::Float64)); }),
               {"conv2d", "bias", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x.to(DType::Float64), w); }), {"conv2d", "weight", "float64", "got float32"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}, DType::Float64));
               }),
               {"conv_transpose2d", "weight", "float32", "float64"});
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
  // but not equal to the larger of the two: stride 2, dilation 3 allow 2, not 3
  EXPECT_NO_THROW(conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {2}, 1, {3}));
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {3}, 1, {3});
               }),
               {"conv_transpose2d", "output_padding[0] = 3", "stride (2)", "dilation (3)"});
  // other ranks
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 8}), randn({3, 2, 3}), Tensor(), {2}, {0}, {2});
               }),
               {"conv_transpose1d", "output_padding[0] = 2"});
  expect_error(error_of([&] {
                 conv_transpose3d(randn({1, 3, 4, 4, 4}), randn({3, 2, 3, 3, 3}), Tensor(), {2}, {0}, {1, 0, 2});
               }),
               {"conv_transpose3d", "output_padding[2] = 2", "stride (2)"});
  // given without transposed, in one dim of several
  expect_error(error_of([&] {
                 convolution(randn({1, 3, 4, 4, 4}), randn({2, 3, 3, 3, 3}), Tensor(), {2}, {0}, {1}, false, {0, 0, 1},
                             1);
               }),
               {"convolution", "output_padding", "only for transposed", "[0, 0, 1]"});
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
  // the kernel API checks the geometry as the forward does
  const Tensor g = randn({1, 4, 6, 6});
  expect_error(error_of([&] { convolution_backward(g, randn({3, 8, 8}), w, {4}, {1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "input", "4 dims", "[3, 8, 8]"});
  expect_error(error_of([&] {
                 convolution_backward(g, randn({1, 5, 8, 8}), w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "input", "channels", "got 5"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1}, {-1}, {1}, false, {0}, 1); }),
               {"convolution_backward", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1}, {0}, {0}, false, {0}, 1); }),
               {"convolution_backward", "dilation", "positive"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1, 1, 1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "stride", "got 3 values"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {2}, {0}, {1}, false, {1}, 1); }),
               {"convolution_backward", "output_padding", "only for transposed"});
  expect_error(error_of([&] {
                 convolution_backward(g, x, randn({3, 3, 3, 3}), {3}, {1}, {0}, {1}, false, {0}, 2);
               }),
               {"convolution_backward", "out_channels", "divisible by groups (2)"});
  expect_error(error_of([&] {
                 convolution_backward(g, x, w.to(DType::Float64), {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "weight", "float32", "float64"});
  expect_error(error_of([&] { convolution_backward(randn({1, 4, 1, 1}), randn({1, 3, 3, 3}), randn({4, 3, 4, 4}),
                                                   {4}, {1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "output size", "[0, 0]"});
  // transposed: the input rule, the bias rule and output_padding's range
  const Tensor xt = randn({1, 4, 5, 5}), wt = randn({4, 3, 3, 3}), gt = randn({1, 6, 7, 7});
  EXPECT_NO_THROW(convolution_backward(gt, xt, wt, {6}, {1}, {0}, {1}, true, {0}, 2));
  expect_error(error_of([&] { convolution_backward(gt, xt, wt, {4}, {1}, {0}, {1}, true, {0}, 2); }),
               {"convolution_backward", "bias_sizes", "[6]", "[4]"});
  expect_error(error_of([&] {
                 convolution_backward(gt, randn({1, 3, 5, 5}), wt, {6}, {1}, {0}, {1}, true, {0}, 2);
               }),
               {"convolution_backward", "weight.size(0) = 4", "got 3"});
  expect_error(error_of([&] { convolution_backward(gt, xt, wt, {6}, {1}, {0}, {1}, true, {1}, 2); }),
               {"convolution_backward", "output_padding[0] = 1", "stride (1)", "dilation (1)"});
}

}  // namespace
}  // namespace tg
