// softmax / log_softmax and cross-entropy kernels; the shape legend and the maths are in
// softmax_kernels.h. One copy per instruction set (ops/internal/isa_dispatch.h).
//
// Two walks of a softmax:
//   inner == 1   lane by lane: each lane is a contiguous row, its sums over fixed double lanes
//                (ops/internal/lane_sums.h)
//   inner > 1    a block of up to kCols lanes side by side, walked along D: every step reads a
//                contiguous piece of kCols elements (lane by lane would stride through memory)
//                and keeps one running max / sum per lane, summed in D order.
// Either way a lane's result depends on its values alone, not on the thread count.
#include "softmax_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../framework/parallel.h"
#include "internal/lane_sums.h"
#include "internal/vec_math.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

using lanes::lane_sum;

constexpr int64_t kCols = 256;

// The maximum that is subtracted: NaNs skipped (they propagate through the exp), and 0 for a
// lane of -inf only (avoids (-inf) - (-inf)).
template <class T>
T finite_shift(T m) {
  return std::isinf(m) && m < 0 ? T(0) : m;
}

template <class T>
void forward_row(const T* x, T* y, int64_t D, bool log) {
  const T m = finite_shift(max_of(D, [x](int64_t d) { return x[d]; }));
  // exp in T (one call per element, kept in y), the sum in double.
  for (int64_t d = 0; d < D; ++d) y[d] = vec_exp(x[d] - m);
  const double s = lane_sum(D, [=](auto at) { return at(y); });
  if (log) {
    // (x - m) - log(s), not x - (m + log s): with large logits m + log s would round away
    // the small log-probabilities (catastrophic cancellation in float32).
    const T log_s = static_cast<T>(std::log(s));
    for (int64_t d = 0; d < D; ++d) y[d] = (x[d] - m) - log_s;
  } else {
    const T inv = static_cast<T>(1.0 / s);
    for (int64_t d = 0; d < D; ++d) y[d] *= inv;
  }
}

template <class T>
void backward_row(const T* g, const T* y, T* dx, int64_t D, bool log) {
  if (log) {
    const double s = lane_sum(D, [=](auto at) { return at(g); });
    // e^y into dx first: a loop that mixes the float exp with double arithmetic does not vectorise.
    for (int64_t d = 0; d < D; ++d) dx[d] = vec_exp(y[d]);
    for (int64_t d = 0; d < D; ++d) dx[d] = static_cast<T>(g[d] - dx[d] * s);
  } else {
    const double s = lane_sum(D, [=](auto at) { return at(g) * at(y); });
    for (int64_t d = 0; d < D; ++d) dx[d] = static_cast<T>(y[d] * (g[d] - s));
  }
}

// n <= kCols lanes side by side, element (d, i) at [d * inner + i].
template <class T>
void forward_cols(const T* x, T* y, int64_t D, int64_t inner, int64_t n, bool log) {
  T m[kCols];
  double s[kCols];
  std::fill(m, m + n, -std::numeric_limits<T>::infinity());
  std::fill(s, s + n, 0.0);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = 0; i < n; ++i) m[i] = std::max(m[i], x[d * inner + i]);
  for (int64_t i = 0; i < n; ++i) m[i] = finite_shift(m[i]);
  for (int64_t d = 0; d < D; ++d) {
    const T* xd = x + d * inner;
    T* yd = y + d * inner;
    for (int64_t i = 0; i < n; ++i) yd[i] = vec_exp(xd[i] - m[i]);
    for (int64_t i = 0; i < n; ++i) s[i] += yd[i];
  }
  T f[kCols];  // log s, or 1 / s
  for (int64_t i = 0; i < n; ++i) f[i] = static_cast<T>(log ? std::log(s[i]) : 1.0 / s[i]);
  for (int64_t d = 0; d < D; ++d) {
    const T* xd = x + d * inner;
    T* yd = y + d * inner;
    if (log)
      for (int64_t i = 0; i < n; ++i) yd[i] = (xd[i] - m[i]) - f[i];
    else
      for (int64_t i = 0; i < n; ++i) yd[i] *= f[i];
  }
}

