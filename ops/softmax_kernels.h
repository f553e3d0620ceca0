// softmax / log_softmax and cross-entropy kernels. One copy per instruction set
// (softmax_kernels.cpp); the entry points below run the active one (softmax_dispatch.cpp).
//
// Shape legend (contiguous, C order):
//   softmax:       x, y, g (= grad_y), dx : (outer, D, inner), D the softmax dim; a lane is
//                  the D elements inner apart, each lane is normalised on its own
//   cross-entropy: logp, dx : (N, C, K), K = product of the trailing dims (1 for (N, C));
//                  target, nll, smooth : (N, K); a lane is one (n, k), its C classes K apart
//
//   softmax:      y = e^(x - max) / sum_D e^(x - max)     dx = y (g - sum_D g y)
//   log_softmax:  y = (x - max) - log sum_D e^(x - max)    dx = g - e^y sum_D g
//   cross-entropy (logp = log_softmax over C, see ops/loss_cross_entropy.cpp):
//     nll_l = -logp[t_l],  smooth_l = -sum_C logp           (lanes with t_l == ignore_index: 0)
//     dx_c  = a_l (p_c - [c == t_l]) + b_l (C p_c - 1),  p = e^logp,
//     a_l = g_l nll_scale, b_l = g_l smooth_scale  (g_l = g[l] if per_lane, else g[0];
//     ignored lanes get dx = 0)
//
// Sums are accumulated in double; exp is ops/internal/vec_math.h's vec_exp. A lane's result
// does not depend on the thread count. Sizes >= 0, targets already checked to be in [0, C)
// or ignore_index: no validation here.
#pragma once

#include <cstdint>

namespace tg::kernels {

template <class T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log);
template <class T>
void softmax_backward(const T* g, const T* y, T* dx, int64_t outer, int64_t D, int64_t inner,
                      bool log);

// Fills nll and smooth (N, K); smooth only when smoothing (the label smoothing is > 0).
template <class T>
void cross_entropy_lane_losses(const T* logp, const int64_t* target, int64_t N, int64_t C,
                               int64_t K, int64_t ignore_index, bool smoothing, double* nll,
                               double* smooth);
template <class T>
void cross_entropy_backward(const T* logp, const int64_t* target, const T* g, bool per_lane,
                            int64_t N, int64_t C, int64_t K, int64_t ignore_index,
                            double nll_scale, double smooth_scale, T* dx);

}  // namespace tg::kernels
