// layer_norm kernels; the shape legend and the maths are in layer_norm_kernels.h. One copy per
// instruction set (ops/internal/isa_dispatch.h).
//
// Work split: rows, one thread per block of whole rows (a row of 768 floats is 3 KB: the
// passes over it after the first read it from L1). dw / db: blocks of kBlock columns, each
// walking all rows, so the inner loop runs along a row.
#include "layer_norm_kernels.h"

#include <algorithm>
#include <cmath>

#include "../framework/parallel.h"
#include "internal/lane_sums.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

using lanes::lane_sum;
using lanes::lane_sums;

// x - m in T for a mean m in double: m as a head in T plus the tail the head misses, so that
// float32 keeps what the double mean knows (x - head is exact when x is within a factor 2 of
// it). The elementwise passes then run in T: converting every element to double and back cost
// more than the rest of the kernel.
template <class T>
struct Centre {
  T hi, lo;
  explicit Centre(double m) : hi(static_cast<T>(m)), lo(static_cast<T>(m - static_cast<T>(m))) {}
  T operator()(T x) const { return (x - hi) - lo; }
};

// One row of the forward: statistics in double (two passes, the second centred), then y in T.
template <bool kWeight, bool kBias, class T>
void forward_row(const T* x, const T* w, const T* b, T* y, int64_t N, double eps, double* mean,
                 double* rstd) {
  const double m = lane_sum(N, [=](auto at) { return at(x); }) / N;
  const double v = lane_sum(N, [=](auto at) {
    const auto d = at(x) - m;
    return d * d;
  }) / N;  // biased, as layer_norm
  const double s = 1.0 / std::sqrt(v + eps);
  const Centre<T> centre(m);
  const T st = static_cast<T>(s);
  for (int64_t i = 0; i < N; ++i) {
    T o = centre(x[i]) * st;
    if constexpr (kWeight) o *= w[i];
    if constexpr (kBias) o += b[i];
    y[i] = o;
  }
  *mean = m;
  *rstd = s;
}

// dx of one row: the two row sums in double in one pass, then
//   dx = rstd (dxhat - mean(dxhat)) - (x - mean) rstd^2 mean(dxhat xhat)
// in T, with the per-row factors rounded once. dxhat - mean(dxhat) comes first: it is exact
// where the two nearly cancel (a row of one element: 0), whether or not the compiler fuses the
// products with the sum that follows.
template <bool kWeight, class T>
void backward_row(const T* g, const T* x, const T* w, double m, double s, T* dx, int64_t N) {
  const auto sums = lane_sums<2>(N, [=](auto at, auto* acc) {
    auto dxhat = at(g);
    if constexpr (kWeight) dxhat *= at(w);
    acc[0] += dxhat;
    acc[1] += dxhat * (at(x) - m);
  });
  const T mean_dxhat = static_cast<T>(sums[0] / N);
  const double mean_dxhat_xhat = sums[1] * s / N;
  const Centre<T> centre(m);
  const T st = static_cast<T>(s), c_centred = static_cast<T>(-s * s * mean_dxhat_xhat);
  for (int64_t i = 0; i < N; ++i) {
    T dxhat = g[i];
    if constexpr (kWeight) dxhat *= w[i];
    dx[i] = st * (dxhat - mean_dxhat) + c_centred * centre(x[i]);
  }
}

template <bool kWeight, bool kBias, class T>
void forward_rows(const T* x, const T* w, const T* b, T* y, double* mean, double* rstd, int64_t R,
                  int64_t N, double eps) {
#pragma omp parallel for schedule(static) if (R > 1 && R * N >= kParallelGrain)
  for (int64_t r = 0; r < R; ++r)
    forward_row<kWeight, kBias>(x + r * N, w, b, y + r * N, N, eps, mean + r, rstd + r);
}

template <bool kWeight, class T>
void backward_rows(const T* g, const T* x, const T* w, const double* mean, const double* rstd,
                   T* dx, int64_t R, int64_t N) {
#pragma omp parallel for schedule(static) if (R > 1 && R * N >= kParallelGrain)
  for (int64_t r = 0; r < R; ++r)
    backward_row<kWeight>(g + r * N, x + r * N, w, mean[r], rstd[r], dx + r * N, N);
}

// dw and db: column sums over the rows, each column in row order (deterministic, no atomics).
template <class T>
void affine_grads(const T* g, const T* x, const double* mean, const double* rstd, T* dw, T* db,
                  int64_t R, int64_t N) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = ceil_div(N, kBlock);
#pragma omp parallel for schedule(static) if (blocks > 1 && R * N >= kParallelGrain)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, n = std::min(kBlock, N - i0);
    double sw[kBlock] = {}, sb[kBlock] = {};
    for (int64_t r = 0; r < R; ++r) {
      const T* gr = g + r * N + i0;
      const T* xr = x + r * N + i0;
      const double m = mean[r], s = rstd[r];
      for (int64_t i = 0; i < n; ++i) {
        sw[i] += static_cast<double>(gr[i]) * ((xr[i] - m) * s);
        sb[i] += gr[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (dw) dw[i0 + i] = static_cast<T>(sw[i]);
      if (db) db[i0 + i] = static_cast<T>(sb[i]);
    }
  }
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, double* mean, double* rstd,
                        int64_t R, int64_t N, double eps) {
  if (w && b) forward_rows<true, true>(x, w, b, y, mean, rstd, R, N, eps);
  else if (w) forward_rows<true, false>(x, w, b, y, mean, rstd, R, N, eps);
  else if (b) forward_rows<false, true>(x, w, b, y, mean, rstd, R, N, eps);
  else forward_rows<false, false>(x, w, b, y, mean, rstd, R, N, eps);
}

template <class T>
void layer_norm_backward(const T* g, const T* x, const T* w, const double* mean,
                         const double* rstd, T* dx, T* dw, T* db, int64_t R, int64_t N) {
  if (dx) {
    if (w) backward_rows<true>(g, x, w, mean, rstd, dx, R, N);
    else backward_rows<false>(g, x, w, mean, rstd, dx, R, N);
  }
  if (dw || db) affine_grads(g, x, mean, rstd, dw, db, R, N);
}

#define TG_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T*, double*, double*,    \
                                      int64_t, int64_t, double);                             \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const double*,          \
                                       const double*, T*, T*, T*, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
