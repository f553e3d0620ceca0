// Issue 26, padding and unbatched inputs, against PyTorch 1.13 (tools/fixtures/pad.py): tg::pad
// in each mode (ranks 1-5, batched and unbatched, negative and asymmetric pads, the limits'
// edges), conv1d/2d/3d with padding "same" / "valid", the Conv layers' padding_mode, unbatched
// convolutions; unbatched pooling equals the batched result; the same bits at 1 and 2 threads;
// every bad input names its argument. The float64 finite-difference checks (and second
// derivatives) are the registry's pad samples (tests/test_registry_gradcheck.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <map>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::GoldenCase;
using testing::load_golden_cases;

IntList list(const nlohmann::json& j) {
  return j.is_array() ? j.get<std::vector<int64_t>>() : IntList{j.get<int64_t>()};
}

// The case's tolerance (tools/fixtures/pad.py says why): padding's output is exact, its
// gradients an ulp or two; convolutions as tests/test_conv.cpp.
struct Tol {
  double rtol, atol;
};
Tol tolerance(const GoldenCase& c) { return {c.json["tolerance"]["rtol"], c.json["tolerance"]["atol"]}; }

// The worst |actual - expected| / (1 + |expected|) per kind and dtype, printed for the record.
std::map<std::string, double> worst;
void note_error(const std::string& key, const Tensor& actual, const Tensor& expected) {
  const auto a = actual.to(DType::Float64).to_vector<double>(), e = expected.to(DType::Float64).to_vector<double>();
  double& w = worst[key];
  for (size_t i = 0; i < a.size() && i < e.size(); ++i) w = std::max(w, std::abs(a[i] - e[i]) / (1 + std::abs(e[i])));
}

Tensor conv_by_name(const std::string& fn, const Tensor& x, const Tensor& w, const Tensor& b, const IntList& stride,
                    const IntList& padding, const IntList& output_padding, int64_t groups) {
  if (fn == "conv1d") return conv1d(x, w, b, stride, padding, {1}, groups);
  if (fn == "conv2d") return conv2d(x, w, b, stride, padding, {1}, groups);
  if (fn == "conv3d") return conv3d(x, w, b, stride, padding, {1}, groups);
  if (fn == "conv_transpose1d") return conv_transpose1d(x, w, b, stride, padding, output_padding, groups);
  if (fn == "conv_transpose2d") return conv_transpose2d(x, w, b, stride, padding, output_padding, groups);
  return conv_transpose3d(x, w, b, stride, padding, output_padding, groups);
}

Tensor conv_string(const std::string& fn, const Tensor& x, const Tensor& w, const Tensor& b, const IntList& stride,
                   const std::string& padding, const IntList& dilation) {
  if (fn == "conv1d") return conv1d(x, w, b, stride, padding, dilation);
  if (fn == "conv2d") return conv2d(x, w, b, stride, padding, dilation);
  return conv3d(x, w, b, stride, padding, dilation);
}

std::shared_ptr<ConvNd> conv_layer(const nlohmann::json& j, DType dt) {
  const std::string layer = j["layer"];
  const ConvPadding padding = j["padding"].is_string() ? ConvPadding(j["padding"].get<std::string>())
                                                       : ConvPadding(list(j["padding"]));
  const int64_t in = j["in_channels"], out = j["out_channels"];
  const IntList k = list(j["kernel_size"]), s = list(j["stride"]), d = list(j["dilation"]);
  const std::string mode = j["padding_mode"];
  if (layer == "Conv1d") return std::make_shared<Conv1d>(in, out, k, s, padding, d, 1, true, mode, dt);
  if (layer == "Conv2d") return std::make_shared<Conv2d>(in, out, k, s, padding, d, 1, true, mode, dt);
  return std::make_shared<Conv3d>(in, out, k, s, padding, d, 1, true, mode, dt);
}

