// Reduction kernels: sum / mean, var, min / max / argmin / argmax. One copy per instruction set
// (reduce_kernels.cpp); the entry points below run the active one (reduce_dispatch.cpp).
//
// Shape legend (contiguous, C order): the op moves the reduced dims last, so that
//   x, dx : (outer, R)     each row reduced to one value
//   out, g, values, indices : (outer)
//
//   sum_rows:        out = scale sum_R x            (scale 1 for sum, 1 / R for mean)
//   var_rows:        mean = sum_R x / R,  out = sum_R (x - mean)^2 / (R - correction)
//   var_backward:    dx = 2 g (x - mean) / (R - correction)        (the mean recomputed)
//   row_extremes:    the row's max (or min) and the index of its first occurrence; a NaN is
//                    the extreme (as in PyTorch); values may be null
//   extreme_weights: over all n elements of x, w = total / k where x equals `best` (a NaN
//                    equals a NaN best), 0 elsewhere; k = how many equal it (max_all's gradient)
//
// Sums are accumulated in double, in an order that depends on the sizes alone
// (ops/internal/lane_sums.h; sum_rows adds fixed chunks of a long row in chunk order), so
// results are the same bit for bit for any thread count. R - correction <= 0 gives inf or NaN,
// as in PyTorch. Sizes >= 0 (row_extremes: R >= 1); no validation here.
#pragma once

#include <cstdint>

#include "../framework/half.h"

namespace tg::kernels {

template <class T>
void sum_rows(const T* x, T* out, int64_t outer, int64_t R, double scale);

template <class T>
void var_rows(const T* x, T* out, int64_t outer, int64_t R, double correction);
template <class T>
void var_backward(const T* g, const T* x, T* dx, int64_t outer, int64_t R, double correction);

template <class T>  // T: float, double or int64_t
void row_extremes(const T* x, int64_t outer, int64_t R, bool is_max, T* values, int64_t* indices);
template <class T>
void extreme_weights(const T* x, int64_t n, T best, T total, T* w);

}  // namespace tg::kernels