template <class T>
void backward_cols(const T* g, const T* y, T* dx, int64_t D, int64_t inner, int64_t n, bool log) {
  double s[kCols];
  std::fill(s, s + n, 0.0);
  for (int64_t d = 0; d < D; ++d) {
    const T* gd = g + d * inner;
    const T* yd = y + d * inner;
    if (log)
      for (int64_t i = 0; i < n; ++i) s[i] += gd[i];
    else
      for (int64_t i = 0; i < n; ++i) s[i] += static_cast<double>(gd[i]) * yd[i];
  }
  for (int64_t d = 0; d < D; ++d) {
    const T* gd = g + d * inner;
    const T* yd = y + d * inner;
    T* dd = dx + d * inner;
    if (log) {
      for (int64_t i = 0; i < n; ++i) dd[i] = vec_exp(yd[i]);
      for (int64_t i = 0; i < n; ++i) dd[i] = static_cast<T>(gd[i] - dd[i] * s[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dd[i] = static_cast<T>(yd[i] * (gd[i] - s[i]));
    }
  }
}

// Calls fn(offset, n) for every task: a row (inner == 1) or a block of columns, in parallel
// when the whole is large enough.
template <class Fn>
void for_each_task(int64_t outer, int64_t D, int64_t inner, Fn fn) {
  const int64_t blocks = ceil_div(inner, kCols);
  const int64_t tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (tasks > 1 && tasks * D * std::min(inner, kCols) >= kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / blocks, i0 = (t % blocks) * kCols;
    fn(o * D * inner + i0, std::min(kCols, inner - i0));
  }
}

// One cross-entropy lane's gradient (classes `stride` apart); inlined with a literal stride 1
// for (N, C) logits, so that its loops are contiguous and vectorise.
template <class T>
[[gnu::always_inline]] inline void cross_entropy_lane_backward(const T* logp, T* dx, int64_t C,
                                                               int64_t stride, int64_t t,
                                                               double a, double b) {
  auto d_of = [=](double p, double onehot) {
    return static_cast<T>(a * (p - onehot) + b * (static_cast<double>(C) * p - 1.0));
  };
  // p = e^logp in T into dx first (a loop mixing the float exp with double arithmetic does not
  // vectorise), then every class as if it were not the target, then the target.
  for (int64_t c = 0; c < C; ++c) dx[c * stride] = vec_exp(logp[c * stride]);
  for (int64_t c = 0; c < C; ++c) dx[c * stride] = d_of(dx[c * stride], 0.0);
  dx[t * stride] = d_of(vec_exp(logp[t * stride]), 1.0);
}

}  // namespace

template <class T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  for_each_task(outer, D, inner, [=](int64_t off, int64_t n) {
    if (inner == 1) forward_row(x + off, y + off, D, log);
    else forward_cols(x + off, y + off, D, inner, n, log);
  });
}

template <class T>
void softmax_backward(const T* g, const T* y, T* dx, int64_t outer, int64_t D, int64_t inner,
                      bool log) {
  for_each_task(outer, D, inner, [=](int64_t off, int64_t n) {
    if (inner == 1) backward_row(g + off, y + off, dx + off, D, log);
    else backward_cols(g + off, y + off, dx + off, D, inner, n, log);
  });
}

template <class T>
void cross_entropy_lane_losses(const T* logp, const int64_t* target, int64_t N, int64_t C,
                               int64_t K, int64_t ignore_index, bool smoothing, double* nll,
                               double* smooth) {
  const int64_t lanes = N * K;
#pragma omp parallel for schedule(static) if (lanes > 1 && lanes * C >= kParallelGrain)
  for (int64_t l = 0; l < lanes; ++l) {
    nll[l] = 0;
    smooth[l] = 0;
    if (target[l] == ignore_index) continue;
    const T* ll = logp + (l / K) * C * K + l % K;
    nll[l] = -static_cast<double>(ll[target[l] * K]);
    if (!smoothing) continue;
    double s = 0;
    if (K == 1) s = lane_sum(C, [=](auto at) { return at(ll); });
    else
      for (int64_t c = 0; c < C; ++c) s += ll[c * K];
    smooth[l] = -s;
  }
}

template <class T>
void cross_entropy_backward(const T* logp, const int64_t* target, const T* g, bool per_lane,
                            int64_t N, int64_t C, int64_t K, int64_t ignore_index,
                            double nll_scale, double smooth_scale, T* dx) {
  const int64_t lanes = N * K;
#pragma omp parallel for schedule(static) if (lanes > 1 && lanes * C >= kParallelGrain)
  for (int64_t l = 0; l < lanes; ++l) {
    const int64_t base = (l / K) * C * K + l % K;
    const int64_t t = target[l];
    if (t == ignore_index) {
      for (int64_t c = 0; c < C; ++c) dx[base + c * K] = T(0);
      continue;
    }
    const double gl = per_lane ? g[l] : g[0];
    const double a = gl * nll_scale, b = gl * smooth_scale;
    if (K == 1) cross_entropy_lane_backward(logp + base, dx + base, C, 1, t, a, b);
    else cross_entropy_lane_backward(logp + base, dx + base, C, K, t, a, b);
  }
}

#define TG_INSTANTIATE(T)                                                                     \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool);            \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, bool); \
  template void cross_entropy_lane_losses<T>(const T*, const int64_t*, int64_t, int64_t,      \
                                             int64_t, int64_t, bool, double*, double*);       \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const T*, bool, int64_t,  \
                                          int64_t, int64_t, int64_t, double, double, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
