// The softmax and cross-entropy kernels' entry points (softmax_kernels.h): each forwards to the
// copy of softmax_kernels.cpp compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "softmax_kernels.h"

#include "internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void softmax_forward(const T*, T*, int64_t, int64_t, int64_t, bool);
    template <class T>
    void softmax_backward(const T*, const T*, T*, int64_t, int64_t, int64_t, bool);
    template <class T>
    void cross_entropy_lane_losses(const T*, const int64_t*, int64_t, int64_t, int64_t, int64_t,
                                   bool, double*, double*);
    template <class T>
    void cross_entropy_backward(const T*, const int64_t*, const T*, bool, int64_t, int64_t,
                                int64_t, int64_t, double, double, T*);)

template <class T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  TG_ISA_DISPATCH(softmax_forward<T>)(x, y, outer, D, inner, log);
}

template <class T>
void softmax_backward(const T* g, const T* y, T* dx, int64_t outer, int64_t D, int64_t inner,
                      bool log) {
  TG_ISA_DISPATCH(softmax_backward<T>)(g, y, dx, outer, D, inner, log);
}

template <class T>
void cross_entropy_lane_losses(const T* logp, const int64_t* target, int64_t N, int64_t C,
                               int64_t K, int64_t ignore_index, bool smoothing, double* nll,
                               double* smooth) {
  TG_ISA_DISPATCH(cross_entropy_lane_losses<T>)(logp, target, N, C, K, ignore_index, smoothing,
                                                nll, smooth);
}

template <class T>
void cross_entropy_backward(const T* logp, const int64_t* target, const T* g, bool per_lane,
                            int64_t N, int64_t C, int64_t K, int64_t ignore_index,
                            double nll_scale, double smooth_scale, T* dx) {
  TG_ISA_DISPATCH(cross_entropy_backward<T>)(logp, target, g, per_lane, N, C, K, ignore_index,
                                             nll_scale, smooth_scale, dx);
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

}  // namespace tg::kernels