TEST(Pad, MatchesPyTorch) {
  auto cases = load_golden_cases("pad");
  ASSERT_EQ(cases.size(), 84u);
  int checked = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const auto& j = c.json;
    const std::string kind = j["kind"];
    const Tol tol = tolerance(c);
    Tensor x = c.tensor("input").requires_grad_();
    Tensor w, b, y;
    if (kind != "pad") {
      w = c.tensor("weight").requires_grad_();
      b = c.tensor("bias").requires_grad_();
    }
    std::shared_ptr<ConvNd> layer;
    if (kind == "pad") {
      y = pad(x, list(j["pad"]), pad_mode_from_string(j["mode"]), j["value"].get<double>());
    } else if (kind == "conv_string") {
      y = conv_string(j["function"], x, w, b, list(j["stride"]), j["padding"], list(j["dilation"]));
    } else if (kind == "unbatched") {
      y = conv_by_name(j["function"], x, w, b, list(j["stride"]), list(j["padding"]), list(j["output_padding"]),
                       j["groups"]);
    } else {
      layer = conv_layer(j, c.dtype());
      {
        NoGradGuard ng;
        layer->weight.copy_(c.tensor("weight"));
        layer->bias.copy_(c.tensor("bias"));
      }
      w = layer->weight, b = layer->bias;
      y = layer->forward(x);
    }
    // Padding copies: its output is exact; a convolution's is within its tolerance.
    const Tol out_tol = kind == "pad" ? Tol{0, 0} : tol;
    expect_close(y, c.tensor("output"), out_tol.rtol, out_tol.atol, "output");
    y.backward(c.tensor("grad_output"));
    expect_close(x.grad(), c.tensor("grad_input"), tol.rtol, tol.atol, "grad_input");
    const std::string key = kind + " " + dtype_name(c.dtype());
    note_error(key + " output", y, c.tensor("output"));
    note_error(key + " grad_input", x.grad(), c.tensor("grad_input"));
    if (kind != "pad") note_error(key + " grad_weight", w.grad(), c.tensor("grad_weight"));
    if (kind == "pad") {
      Tensor g = pad_backward(c.tensor("grad_output"), x.shape(), list(j["pad"]), pad_mode_from_string(j["mode"]));
      EXPECT_TRUE(same_bits(g, x.grad())) << "the kernel API's backward is the tape's";
    } else {
      expect_close(w.grad(), c.tensor("grad_weight"), tol.rtol, tol.atol, "grad_weight");
      expect_close(b.grad(), c.tensor("grad_bias"), tol.rtol, tol.atol, "grad_bias");
    }
    ++checked;
  }
  EXPECT_EQ(checked, 84);
  for (const auto& [key, w] : worst) std::cout << "[pad golden] worst " << key << ": " << w << " (1 + |expected|)\n";
}

TEST(Pad, ConstantPadsAnyRankAndInt64) {
  Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = pad(x, {1, -1, 0, 1}, PadMode::Constant, 7.0);
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 2, 7, 4, 5, 7, 7, 7}));
  // 6-D, every dim padded (only constant mode takes more than 3 dims)
  Tensor z = pad(ones({1, 1, 1, 1, 1, 2}), {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, PadMode::Constant, 2.0);
  EXPECT_EQ(z.shape(), (Shape{2, 1, 1, 1, 1, 3}));
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{2, 2, 2, 2, 1, 1}));
  // a crop to nothing is allowed: size 0
  EXPECT_EQ(pad(ones({2, 3}), {-3, 0}).shape(), (Shape{2, 0}));
}

// Negative pads that empty a dim give an empty output in every mode (as PyTorch 1.13), and the
// gradient of the input is zeros.
TEST(Pad, NegativePadsMayEmptyADimInEveryMode) {
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    SCOPED_TRACE(int(mode));
    for (IntList p : {IntList{-2, -2, 0, 0}, IntList{-5, 1, 0, 0}, IntList{0, 0, -3, 0}}) {
      Tensor x = randn({1, 2, 3, 4});
      x.requires_grad_();
      Tensor y = pad(x, p, mode);
      EXPECT_EQ(y.numel(), 0);
      EXPECT_EQ(y.shape(), (p[2] == -3 ? Shape{1, 2, 0, 4} : Shape{1, 2, 3, 0}));
      sum(y).backward();
      EXPECT_EQ(x.grad().shape(), x.shape());
      EXPECT_EQ(sum(abs(x.grad())).item<float>(), 0.0f);
    }
  }
}

TEST(Pad, HalfTypesCopyTheirBitsAndSumGradientsInFloat) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + pad_mode_name(mode));
      Tensor x64 = randn({2, 3, 5, 4}, DType::Float64);
      Tensor xh = x64.to(dt).requires_grad_();
      Tensor y = pad(xh, {2, 3, 1, 2}, mode);
      Tensor ref = pad(xh.detach().to(DType::Float32), {2, 3, 1, 2}, mode);
      EXPECT_TRUE(same_bits(y, ref.to(dt)));
      Tensor g = randn(y.shape(), DType::Float64).to(dt);
      y.backward(g);
      // float32 sums of at most 9 terms, rounded once to 16 bits
      Tensor gref = pad_backward(g.to(DType::Float32), xh.shape(), {2, 3, 1, 2}, mode).to(dt);
      EXPECT_TRUE(same_bits(xh.grad(), gref));
    }
  }
}

