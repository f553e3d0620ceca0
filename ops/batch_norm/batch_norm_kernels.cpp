// Batch normalisation kernels; the shape legend and the maths are in batch_norm_kernels.h.
// One copy of this file per instruction set (ops/internal/isa_dispatch.h; batch_norm_dispatch.cpp
// holds the public entry points). The lanes keep one order of summation on every path; only FMA
// contraction (AVX2 and AVX-512 copies) moves results by an ulp.
#include "batch_norm_kernels.h"

#include <cmath>
#include <limits>

#include "../../framework/parallel.h"
#include "../internal/lane_sums.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// Each thread takes whole channels; below the grain one thread does all (a region costs
// microseconds).
bool run_parallel(int64_t N, int64_t C, int64_t HxW) { return N * C * HxW >= kParallelGrain; }

// sum over n of f applied to the run of channel c in item n: f(run pointer offset) -> double.
template <class F>
[[gnu::always_inline]] inline double over_runs(int64_t N, int64_t C, int64_t HxW, int64_t c, F f) {
  double s = 0.0;
  for (int64_t n = 0; n < N; ++n) s += f((n * C + c) * HxW);
  return s;
}

// The mean as an unevaluated sum hi + lo of two T (hi = T(m), lo = T(m - hi)): x - hi is exact
// for x near the mean, so a large offset (x = 1000 + N(0, 1)) costs no digits in float.
template <class T>
struct SplitMean {
  T hi, lo;
  explicit SplitMean(double m) : hi(static_cast<T>(m)), lo(static_cast<T>(m - static_cast<double>(hi))) {}
};

// y = (x - mean) * scale + shift over channel c's runs: scale = invstd * gamma, shift = beta.
template <class T>
void normalize_channel(const T* x, int64_t N, int64_t C, int64_t HxW, int64_t c, double m, double scale_d,
                       double shift_d, T* y) {
  const SplitMean<T> mean(m);
  const T scale = static_cast<T>(scale_d), shift = static_cast<T>(shift_d);
  for (int64_t n = 0; n < N; ++n) {
    const T* xp = x + (n * C + c) * HxW;
    T* yp = y + (n * C + c) * HxW;
#pragma omp simd
    for (int64_t k = 0; k < HxW; ++k) yp[k] = ((xp[k] - mean.hi) - mean.lo) * scale + shift;
  }
}

template <class T>
double at_or(const T* p, int64_t c, double fallback) {
  return p ? static_cast<double>(p[c]) : fallback;
}

}  // namespace

template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C, int64_t HxW,
                              double eps, T* y, T* mean, T* invstd, double* var_unbiased) {
  const int64_t M = N * HxW;
  const double nan = std::numeric_limits<double>::quiet_NaN();
#pragma omp parallel for schedule(static) if (run_parallel(N, C, HxW))
  for (int64_t c = 0; c < C; ++c) {
    const double s = over_runs(N, C, HxW, c, [&](int64_t o) {
      const T* xp = x + o;
      return lanes::lane_sum(HxW, [=](auto at) { return at(xp); });
    });
    const double m = M > 0 ? s / M : nan;
    const double s2 = over_runs(N, C, HxW, c, [&](int64_t o) {
      const T* xp = x + o;
      return lanes::lane_sum(HxW, [=](auto at) {
        auto d = at(xp) - m;
        return d * d;
      });
    });
    // PyTorch's InvStd: a constant channel with eps = 0 normalises to 0 (the bias), not 0 * inf
    const double r = M == 0 ? nan : s2 == 0 && eps == 0 ? 0.0 : 1.0 / std::sqrt(s2 / M + eps);
    mean[c] = static_cast<T>(m);
    invstd[c] = static_cast<T>(r);
    if (var_unbiased) var_unbiased[c] = M > 1 ? s2 / (M - 1) : nan;
    // Normalised while the channel is still in cache.
    normalize_channel(x, N, C, HxW, c, m, r * at_or(gamma, c, 1.0), at_or(beta, c, 0.0), y);
  }
}

template <class T>
void batch_norm_forward_eval(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, int64_t N,
                             int64_t C, int64_t HxW, T* y) {
#pragma omp parallel for schedule(static) if (run_parallel(N, C, HxW))
  for (int64_t c = 0; c < C; ++c)
    normalize_channel(x, N, C, HxW, c, static_cast<double>(mean[c]),
                      static_cast<double>(invstd[c]) * at_or(gamma, c, 1.0), at_or(beta, c, 0.0), y);
}

template <class T>
void batch_norm_backward(const T* grad_y, const T* x, const T* mean, const T* invstd, const T* gamma, int64_t N,
                         int64_t C, int64_t HxW, bool training, T* grad_x, T* grad_gamma, T* grad_beta) {
  const int64_t M = N * HxW;
  // The sums are needed for grad_gamma, grad_beta and the training grad_x; eval's grad_x alone needs none.
  const bool need_sums = grad_gamma || grad_beta || (grad_x && training);
#pragma omp parallel for schedule(static) if (run_parallel(N, C, HxW))
  for (int64_t c = 0; c < C; ++c) {
    const double m = static_cast<double>(mean[c]), r = static_cast<double>(invstd[c]);
    double sum_dy = 0.0, dot = 0.0;  // sum grad_y, sum grad_y * (x - mean)
    if (need_sums) {
      for (int64_t n = 0; n < N; ++n) {
        const T* gp = grad_y + (n * C + c) * HxW;
        const T* xp = x + (n * C + c) * HxW;
        const auto s = lanes::lane_sums<2>(HxW, [=](auto at, auto* acc) {
          auto g = at(gp);
          acc[0] += g;
          acc[1] += g * (at(xp) - m);
        });
        sum_dy += s[0];
        dot += s[1];
      }
    }
    if (grad_beta) grad_beta[c] = static_cast<T>(sum_dy);
    if (grad_gamma) grad_gamma[c] = static_cast<T>(dot * r);
    if (!grad_x) continue;
    const T a = static_cast<T>(r * at_or(gamma, c, 1.0));  // grad_x = a * (grad_y - mean_dy - (x - mean) * k)
    const T mean_dy = static_cast<T>(training && M > 0 ? sum_dy / M : 0.0);
    const T k = static_cast<T>(training && M > 0 ? dot * r * r / M : 0.0);
    const SplitMean<T> mt(m);
    for (int64_t n = 0; n < N; ++n) {
      const T* gp = grad_y + (n * C + c) * HxW;
      const T* xp = x + (n * C + c) * HxW;
      T* dxp = grad_x + (n * C + c) * HxW;
      if (training) {
#pragma omp simd
        for (int64_t j = 0; j < HxW; ++j) dxp[j] = (gp[j] - mean_dy - ((xp[j] - mt.hi) - mt.lo) * k) * a;
      } else {
#pragma omp simd
        for (int64_t j = 0; j < HxW; ++j) dxp[j] = gp[j] * a;
      }
    }
  }
}

#define TG_INSTANTIATE(T)                                                                                      \
  template void batch_norm_forward_train<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, double, T*, \
                                            T*, T*, double*);                                                  \
  template void batch_norm_forward_eval<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,   \
                                           int64_t, T*);                                                       \
  template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,      \
                                       int64_t, bool, T*, T*, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
