// The batch normalisation kernels' public API (batch_norm_kernels.h): entry points that forward
// to the copy of the kernels (batch_norm_kernels.cpp) compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "batch_norm_kernels.h"

#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void batch_norm_forward_train(const T*, const T*, const T*, int64_t, int64_t, int64_t, double, T*, T*, T*,
                                  double*);
    template <class T>
    void batch_norm_forward_eval(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, T*);
    template <class T>
    void batch_norm_backward(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, bool,
                             T*, T*, T*);)

template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C, int64_t HxW,
                              double eps, T* y, T* mean, T* invstd, double* var_unbiased) {
  TG_ISA_DISPATCH(batch_norm_forward_train<T>)(x, gamma, beta, N, C, HxW, eps, y, mean, invstd, var_unbiased);
}

template <class T>
void batch_norm_forward_eval(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, int64_t N,
                             int64_t C, int64_t HxW, T* y) {
  TG_ISA_DISPATCH(batch_norm_forward_eval<T>)(x, mean, invstd, gamma, beta, N, C, HxW, y);
}

template <class T>
void batch_norm_backward(const T* grad_y, const T* x, const T* mean, const T* invstd, const T* gamma, int64_t N,
                         int64_t C, int64_t HxW, bool training, T* grad_x, T* grad_gamma, T* grad_beta) {
  TG_ISA_DISPATCH(batch_norm_backward<T>)(grad_y, x, mean, invstd, gamma, N, C, HxW, training, grad_x, grad_gamma,
                                          grad_beta);
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

}  // namespace tg::kernels
