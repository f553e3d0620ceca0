// The convolution kernels' public API (conv_kernels.h): the ConvParams helpers, and the entry
// points, which forward to the copy of the kernels (conv_kernels*.cpp) compiled for the active
// instruction set (ops/internal/isa_dispatch.h).
#include "conv_kernels.h"

#include "../internal/isa_dispatch.h"

#include <atomic>
#include <vector>

namespace tg::kernels {

namespace {
std::atomic<bool> winograd_on{true};
}  // namespace

bool set_conv_winograd(bool on) { return winograd_on.exchange(on); }
bool conv_winograd_enabled() { return winograd_on.load(std::memory_order_relaxed); }

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                         int64_t pad_before, int64_t pad_after, bool transposed,
                         int64_t output_padding) {
  const int64_t span = dilation * (kernel - 1);  // extent of one window minus 1
  if (transposed) {
    return (in - 1) * stride - pad_before - pad_after + span + output_padding + 1;
  }
  const int64_t num = in + pad_before + pad_after - span - 1;
  // floor division, so that a window larger than the padded input gives a size <= 0
  // (written so that no step overflows for any stride > 0 and num > INT64_MIN)
  const int64_t q = num >= 0 ? num / stride : -1 - (-num - 1) / stride;
  return q + 1;
}

ConvParams make_conv_params(int dims, int64_t N, int64_t C_in, int64_t C_out, int64_t groups,
                            const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                            const std::vector<int64_t>& stride,
                            const std::vector<int64_t>& dilation,
                            const std::vector<int64_t>& pad_before,
                            const std::vector<int64_t>& pad_after, bool transposed,
                            const std::vector<int64_t>& output_padding) {
  ConvParams p;
  p.dims = dims;
  p.N = N;
  p.C_in = C_in;
  p.C_out = C_out;
  p.groups = groups;
  p.transposed = transposed;
  // right-align: a 2D (H, W) goes to slots 1, 2 and slot 0 keeps its unit defaults
  const int lead = 3 - dims;
  for (int d = 0; d < dims; ++d) {
    const int s = lead + d;
    p.in[s] = in[d];
    p.kernel[s] = kernel[d];
    p.stride[s] = stride[d];
    p.dilation[s] = dilation[d];
    p.pad_before[s] = pad_before[d];
    p.pad_after[s] = pad_after[d];
    p.output_padding[s] = output_padding.empty() ? 0 : output_padding[d];
  }
  for (int s = 0; s < 3; ++s) {
    p.out[s] = conv_output_size(p.in[s], p.kernel[s], p.stride[s], p.dilation[s], p.pad_before[s],
                                p.pad_after[s], transposed, p.output_padding[s]);
  }
  return p;
}

int64_t conv_weight_numel(const ConvParams& p) {
  const int64_t K = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const int64_t g = p.groups > 0 ? p.groups : 1;
  return p.transposed ? p.C_in * (p.C_out / g) * K : p.C_out * (p.C_in / g) * K;
}

TG_ISA_DECLARE(
    template <class T>
    void convolution_forward(const T*, const T*, const T*, T*, const ConvParams&);
    template <class T>
    void convolution_backward(const T*, const T*, const T*, T*, T*, T*, const ConvParams&);)

template <class T>
void convolution_forward(const T* input, const T* weight, const T* bias, T* output,
                         const ConvParams& p) {
  TG_ISA_DISPATCH(convolution_forward<T>)(input, weight, bias, output, p);
}

template <class T>
void convolution_backward(const T* grad_output, const T* input, const T* weight, T* grad_input,
                          T* grad_weight, T* grad_bias, const ConvParams& p) {
  TG_ISA_DISPATCH(convolution_backward<T>)(grad_output, input, weight, grad_input, grad_weight,
                                           grad_bias, p);
}

template void convolution_forward<float>(const float*, const float*, const float*, float*,
                                         const ConvParams&);
template void convolution_forward<double>(const double*, const double*, const double*, double*,
                                          const ConvParams&);
template void convolution_backward<float>(const float*, const float*, const float*, float*, float*,
                                          float*, const ConvParams&);
template void convolution_backward<double>(const double*, const double*, const double*, double*,
                                           double*, double*, const ConvParams&);

TG_ISA_DECLARE(
    template <class S>
    void convolution_forward_reduced(const S*, const S*, const float*, float*, const ConvParams&);
    template <class S>
    void convolution_backward_reduced(const S*, const S*, const S*, float*, float*, float*, const ConvParams&);)

// 16-bit operands, float32 results: conv_kernels_reduced.cpp.
template <class S>
void convolution_forward_reduced(const S* input, const S* weight, const float* bias, float* output,
                                 const ConvParams& p) {
  TG_ISA_DISPATCH(convolution_forward_reduced<S>)(input, weight, bias, output, p);
}

template <class S>
void convolution_backward_reduced(const S* grad_output, const S* input, const S* weight,
                                  float* grad_input, float* grad_weight, float* grad_bias,
                                  const ConvParams& p) {
  TG_ISA_DISPATCH(convolution_backward_reduced<S>)(grad_output, input, weight, grad_input,
                                                   grad_weight, grad_bias, p);
}

template void convolution_forward_reduced<BFloat16>(const BFloat16*, const BFloat16*, const float*,
                                                    float*, const ConvParams&);
template void convolution_forward_reduced<Float16>(const Float16*, const Float16*, const float*,
                                                   float*, const ConvParams&);
template void convolution_backward_reduced<BFloat16>(const BFloat16*, const BFloat16*,
                                                     const BFloat16*, float*, float*, float*,
                                                     const ConvParams&);
template void convolution_backward_reduced<Float16>(const Float16*, const Float16*, const Float16*,
                                                    float*, float*, float*, const ConvParams&);

}  // namespace tg::kernels
