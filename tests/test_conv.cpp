// Convolutions on tensors and the tape: PyTorch's golden fixtures (tools/fixtures/conv.py), every
// output mask of the kernel API convolution_backward, empty problems, what the tape saves and
// float64 gradchecks. The kernels' paths (thread counts, Inf and NaN) are in test_conv_kernels.cpp,
// the bad inputs in test_conv_errors.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
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

// The cases the fixtures must hold, so that a case dropped from tools/fixtures/conv.py does not go unnoticed:
// 1D, 2D and 3D each with stride, padding, dilation, groups, depthwise, asymmetric padding, an
// empty batch, with and without bias; transposed in each of them with stride, padding,
// dilation, groups, output_padding, asymmetric padding, with and without bias. And every case
// in float32 and float64 with every file in the case's own dtype: a float64 file in a float32
// case would hold our float32 result to float64 values, a float32 one in a float64 case would
// hide float64 errors behind float32 rounding.
TEST(Conv, FixturesCoverEveryCaseInBothDtypes) {
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
    if (c.has("bias")) { EXPECT_EQ(r.grad_bias.dtype(), c.dtype()); }
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
      if (m[0]) { EXPECT_TRUE(same_bits(r.grad_input, all.grad_input)) << mask; }
      if (m[1]) { EXPECT_TRUE(same_bits(r.grad_weight, all.grad_weight)) << mask; }
      if (m[2]) { EXPECT_TRUE(same_bits(r.grad_bias, all.grad_bias)) << mask; }
    }
  }
}

TEST(Conv, TapeSavesOnlyWhatBackwardNeeds) {
  manual_seed(3);
  // Slot 0 is the input, slot 1 the weight (ConvSaved); a slot never saved may be absent.
  auto kept = [](const std::vector<SavedTensor>& saved, size_t slot) {
    return slot < saved.size() && saved[slot].tensor.defined();
  };
  Tensor x = randn({1, 2, 5, 5}), w = randn({3, 2, 3, 3}), b = randn({3});
  {
    Tensor xr = x.detach().requires_grad_();  // only the input wants a gradient: keep the weight
    Tensor y = conv2d(xr, w, b);
    ASSERT_TRUE(y.grad_fn());
    const auto& saved = y.grad_fn()->saved();
    EXPECT_FALSE(kept(saved, 0));
    EXPECT_TRUE(kept(saved, 1));
  }
  {
    Tensor wr = w.detach().requires_grad_();  // only the weight: keep the input
    Tensor y = conv2d(x, wr, b);
    const auto& saved = y.grad_fn()->saved();
    EXPECT_TRUE(kept(saved, 0));
    EXPECT_FALSE(kept(saved, 1));
    y.backward(ones(y.shape()));
    ConvolutionGrads r = convolution_backward(ones(y.shape()), x, w, {3}, {1}, {0}, {1}, false, {0}, 1);
    EXPECT_TRUE(same_bits(wr.grad(), r.grad_weight));
  }
  {
    Tensor br = b.detach().requires_grad_();  // only the bias: keep nothing
    Tensor y = conv2d(x, w, br);
    const auto& saved = y.grad_fn()->saved();
    EXPECT_FALSE(kept(saved, 0));
    EXPECT_FALSE(kept(saved, 1));
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
              if (m[0]) { EXPECT_TRUE(same_bits(r.grad_input, zeros(xs, dt))) << mask; }
              if (m[1]) { EXPECT_TRUE(same_bits(r.grad_weight, zeros(ws, dt))) << mask; }
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

// Finite differences in float64 on what the registry's samples (ops/conv/conv.cpp) leave out: a
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
}  // namespace
}  // namespace tg