TEST(Pad, SameBitsAtOneAndTwoThreads) {
  const int before = num_threads();
  Tensor x = randn({4, 16, 40, 48});
  Tensor g = randn({4, 16, 45, 53});
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    SCOPED_TRACE(pad_mode_name(mode));
    set_num_threads(1);
    Tensor y1 = pad(x, {3, 2, 4, 1}, mode), g1 = pad_backward(g, x.shape(), {3, 2, 4, 1}, mode);
    set_num_threads(2);
    Tensor y2 = pad(x, {3, 2, 4, 1}, mode), g2 = pad_backward(g, x.shape(), {3, 2, 4, 1}, mode);
    EXPECT_TRUE(same_bits(y1, y2));
    EXPECT_TRUE(same_bits(g1, g2));
  }
  set_num_threads(before);
}

TEST(Pad, UnbatchedConvAndPoolEqualTheBatchedResult) {
  Tensor x = randn({3, 9, 10}).requires_grad_();
  Tensor xb = x.detach().unsqueeze(0).requires_grad_();
  Tensor w = randn({4, 3, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), {2}, {1});
  EXPECT_EQ(y.shape(), (Shape{4, 5, 5}));
  EXPECT_TRUE(same_bits(y, conv2d(xb, w, Tensor(), {2}, {1}).squeeze(0)));
  sum(y).backward();
  sum(conv2d(xb, w, Tensor(), {2}, {1})).backward();
  EXPECT_TRUE(same_bits(x.grad(), xb.grad().squeeze(0)));

  ValuesIndices m = max_pool2d_with_indices(x.detach(), {2});
  ValuesIndices mb = max_pool2d_with_indices(xb.detach(), {2});
  EXPECT_TRUE(same_bits(m.values, mb.values.squeeze(0)));
  EXPECT_TRUE(same_bits(m.indices, mb.indices.squeeze(0)));
  EXPECT_TRUE(same_bits(avg_pool2d(x.detach(), {3}, {2}, {1}), avg_pool2d(xb.detach(), {3}, {2}, {1}).squeeze(0)));
  EXPECT_TRUE(same_bits(adaptive_avg_pool2d(x.detach(), {4, 3}),
                        adaptive_avg_pool2d(xb.detach(), {4, 3}).squeeze(0)));
  // the layers forward to these ops
  EXPECT_EQ(MaxPool2d(2).forward(x.detach()).shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(AvgPool2d(2).forward(x.detach()).shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(AdaptiveAvgPool2d(2).forward(x.detach()).shape(), (Shape{3, 2, 2}));
  Conv2d conv(3, 4, 3, 1, 1, 1, 1, true, "replicate");
  EXPECT_TRUE(same_bits(conv.forward(x.detach()), conv.forward(xb.detach()).squeeze(0)));
  ConvTranspose2d convt(3, 2, 3, 2);
  EXPECT_TRUE(same_bits(convt.forward(x.detach()), convt.forward(xb.detach()).squeeze(0)));
}

TEST(Pad, RefusedUnbatchedFormsSayWhatIsExpected) {
  // PyTorch 1.13 refuses these too: interpolate / upsample and grid_sample want a batch, and
  // circular padding (so a Conv layer with padding_mode="circular") wants (N, C, ...).
  Tensor x = randn({3, 5, 6});
  EXPECT_NE(error_of([&] { interpolate(x, std::array<int64_t, 2>{4, 4}); }).find("4-D input (N, C, H, W)"),
            std::string::npos);
  const std::string gs = error_of([&] { grid_sample(x, randn({4, 4, 2})); });
  EXPECT_NE(gs.find("grid_sample"), std::string::npos) << gs;
  EXPECT_NE(gs.find("[3, 5, 6]"), std::string::npos) << gs;
  EXPECT_NE(error_of([&] { Conv2d(3, 4, 3, 1, 1, 1, 1, true, "circular").forward(x); })
                .find("pad: mode \"circular\" pads the last 1, 2 or 3 dims of a batched input"),
            std::string::npos);
}

TEST(Pad, ConvSameValidAndPaddingModeLayers) {
  Tensor x = randn({1, 2, 7, 8});
  Tensor w = randn({3, 2, 4, 3});
  // "same" is convolution's own asymmetric padding: (1, 2) rows, (1, 1) columns for this kernel
  EXPECT_TRUE(same_bits(conv2d(x, w, Tensor(), {1}, "same"), conv2d(x, w, Tensor(), {1}, {1, 2, 1, 1})));
  const std::string valid = "valid";
  EXPECT_TRUE(same_bits(conv2d(x, w, Tensor(), {1}, valid), conv2d(x, w)));
  // {1} and {0} stay lists: the string overload takes no brace list
  EXPECT_EQ(conv2d(x, w, Tensor(), {1}, {0}).shape(), (Shape{1, 3, 4, 6}));
  // layers: the string is kept as the padding it stands for; the state_dict is unchanged
  Conv2d same(2, 3, {4, 3}, 1, "same", 2);
  EXPECT_EQ(same.padding, (IntList{3, 3, 2, 2}));  // totals 2 * 3 and 2 * 2
  Conv2d reflect(2, 3, 3, 1, 1, 1, 1, true, "reflect");
  EXPECT_EQ(reflect.padding_mode, "reflect");
  auto sd = reflect.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "weight");
  EXPECT_EQ(sd[1].first, "bias");
  // padding_mode="zeros" is the plain layer
  Conv2d zeros_mode(2, 3, 3, 1, 1, 1, 1, true, "zeros");
  EXPECT_EQ(zeros_mode.forward(x).shape(), (Shape{1, 3, 7, 8}));
}

TEST(Pad, ErrorsNameTheArgument) {
  Tensor x = randn({2, 3, 6});
  EXPECT_EQ(error_of([&] { pad(x, {6, 1}, PadMode::Reflect); }),
            "pad: mode \"reflect\" expects each pad to be smaller than its dim, got pad (6, 1) for dim 2 of size 6 "
            "of input [2, 3, 6]");
  EXPECT_EQ(error_of([&] { pad(x, {7, 0}, PadMode::Circular); }),
            "pad: mode \"circular\" expects each pad to be at most the size of its dim (after cropping by the "
            "negative pads, 6): padding wraps around once; got pad (7, 0) for dim 2 of size 6 of input [2, 3, 6]");
  EXPECT_EQ(error_of([&] { pad(x, {1, 1, 1}); }),
            "pad: expected pad to have an even number of values ((before, after) pairs from the last dim "
            "backwards), got 3 values [1, 1, 1]");
  EXPECT_EQ(error_of([&] { pad(x, {1, 1, 1, 1, 1, 1, 1, 1}); }),
            "pad: expected pad to have at most 2 * input.dim() = 6 values, got 8 values [1, 1, 1, 1, 1, 1, 1, 1] "
            "for input [2, 3, 6]");
  EXPECT_EQ(error_of([&] { pad(x, {-4, -3}); }),
            "pad: expected pad (-4, -3) to leave a size >= 0 in dim 2 of input [2, 3, 6], got -1");
  EXPECT_EQ(error_of([&] { pad(x, {1, 1}, PadMode::Reflect, 1.5); }), "pad: mode \"reflect\" takes no value, got value 1.5");
  EXPECT_EQ(error_of([&] { pad(randn({6}), {1, 1}, PadMode::Replicate); }),
            "pad: mode \"replicate\" pads the last 1, 2 or 3 dims of a batched or unbatched input, so 2, 4 or 6 pad "
            "values need a 2-3, 3-4 or 4-5 dim input, got 2 pad values [1, 1] for input [6]");
  EXPECT_EQ(error_of([&] { pad(randn({3, 6}), {1, 1}, PadMode::Circular); }),
            "pad: mode \"circular\" pads the last 1, 2 or 3 dims of a batched input, so 2, 4 or 6 pad values need a 3-D, 4-D "
            "or 5-D input (N, C, ...), got 2 pad values [1, 1] for input [3, 6]");
  EXPECT_EQ(error_of([&] { pad(zeros({2, 6}, DType::Int64), {1, 1}, PadMode::Reflect); }),
            "pad: mode \"reflect\" expects a floating input (float32, float64, bfloat16 or float16), got int64");
  EXPECT_EQ(error_of([&] { pad(zeros({2, 3, 0}), {1, 1}, PadMode::Replicate); }),
            "pad: mode \"replicate\" expects a non-empty padded dim 2, got pad (1, 1) for input [2, 3, 0]");
  // reflect/replicate: negative pads may empty some padded dims but not all (PyTorch: "input (H: 4,
  // W: 4) is too small. Calculated output H: 0 W: 0"); one is allowed
  // (NegativePadsMayEmptyADimInEveryMode)
  EXPECT_EQ(error_of([&] { pad(randn({1, 2, 4}), {-2, -2}, PadMode::Reflect); }),
            "pad: mode \"reflect\" expects the padded dims not to become all empty, got pad [-2, -2] for input "
            "[1, 2, 4] (output [1, 2, 0])");
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate}) {
    EXPECT_NE(error_of([&] { pad(randn({1, 1, 4, 4}), {-2, -2, -2, -2}, mode); }).find("not to become all empty"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pad(randn({1, 1, 4, 4}), {-4, 0, 0, -4}, mode); }).find("not to become all empty"),
              std::string::npos);
    EXPECT_EQ(pad(randn({1, 1, 4, 4, 4}), {-2, -2, -2, -2, 0, 0}, mode).shape(), (Shape{1, 1, 4, 0, 0}));
  }
  // circular emptied by a negative pad: each pad still at most the dim (PyTorch: "wrapping around
  // more than once"); (4, -8) is allowed
  for (const Shape& s : {Shape{1, 2, 4}, Shape{1, 2, 3, 4}}) {
    IntList p = s.size() == 3 ? IntList{5, -9} : IntList{5, -9, 0, 0};
    EXPECT_NE(error_of([&] { pad(randn(s), p, PadMode::Circular); }).find("padding wraps around once"),
              std::string::npos);
  }
  EXPECT_EQ(pad(randn({1, 2, 4}), {4, -8}, PadMode::Circular).shape(), (Shape{1, 2, 0}));
  // a constant value past the dtype's range (PyTorch: "cannot be converted to type float without
  // overflow"); float64 takes it, and Inf is a value like any other
  EXPECT_EQ(error_of([&] { pad(randn({2, 2}), {1, 1}, PadMode::Constant, 1e39); }),
            "pad: value 1e+39 cannot be converted to float32 without overflow");
  EXPECT_EQ(pad(zeros({1}, DType::Float64), {1, 0}, PadMode::Constant, 1e39).to_vector<double>()[0], 1e39);
  EXPECT_EQ(pad(zeros({1}), {1, 0}, PadMode::Constant, std::numeric_limits<double>::infinity()).to_vector<float>()[0],
            std::numeric_limits<float>::infinity());
  // hostile sizes are errors, not allocations or overflows
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_NE(error_of([&] { pad(x, {big, 1}); }).find("pad: "), std::string::npos);
  // 2^41 columns fit int64: the allocation itself is refused (a tg::Error from the storage)
  EXPECT_NE(error_of([&] { pad(x, {int64_t{1} << 40, int64_t{1} << 40}); }), "<no error>");
  EXPECT_NE(error_of([&] { pad_backward(zeros({1}), {-1}, {1, 1}, PadMode::Constant); }).find("pad_backward: "),
            std::string::npos);
  EXPECT_EQ(error_of([&] { pad_mode_from_string("mirror"); }),
            "pad: expected mode to be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"mirror\"");
  EXPECT_EQ(error_of([&] { pad_backward(zeros({2, 3, 7}), x.shape(), {1, 1}, PadMode::Reflect); }),
            "pad_backward: expected grad_output of the padded shape [2, 3, 8], got [2, 3, 7]");

  Tensor x4 = randn({1, 2, 7, 8}), w = randn({3, 2, 3, 3});
  EXPECT_EQ(error_of([&] { conv2d(x4, w, Tensor(), {2}, "same"); }),
            "conv2d: padding=\"same\" needs stride 1 (it is not supported for strided convolutions), got stride [2]");
  EXPECT_EQ(error_of([&] { conv2d(x4, w, Tensor(), {1}, "full"); }),
            "conv2d: expected padding to be \"same\" or \"valid\" (or integers), got \"full\"");
  EXPECT_EQ(error_of([&] { Conv2d(2, 3, 3, 2, "same"); }),
            "Conv2d: padding=\"same\" needs stride 1 (it is not supported for strided convolutions), got stride [2, 2]");
  EXPECT_EQ(error_of([&] { Conv1d(2, 3, 3, 1, "half"); }),
            "Conv1d: expected padding to be \"same\" or \"valid\" (or integers), got \"half\"");
  EXPECT_EQ(error_of([&] { Conv2d(2, 3, 3, 1, 1, 1, 1, true, "mirror"); }),
            "Conv2d: expected padding_mode to be \"zeros\", \"reflect\", \"replicate\" or \"circular\", got \"mirror\"");
  EXPECT_EQ(error_of([&] { ConvTranspose2d(2, 3, 3, 1, 0, 0, 1, true, 1, "reflect"); }),
            "ConvTranspose2d: only padding_mode \"zeros\" is supported for ConvTranspose2d, got \"reflect\"");
  // a reflect layer whose padding is not smaller than the input: pad's message, at forward
  EXPECT_NE(error_of([&] { Conv2d(2, 3, 3, 1, 8, 1, 1, true, "reflect").forward(x4); })
                .find("pad: mode \"reflect\" expects each pad to be smaller than its dim"),
            std::string::npos);
}

}  // namespace
}  // namespace tg
