// Reduction kernels; the shape legend and the maths are in reduce_kernels.h. One copy per
// instruction set (ops/internal/isa_dispatch.h).
//
// Work split: rows. sum_rows also cuts rows longer than kChunk into fixed chunks, so that a
// reduction of everything (outer = 1) still runs on every thread: each chunk's sum is taken on
// its own and the chunks of a row are added in order, whatever the thread count.
#include "reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../framework/parallel.h"
#include "internal/lane_sums.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

using lanes::lane_sum;

constexpr int64_t kChunk = 16384;

template <class T>
double row_sum(const T* x, int64_t n) {
  return lane_sum(n, [=](auto at) { return at(x); });
}

// Calls fn(r, mean) for every row of x, in parallel when the whole is large enough.
template <class T, class Fn>
void for_each_row_mean(const T* x, int64_t outer, int64_t R, Fn fn) {
#pragma omp parallel for schedule(static) if (outer > 1 && outer * R >= kParallelGrain)
  for (int64_t r = 0; r < outer; ++r) fn(r, row_sum(x + r * R, R) / static_cast<double>(R));
}

// The index of the first extreme of row[0..R), R >= 1: the first NaN if there is one, else the
// first element equal to the max (min). A reduction that vectorises finds the extreme of the
// non-NaN elements, and z = sum (x - x), which is NaN iff the row holds a NaN or an infinity;
// then a search that stops early finds the index. Rows with z = NaN take the scalar walk.
template <class T>
int64_t first_extreme(const T* row, int64_t R, bool is_max) {
  using A = opmath_t<T>;  // 16-bit values compare in float
  A m = row[0], z = 0;
  if (is_max) {
#pragma omp simd reduction(max : m) reduction(+ : z)
    for (int64_t i = 0; i < R; ++i) {
      const A v = row[i];
      m = v > m ? v : m;
      z += v - v;
    }
  } else {
#pragma omp simd reduction(min : m) reduction(+ : z)
    for (int64_t i = 0; i < R; ++i) {
      const A v = row[i];
      m = v < m ? v : m;
      z += v - v;
    }
  }
  if (z == z) {  // no NaN, no infinity: m is the extreme
    int64_t i = 0;
    while (row[i] != m) ++i;
    return i;
  }
  auto is_nan = [](T v) { return v != v; };
  int64_t best = 0;
  for (int64_t i = 1; i < R && !is_nan(row[best]); ++i)
    if (is_nan(row[i]) || (is_max ? row[i] > row[best] : row[i] < row[best])) best = i;
  return best;
}

}  // namespace

template <class T>
void sum_rows(const T* x, T* out, int64_t outer, int64_t R, double scale) {
  const int64_t chunks = std::max<int64_t>(ceil_div(R, kChunk), 1);
  if (chunks == 1) {
#pragma omp parallel for schedule(static) if (outer > 1 && outer * R >= kParallelGrain)
    for (int64_t r = 0; r < outer; ++r) out[r] = static_cast<T>(row_sum(x + r * R, R) * scale);
    return;
  }
  std::vector<double> part(outer * chunks);
  const int64_t tasks = outer * chunks;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r = t / chunks, c0 = (t % chunks) * kChunk;
    part[t] = row_sum(x + r * R + c0, std::min(kChunk, R - c0));
  }
  for (int64_t r = 0; r < outer; ++r) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += part[r * chunks + c];
    out[r] = static_cast<T>(s * scale);
  }
}

template <class T>
void var_rows(const T* x, T* out, int64_t outer, int64_t R, double correction) {
  const double denom = std::max(static_cast<double>(R) - correction, 0.0);
  for_each_row_mean(x, outer, R, [=](int64_t r, double m) {
    const T* row = x + r * R;
    const double s = lane_sum(R, [=](auto at) {
      const auto d = at(row) - m;
      return d * d;
    });
    out[r] = static_cast<T>(s / denom);
  });
}

template <class T>
void var_backward(const T* g, const T* x, T* dx, int64_t outer, int64_t R, double correction) {
  const double denom = static_cast<double>(R) - correction;
  for_each_row_mean(x, outer, R, [=](int64_t r, double m) {
    const double s = 2.0 * g[r] / denom;
    const T* row = x + r * R;
    T* d = dx + r * R;
    for (int64_t i = 0; i < R; ++i) d[i] = static_cast<T>(s * (row[i] - m));
  });
}

template <class T>
void row_extremes(const T* x, int64_t outer, int64_t R, bool is_max, T* values, int64_t* indices) {
#pragma omp parallel for schedule(static) if (outer > 1 && outer * R >= kParallelGrain)
  for (int64_t r = 0; r < outer; ++r) {
    const int64_t best = first_extreme(x + r * R, R, is_max);
    if (values) values[r] = x[r * R + best];
    indices[r] = best;
  }
}

template <class T>
void extreme_weights(const T* x, int64_t n, T best, T total, T* w) {
  const bool nan_best = std::isnan(best);
  auto hit = [=](T v) { return v == best || (nan_best && std::isnan(v)); };
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) k += hit(x[i]);
  const T share = total / static_cast<T>(k);
  for (int64_t i = 0; i < n; ++i) w[i] = hit(x[i]) ? share : T(0);
}

#define TG_INSTANTIATE(T)                                                                \
  template void sum_rows<T>(const T*, T*, int64_t, int64_t, double);                     \
  template void var_rows<T>(const T*, T*, int64_t, int64_t, double);                     \
  template void var_backward<T>(const T*, const T*, T*, int64_t, int64_t, double);       \
  template void extreme_weights<T>(const T*, int64_t, T, T, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
template void row_extremes<float>(const float*, int64_t, int64_t, bool, float*, int64_t*);
template void row_extremes<double>(const double*, int64_t, int64_t, bool, double*, int64_t*);
template void row_extremes<int64_t>(const int64_t*, int64_t, int64_t, bool, int64_t*, int64_t*);
template void row_extremes<int32_t>(const int32_t*, int64_t, int64_t, bool, int32_t*, int64_t*);
template void row_extremes<BFloat16>(const BFloat16*, int64_t, int64_t, bool, BFloat16*, int64_t*);
template void row_extremes<Float16>(const Float16*, int64_t, int64_t, bool, Float16*, int64_t*);

}  // namespace tg::kernels::TG_ISA_NS
