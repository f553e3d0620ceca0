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
}  // namespace

ConvNd::ConvNd(const char* layer_name, int dims, bool is_transposed, int64_t in, int64_t out, const IntList& k,
               const IntList& s, const IntList& p, const IntList& d, const IntList& op, int64_t g, bool with_bias,
               DType dtype, Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(per_dim(layer_name, "kernel_size", k, dims)),
      stride(per_dim(layer_name, "stride", s, dims)),
      padding(p),
      dilation(per_dim(layer_name, "dilation", d, dims)),
      output_padding(per_dim(layer_name, "output_padding", op, dims)),
      groups(g),
      transposed(is_transposed),
      layer_name_(layer_name),
      dims_(dims) {
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

Tensor ConvNd::forward(const Tensor& x) {
  switch (dims_) {
    case 1:
      return conv1d(x, weight, bias, stride, padding, dilation, groups);
    case 2:
      return transposed ? conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation)
                        : conv2d(x, weight, bias, stride, padding, dilation, groups);
    default:
      return conv3d(x, weight, bias, stride, padding, dilation, groups);
  }
}

Conv1d::Conv1d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const IntOrList& p, const IntOrList& d,
               int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv1d", 1, false, in, out, k, s, p, d, {0}, g, b, dtype, gen) {}

Conv2d::Conv2d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const IntOrList& p, const IntOrList& d,
               int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv2d", 2, false, in, out, k, s, p, d, {0}, g, b, dtype, gen) {}

Conv3d::Conv3d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const IntOrList& p, const IntOrList& d,
               int64_t g, bool b, DType dtype, Generator* gen)
    : ConvNd("Conv3d", 3, false, in, out, k, s, p, d, {0}, g, b, dtype, gen) {}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, const IntOrList& k, const IntOrList& s, const IntOrList& p,
                                 const IntOrList& op, int64_t g, bool b, const IntOrList& d, DType dtype, Generator* gen)
    : ConvNd("ConvTranspose2d", 2, true, in, out, k, s, p, d, op, g, b, dtype, gen) {}

}  // namespace tg
