// The group normalisation kernels' public API (group_norm_kernels.h): entry points that forward
// to the copy of the kernels (group_norm_kernels.cpp) compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "group_norm_kernels.h"

#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void group_norm_forward(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,
                            double, T*, opmath_t<T>*, opmath_t<T>*);
    template <class T>
    void group_norm_backward(const T*, const T*, const opmath_t<T>*, const opmath_t<T>*,
                             const T*, int64_t, int64_t, int64_t, int64_t, T*, T*, T*);)

template <class T>
void group_norm_forward(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C,
                        int64_t HxW, int64_t group, double eps, T* y, opmath_t<T>* mean,
                        opmath_t<T>* rstd) {
  TG_ISA_DISPATCH(group_norm_forward<T>)(x, gamma, beta, N, C, HxW, group, eps, y, mean, rstd);
}

template <class T>
void group_norm_backward(const T* grad_y, const T* x, const opmath_t<T>* mean,
                         const opmath_t<T>* rstd, const T* gamma, int64_t N, int64_t C,
                         int64_t HxW, int64_t group, T* grad_x, T* grad_gamma, T* grad_beta) {
  TG_ISA_DISPATCH(group_norm_backward<T>)(grad_y, x, mean, rstd, gamma, N, C, HxW, group, grad_x,
                                          grad_gamma, grad_beta);
}

#define TG_INSTANTIATE(T)                                                                      \
  template void group_norm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      int64_t, double, T*, opmath_t<T>*, opmath_t<T>*);        \
  template void group_norm_backward<T>(const T*, const T*, const opmath_t<T>*,                 \
                                       const opmath_t<T>*, const T*, int64_t, int64_t, int64_t, \
                                       int64_t, T*, T*, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels
