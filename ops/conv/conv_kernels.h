// Convolution kernels: 1D/2D/3D, normal and transposed, groups, dilation, asymmetric padding.
// Semantics follow PyTorch's aten::convolution / aten::convolution_backward.
//
// Shape legend (C order, contiguous):
//   N = batch, G = groups, C_in / C_out = channels of the input / output tensor,
//   in = (D, H, W) input spatial sizes, out = (D_o, H_o, W_o) output spatial sizes,
//   k = (kD, kH, kW) kernel sizes. 1D and 2D convolutions are 3D ones with unit leading
//   dims (kernel 1, stride 1, dilation 1, padding 0), so every case runs one code path.
//
//   input        (N, C_in,  in...)
//   output       (N, C_out, out...)
//   weight       normal:     (C_out, C_in / G, k...)
//                transposed: (C_in,  C_out / G, k...)
//   bias         (C_out)   (null = no bias)
//
// The maths, for one group of a normal convolution with x = input, y = output:
//   y[co, o]  = b[co] + sum_{ci, t} w[co, ci, t] * x[ci, o * stride - pad_before + t * dilation]
// with out-of-range x read as zero. A transposed convolution is the adjoint of that map: its
// forward is the normal convolution's input gradient and its input gradient is the normal
// convolution's forward (see conv_kernels.cpp for the three pieces both share).
//
// Where the spec page and PyTorch differ, PyTorch wins:
//   - asymmetric padding (pad_before != pad_after) is accepted for every dims and for transposed
//     convolutions too (PyTorch only takes symmetric padding; its F.pad + conv equals ours).
//   - output sizes follow PyTorch's formulas, see conv_output_size.
//
// The kernels do no validation (the Tensor-level layer does and throws tg::Error); they read
// and write only inside the buffers the sizes in ConvParams describe, for any sizes >= 0.
// Inf and NaN propagate as the definition says: only taps inside the image contribute, never
// Inf * (padding's 0), as in PyTorch's oneDNN path for plain convolutions (its slow im2col
// path, e.g. float64 or transposed, and oneDNN's grouped and depthwise kernels with padding
// give NaN where a non-finite value meets the padding). Every non-finite case sums exactly
// the definition's products: an Inf weight meeting an Inf input is an Inf, never 0 * Inf.
// Threads: OpenMP, sized by omp_get_max_threads(); each thread keeps its scratch buffers (at
// most 16 MB each, larger ones are freed) between calls.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "../../framework/half.h"

namespace tg::kernels {

struct ConvParams {
  int dims = 2;                      // 1, 2 or 3 spatial dims (informative; the kernels run 3D)
  int64_t N = 0;                     // batch
  int64_t C_in = 0, C_out = 0;       // channels of the input / output tensors
  int64_t groups = 1;
  // Spatial parameters, always 3 entries (D, H, W); 1D/2D fill the leading ones with unit
  // values (make_conv_params does this).
  std::array<int64_t, 3> in{1, 1, 1};      // input spatial sizes
  std::array<int64_t, 3> out{1, 1, 1};     // output spatial sizes (authoritative for the kernels)
  std::array<int64_t, 3> kernel{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> dilation{1, 1, 1};
  // pad_before is where the first window starts (-pad_before); pad_after only enters the output
  // size formula: the kernels take the sizes in `in` / `out` as given and treat every position
  // outside the tensor as zero.
  std::array<int64_t, 3> pad_before{0, 0, 0};
  std::array<int64_t, 3> pad_after{0, 0, 0};
  std::array<int64_t, 3> output_padding{0, 0, 0};  // transposed only; enters only `out`
  bool transposed = false;
};

// PyTorch's output size of one spatial dim (floor division; a result <= 0 means "invalid"):
//   normal:     (in + pad_before + pad_after - dilation * (kernel - 1) - 1) / stride + 1
//   transposed: (in - 1) * stride - pad_before - pad_after + dilation * (kernel - 1)
//               + output_padding + 1
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                         int64_t pad_before, int64_t pad_after, bool transposed,
                         int64_t output_padding = 0);

// Builds ConvParams from per-dim lists of `dims` values (the layout of a PyTorch call) and fills
// `out` with conv_output_size. An empty output_padding means zeros.
ConvParams make_conv_params(int dims, int64_t N, int64_t C_in, int64_t C_out, int64_t groups,
                            const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                            const std::vector<int64_t>& stride,
                            const std::vector<int64_t>& dilation,
                            const std::vector<int64_t>& pad_before,
                            const std::vector<int64_t>& pad_after, bool transposed,
                            const std::vector<int64_t>& output_padding = {});

// Number of elements of the weight tensor for p (layout above).
int64_t conv_weight_numel(const ConvParams& p);

// output = conv(input, weight) + bias. Overwrites every element of output. bias may be null.
template <class T>
void convolution_forward(const T* input, const T* weight, const T* bias, T* output,
                         const ConvParams& p);

// The output mask is the set of non-null gradient pointers; only those are computed, and each
// requested buffer is overwritten (not accumulated into):
//   grad_input  (N, C_in, in...)  needs grad_output, weight
//   grad_weight (weight's shape)  needs grad_output, input
//   grad_bias   (C_out)           needs grad_output; summed in double
// input / weight may be null when no requested gradient needs them.
// Every gradient is a sum owned by one thread in a fixed order, so results are bit-identical
// from run to run and (in our tests) for any thread count.
template <class T>
void convolution_backward(const T* grad_output, const T* input, const T* weight, T* grad_input,
                          T* grad_weight, T* grad_bias, const ConvParams& p);

// The float32 convolutions of stride 1 and dilation 1 whose kernels are 3x3 (2-D) or kx3x3 with
// k <= 4 (3-D), forward and input gradient, normal and transposed, with at least 16 channels on
// each side, 24 terms per product (k x channels), 16x16 positions on each side and padding of at
// most the kernel's size - 1, run Winograd's F(4x4, 3x3) algorithm (conv_kernels_winograd.cpp; a
// 3-D kernel as a sum of its 3x3 slices): 36 products per 4x4 block of outputs instead
// of 144, with rounding a few times the direct sum's (tested within 2e-5 of the sum of |products|).
// The weight gradient sums directly. Inputs or weights that are not finite or exceed 1e12 in
// magnitude take the direct kernels, which keep the definition's Inf and NaN.
// set_conv_winograd(false) turns the path off process-wide (every convolution then sums
// directly); it returns the previous setting.
bool set_conv_winograd(bool on);
bool conv_winograd_enabled();

// The same two kernels with 16-bit operands S (BFloat16 or Float16) and float32 results: every
// product and sum in float32, outputs and gradients written in float32, so the caller rounds
// once when it stores a 16-bit tensor (a bf16 convolution) or keeps float32 (a float32
// convolution under a reduced math mode, framework/math_mode.h, whose operands were rounded to
// S). bias is float32 (a 16-bit bias widened, or a float32 one). Same output mask, same
// thread-count independence, same treatment of Inf and NaN as the float32 kernels.
template <class S>
void convolution_forward_reduced(const S* input, const S* weight, const float* bias, float* output,
                                 const ConvParams& p);
template <class S>
void convolution_backward_reduced(const S* grad_output, const S* input, const S* weight,
                                  float* grad_input, float* grad_weight, float* grad_bias,
                                  const ConvParams& p);

}  // namespace tg::kernels
