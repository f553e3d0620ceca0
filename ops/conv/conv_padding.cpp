// conv1d/2d/3d with padding = "same" or "valid" (conv.h): the string becomes the explicit,
// possibly asymmetric padding tg::convolution takes, so "same" needs no separate pad op.
// PyTorch 1.13's rule (aten _convolution_mode, nn.Conv's _reversed_padding_repeated_twice):
// total = dilation * (kernel - 1) per dim, before = total / 2, after = total - before.
#include "conv.h"

namespace tg {

namespace {
IntList per_dim(const char* op, const char* what, const IntList& v, size_t dims) {
  TG_CHECK(v.size() == 1 || v.size() == dims, op, ": expected ", what, " to have 1 or ", dims, " values, got ",
           format_shape(v));
  return v.size() == 1 ? IntList(dims, v[0]) : v;
}
}  // namespace

IntList conv_padding_from_string(const char* op, const std::string& padding, const IntList& kernel_size,
                                 const IntList& stride, const IntList& dilation) {
  const size_t dims = kernel_size.size();
  TG_CHECK(padding == "same" || padding == "valid", op, ": expected padding to be \"same\" or \"valid\" (or ",
           "integers), got \"", padding, "\"");
  if (padding == "valid") return IntList(2 * dims, 0);
  for (int64_t s : per_dim(op, "stride", stride, dims)) {
    TG_CHECK(s == 1, op, ": padding=\"same\" needs stride 1 (it is not supported for strided convolutions), got ",
             "stride ", format_shape(stride));
  }
  const IntList d = per_dim(op, "dilation", dilation, dims);
  IntList out(2 * dims);
  for (size_t i = 0; i < dims; ++i) {
    const int64_t total = d[i] * (kernel_size[i] - 1);
    out[2 * i] = total / 2;
    out[2 * i + 1] = total - total / 2;
  }
  return out;
}

namespace {
// The kernel sizes of a weight for a dims-D convolution; a weight of another rank is left to the
// convolution's own check (its message names the weight), with kernel size 1 meanwhile.
IntList kernel_sizes(const Tensor& weight, int dims) {
  if (!weight.defined() || weight.dim() != dims + 2) return IntList(dims, 1);
  return IntList(weight.shape().begin() + 2, weight.shape().end());
}
}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation, int64_t groups) {
  const IntList p = conv_padding_from_string("conv1d", padding.value, kernel_sizes(weight, 1), stride, dilation);
  return conv1d(input, weight, bias, stride, p, dilation, groups);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation, int64_t groups) {
  const IntList p = conv_padding_from_string("conv2d", padding.value, kernel_sizes(weight, 2), stride, dilation);
  return conv2d(input, weight, bias, stride, p, dilation, groups);
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation, int64_t groups) {
  const IntList p = conv_padding_from_string("conv3d", padding.value, kernel_sizes(weight, 3), stride, dilation);
  return conv3d(input, weight, bias, stride, p, dilation, groups);
}

}  // namespace tg
