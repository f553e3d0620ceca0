// layer_norm kernels (forward and backward), after llm.c's layernorm_forward / _backward.
//
// Shape legend (contiguous, C order):
//   R = rows (the leading dims of x), N = numel(normalized_shape), normalised together
//   x, y, g (= grad_y), dx : (R, N)
//   w, b, dw, db           : (N)     w, b may be null (no affine transform)
//   mean, rstd             : (R)     in double, also for float32
//
//   forward:  mean_r = sum x / N,  rstd_r = 1 / sqrt(var_r + eps)  (biased var, two passes),
//             xhat = (x - mean) rstd,  y = xhat w + b      (saves x, w, mean, rstd: not xhat)
//   backward: dxhat = g w
//             dx    = rstd (dxhat - mean_N(dxhat) - xhat mean_N(dxhat xhat))
//             dw    = sum_r g xhat,  db = sum_r g
//
// Statistics and row sums are accumulated in double, in an order that depends on N alone
// (ops/internal/lane_sums.h), and dw / db column by column in row order: results are the same
// bit for bit for any thread count. Each of dx, dw, db may be null (not computed). Sizes >= 0;
// no validation here (ops/layer_norm.cpp checks the tensors). The entry points run the copy of
// the active instruction set (ops/layer_norm_dispatch.cpp).
#pragma once

#include <cstdint>

namespace tg::kernels {

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, double* mean, double* rstd,
                        int64_t R, int64_t N, double eps);

template <class T>
void layer_norm_backward(const T* g, const T* x, const T* w, const double* mean,
                         const double* rstd, T* dx, T* dw, T* db, int64_t R, int64_t N);

}  // namespace tg::kernels
