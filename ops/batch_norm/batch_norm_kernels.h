// Batch normalisation kernels (forward and backward), PyTorch's native_batch_norm semantics.
//
// Shape legend
//   N     = batch
//   C     = channels: one statistic per channel, taken over the batch and the spatial dims
//   HxW   = product of all dims after the channel dim (1 for a rank-2 input)
//   M     = N * HxW, the number of elements one channel's statistic is taken over
//   x, y, grad_y, grad_x : (N, C, HxW)  contiguous
//   mean, invstd         : (C)          invstd = 1 / sqrt(var + eps)
//   gamma, beta          : (C)          either may be null (no affine transform)
//
// Maths, for channel c (x_hat = (x - mean) * invstd, y = gamma * x_hat + beta):
//   training: mean, var = the batch's mean and biased variance of channel c
//   eval:     mean, var = the running statistics (the caller passes mean and invstd)
//   grad_beta[c]  = sum_{n,hw} grad_y
//   grad_gamma[c] = sum_{n,hw} grad_y * x_hat
//   training: grad_x = gamma * invstd * (grad_y - sum(grad_y) / M - x_hat * sum(grad_y * x_hat) / M)
//   eval:     grad_x = gamma * invstd * grad_y          (mean and invstd are constants)
//
// Work split: each thread owns whole channels (a channel's M elements are N runs of HxW
// contiguous values), so a channel's passes run while its data is still in cache, no thread
// writes what another reads, and the result is bit-identical for any thread count.
//
// Numerics: statistics are accumulated in double over fixed lanes (ops/internal/lane_sums.h),
// two passes for the variance (the mean, then the centred squares); y is formed from x - mean
// (the mean as hi + lo parts in T), not as x * scale + shift, and the backward reduces
// grad_y * (x - mean), not grad_y * x, so an offset such as x = 1000 + N(0, 1) costs no digits
// (PyTorch's float32 x * scale + shift loses ~2e-5 of y there).
//
// T = float or double. A 16-bit tensor is widened to float32 by the op (ops/batch_norm/batch_norm.h)
// and its results rounded once. No validation here: the Tensor-level op checks the sizes.
#pragma once

#include <cstdint>

namespace tg::kernels {

// Training: writes y, the batch statistics mean[c] and invstd[c] (biased variance) and, when
// var_unbiased is not null, the unbiased variance sum / (M - 1) in double for the running
// update. M = 0 gives NaN, as in PyTorch; M = 1 gives an unbiased variance of NaN (0 / 0).
// gamma and beta may be null.
template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C, int64_t HxW,
                              double eps, T* y, T* mean, T* invstd, double* var_unbiased);

// Eval: y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c] with the given (running) mean and
// invstd. gamma and beta may be null.
template <class T>
void batch_norm_forward_eval(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, int64_t N,
                             int64_t C, int64_t HxW, T* y);

// Each of grad_x (N, C, HxW), grad_gamma (C), grad_beta (C) may be null: it is then neither
// computed nor written (the output mask). gamma may be null (taken as 1). `training` picks the
// grad_x formula above.
template <class T>
void batch_norm_backward(const T* grad_y, const T* x, const T* mean, const T* invstd, const T* gamma, int64_t N,
                         int64_t C, int64_t HxW, bool training, T* grad_x, T* grad_gamma, T* grad_beta);

}  // namespace tg::kernels
