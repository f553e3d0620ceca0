#include "conv.h"

#include <cmath>

#include "init.h"

namespace tg {

namespace {
IntList per_dim(const char* layer, const char* what, const IntList& v, int dims) {
  TG_CHECK(v.size() == 1 || v.size() == static_cast<size_t>(dims), layer, ": expected ", what, " to have 1 or ", dims,
           " values, got ", v.size());
  return v.size() == 1 ? IntList(dims, v[0]) : v;
}

// padding as tg::convolution takes it: the numbers given, or what "same" / "valid" stand for.
IntList resolve_padding(const char* layer, bool transposed, const ConvPadding& p, const IntList& k, const IntList& s,
                        const IntList& d) {
  if (p.text.empty()) return p;
  TG_CHECK(!transposed, layer, ": expected padding to be integers (\"same\" and \"valid\" are for ",
           "convolutions, not transposed ones), got \"", p.text, "\"");
  return conv_padding_from_string(layer, p.text, k, s, d);
}

// tg::pad's list for padding_mode (F.pad order: last dim first, (before, after) each), from
// padding in tg::convolution's forms; empty for "zeros". PyTorch's _reversed_padding_repeated_twice.
IntList mode_padding(const char* layer, bool transposed, const std::string& mode, const IntList& padding,
                     size_t dims) {
  TG_CHECK(mode == "zeros" || mode == "reflect" || mode == "replicate" || mode == "circular", layer,
           ": expected padding_mode to be \"zeros\", \"reflect\", \"replicate\" or \"circular\", got \"", mode,
           "\"");
  TG_CHECK(!transposed || mode == "zeros", layer, ": only padding_mode \"zeros\" is supported for ", layer,
           ", got \"", mode, "\"");
  if (mode == "zeros") return {};
  TG_CHECK(padding.size() == 1 || padding.size() == dims || padding.size() == 2 * dims, layer,
           ": expected padding to have 1, ", dims, " or ", 2 * dims, " values, got ", format_shape(padding));
  IntList out;
  for (size_t k = 0; k < dims; ++k) {
    const size_t d = dims - 1 - k;
    const bool pairs = padding.size() == 2 * dims;
    const int64_t before = pairs ? padding[2 * d] : padding.size() == 1 ? padding[0] : padding[d];
    const int64_t after = pairs ? padding[2 * d + 1] : before;
    TG_CHECK(before >= 0 && after >= 0, layer, ": expected padding to be non-negative, got ", format_shape(padding));
    out.push_back(before);
    out.push_back(after);
  }
  return out;
}
}  // namespace

ConvNd::ConvNd(const char* layer_name, int dims, bool is_transposed, int64_t in, int64_t out, const IntList& k,
               const IntList& s, const ConvPadding& p, const IntList& d, const IntList& op, int64_t g, bool with_bias,
               const std::string& mode, DType dtype, Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(per_dim(layer_name, "kernel_size", k, dims)),
      stride(per_dim(layer_name, "stride", s, dims)),
      padding(resolve_padding(layer_name, is_transposed, p, kernel_size, stride, per_dim(layer_name, "dilation", d, dims))),
      dilation(per_dim(layer_name, "dilation", d, dims)),
      output_padding(per_dim(layer_name, "output_padding", op, dims)),
      groups(g),
      transposed(is_transposed),
      padding_mode(mode),
      layer_name_(layer_name),
      dims_(dims),
      mode_pad_(mode_padding(layer_name, is_transposed, mode, padding, static_cast<size_t>(dims))) {
  TG_CHECK(in > 0 && out > 0, layer_name, ": expected positive in_channels and out_channels, got ", in, " and ", out);
  TG_CHECK(g > 0, layer_name, ": expected groups to be positive, got ", g);
  TG_CHECK(in % g == 0, layer_name, ": in_channels (", in, ") must be divisible by groups (", g, ")");
  TG_CHECK(out % g == 0, layer_name, ": out_channels (", out, ") must be divisible by groups (", g, ")");
  for (int64_t v : kernel_size) TG_CHECK(v > 0, layer_name, ": expected positive kernel_size, got ", v);
  TG_CHECK(is_floating(dtype), layer_name, ": expected a floating dtype, got ", dtype_name(dtype));
  Shape w_shape = transposed ? Shape{in, out / g} : Shape{out, in / g};
  w_shape.insert(w_shape.end(), kernel_size.begin(), kernel_size.end());
  weight = register_parameter("weight", Tensor::empty(w_shape, dtype));
  if (with_bias) bias = register_parameter("bias", Tensor::empty({out}, dtype));
  reset_parameters(gen);
}

void ConvNd::reset_parameters(Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias.defined()) {
    const int64_t fan_in = init::fan_in(weight);
    if (fan_in != 0) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      init::uniform_(bias, -bound, bound, gen);
    }
  }
}

Tensor ConvNd::forward(const Tensor& input) {
  // nn.Conv's padding_mode: pad in that mode, then convolve without padding.
  const Tensor x = mode_pad_.empty() ? input : pad(input, mode_pad_, pad_mode_from_string(padding_mode));
  const IntList& padding = mode_pad_.empty() ? this->padding : IntList{0};
  if (transposed) {
    switch (dims_) {
      case 1: return conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation);
      case 2: return conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation);
      default: return conv_transpose3d(x, weight, bias, stride, padding, output_padding, groups, dilation);
    }
  }
  switch (dims_) {
    case 1: return conv1d(x, weight, bias, stride, padding, dilation, groups);
    case 2: return conv2d(x, weight, bias, stride, padding, dilation, groups);
    default: return conv3d(x, weight, bias, stride, padding, dilation, groups);
  }
}

Conv1d::Conv1d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv1d", 1, false, in, out, k, s, p, d, {0}, g, b, "zeros", dtype, gen) {}

Conv1d::Conv1d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, const std::string& padding_mode, DType dtype, Generator* gen)
    : ConvNd("Conv1d", 1, false, in, out, k, s, p, d, {0}, g, b, padding_mode, dtype, gen) {}

Conv2d::Conv2d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv2d", 2, false, in, out, k, s, p, d, {0}, g, b, "zeros", dtype, gen) {}

Conv2d::Conv2d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, const std::string& padding_mode, DType dtype, Generator* gen)
    : ConvNd("Conv2d", 2, false, in, out, k, s, p, d, {0}, g, b, padding_mode, dtype, gen) {}

Conv3d::Conv3d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv3d", 3, false, in, out, k, s, p, d, {0}, g, b, "zeros", dtype, gen) {}

Conv3d::Conv3d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const ConvPadding& p,
               const IntOrList& d, int64_t g, bool b, const std::string& padding_mode, DType dtype, Generator* gen)
    : ConvNd("Conv3d", 3, false, in, out, k, s, p, d, {0}, g, b, padding_mode, dtype, gen) {}

}  // namespace tg
