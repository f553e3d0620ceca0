// Pooling kernels (forward and backward): 2-D max and average, 1/2/3-D adaptive average, PyTorch's
// CPU semantics (aten/src/ATen/native/cpu/MaxPoolKernel.cpp, AvgPoolKernel.cpp,
// AdaptiveAvgPoolKernel.cpp in 1.13), NCHW contiguous.
//
// Shape legend
//   NC     = N * C (or C for an unbatched input), the number of independent planes
//   H, W   = input height and width;  Ho, Wo = output height and width
//   x, grad_x : (NC, H, W)      y, grad_y, indices : (NC, Ho, Wo)
//
// Windows. Output (oh, ow) reads rows oh * sH - padH + i * dH for i in [0, kH) (and the same
// along W); positions outside [0, H) are padding and never read.
//   max:      y = the largest value in the window; a NaN beats everything (aten's test is
//             `v > max || isnan(v)`, so the LAST NaN of the window is the one kept); of equal
//             maxima the FIRST in row-major order wins. indices holds its plane-local flat
//             position h * W + w. A window with no position inside the input (only possible
//             with a dilation larger than the input) gives -inf and index -1, which backward
//             skips (aten leaves a garbage index there).
//   average:  no dilation. The window is clipped to the padded input [-pad, H + pad) to count
//             pool_size (count_include_pad), then to [0, H) to sum; the sum is divided by
//             divisor_override if given (!= 0), else by pool_size (count_include_pad) or by
//             the number of positions inside the input.
//   adaptive: output oh reads rows [floor(oh * H / Ho), ceil((oh + 1) * H / Ho)) (and the same
//             along D and W); the mean of its window.
// Float32 window sums are accumulated in double (house rule; aten sums in float, so results
// can differ from PyTorch's by an ulp).
//
// Backward: max scatters grad_y to the saved indices; average spreads grad_y / divisor over
// the window it read. Double backward: max gathers at the indices (max_pool2d_gather); the
// average ones are linear in grad_y, and their adjoint is the forward. Each thread owns whole
// planes of grad_x and walks its outputs in order: no atomics, the same bits for any thread
// count.
//
// No validation here: the Tensor-level ops (ops/pool/pool.cpp) check ranks, sizes and parameters
// (and the indices a user passes to the max backward).
#pragma once

#include <cstdint>

namespace tg::kernels {

struct Pool2dParams {
  int64_t NC = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, padH = 0, padW = 0, dH = 1, dW = 1;
};

// aten's pooling_output_shape: floor((in + 2 pad - dilation (k - 1) - 1 [+ stride - 1 in ceil
// mode]) / stride) + 1, rounding towards -inf; in ceil mode the last window must start inside
// the input or the left padding, else it is dropped. May be <= 0 (the caller reports it).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

// Overwrites y and indices (NC, Ho, Wo).
template <class T>
void max_pool2d_forward(const T* x, T* y, int64_t* indices, const Pool2dParams& p);

// Overwrites grad_x (NC, H, W): grad_x[plane][indices[o]] += grad_y[o], indices < 0 skipped.
template <class T>
void max_pool2d_backward(const T* grad_y, const int64_t* indices, T* grad_x, const Pool2dParams& p);

// The adjoint of max_pool2d_backward (its double backward): overwrites y (NC, Ho, Wo) with
// y[o] = x[plane][indices[o]], 0 where indices[o] < 0. Each output read independently: the
// same bits for any thread count.
template <class T>
void max_pool2d_gather(const T* x, const int64_t* indices, T* y, const Pool2dParams& p);

// divisor_override: 0 means none. p.dH, p.dW must be 1.
template <class T>
void avg_pool2d_forward(const T* x, T* y, const Pool2dParams& p, bool count_include_pad, int64_t divisor_override);

// Overwrites grad_x (NC, H, W).
template <class T>
void avg_pool2d_backward(const T* grad_y, T* grad_x, const Pool2dParams& p, bool count_include_pad,
                         int64_t divisor_override);

// Adaptive average pooling, one kernel for 1-D, 2-D and 3-D: x (NC, D, H, W) -> y (NC, Do, Ho,
// Wo); 2-D passes D = Do = 1, 1-D also H = Ho = 1.
struct AdaptivePoolParams {
  int64_t NC = 0, D = 1, H = 1, W = 1, Do = 1, Ho = 1, Wo = 1;
};

template <class T>
void adaptive_avg_pool3d_forward(const T* x, T* y, const AdaptivePoolParams& p);

// Overwrites grad_x (NC, D, H, W).
template <class T>
void adaptive_avg_pool3d_backward(const T* grad_y, T* grad_x, const AdaptivePoolParams& p);

}  // namespace tg::kernels
