// Group normalisation kernels (forward and backward), PyTorch's native_group_norm semantics.
//
// Shape legend
//   N     = batch
//   C     = channels, split into `group` groups of D = C / group consecutive channels
//   HxW   = product of all dims after the channel dim (1 for a rank-2 input)
//   M     = D * HxW, the number of elements one (n, g) statistic is taken over
//   x, y, grad_y, grad_x : (N, C, HxW)  contiguous
//   mean, rstd           : (N, group)   rstd = 1 / sqrt(biased variance + eps)
//   gamma, beta          : (C)          either may be null (no affine transform)
//
// Maths, for one group i = (n, g) and a channel c in it:
//   x_hat = (x - mean) * rstd,            y = gamma[c] * x_hat + beta[c]
//   grad_beta[c]  = sum_{n,hw} grad_y
//   grad_gamma[c] = sum_{n,hw} grad_y * x_hat
//   grad_x = rstd * (gamma[c] * grad_y - sum_g(gamma * grad_y) / M
//                    - x_hat * sum_g(gamma * grad_y * x_hat) / M)
//
// Numerics: statistics are accumulated in double, and every reduction runs in a fixed order
// that does not depend on the number of threads, so results are bit-identical from run to run
// and for any thread count. The forward uses two passes (the mean, then the centred sum of
// squares), so an offset such as x = 1000 + N(0, 1) costs no digits; the variance is clamped
// at 0 all the same. The backward reduces grad_y * (x - mean) rather than grad_y * x, which
// avoids the cancellation PyTorch's float kernel suffers from at such offsets (for float, in
// short float partial sums flushed into double: ~2e-7 relative). Measured against a
// long-double reference at x = 1000 + N(0, 1): float32 within ~1e-7 (grad_beta 2.4e-7),
// float64 within ~1e-15 (y 2e-12: the conditioning of x - mean); PyTorch's own float32 kernel
// is off by up to 1e-4 there, 2e-2 for one-element groups.
//
// 16-bit storage (T = tg::BFloat16, tg::Float16, framework/half.h): x, gamma, beta, y, grad_y,
// grad_x, grad_gamma and grad_beta are 16-bit; the statistics mean and rstd are float32
// (opmath_t<T>: float for the 16-bit types, T itself for float and double), so the backward
// reads them unrounded. Inside, the values widen exactly to float and the kernel runs the very
// float32 algorithm (the same lanes, the same order of summation), each output rounded once to
// T: the result is the float32 kernel's on the widened inputs, rounded once.
//
// No validation here: the Tensor-level op checks group > 0, C % group == 0 and the sizes.
// Zero-size N, C or HxW are fine: an empty group gets mean 0 and rstd NaN (0/0), as in PyTorch.
#pragma once

#include <cstdint>

#include "../../framework/half.h"

namespace tg::kernels {

// Writes y (N, C, HxW), mean and rstd (N, group). gamma and beta may be null.
// T = float, double, BFloat16, Float16; mean and rstd are opmath_t<T> (float for 16-bit T).
template <class T>
void group_norm_forward(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C,
                        int64_t HxW, int64_t group, double eps, T* y, opmath_t<T>* mean,
                        opmath_t<T>* rstd);

// mean and rstd are the forward's outputs; gamma may be null (taken as 1).
// Each of grad_x (N, C, HxW), grad_gamma (C), grad_beta (C) may be null: it is then neither
// computed nor written (the output mask). Non-null outputs are overwritten, not accumulated.
// grad_gamma and grad_beta are T (for 16-bit T: summed in double and rounded to float, then to T,
// exactly as the float32 kernel's result rounded to T).
template <class T>
void group_norm_backward(const T* grad_y, const T* x, const opmath_t<T>* mean,
                         const opmath_t<T>* rstd, const T* gamma, int64_t N, int64_t C,
                         int64_t HxW, int64_t group, T* grad_x, T* grad_gamma, T* grad_beta);

}  // namespace tg::kernels
