// The layer_norm kernels' entry points (layer_norm_kernels.h): each forwards to the copy of
// layer_norm_kernels.cpp compiled for the active instruction set (ops/internal/isa_dispatch.h).
#include "layer_norm_kernels.h"

#include "internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void layer_norm_forward(const T*, const T*, const T*, T*, double*, double*, int64_t, int64_t,
                            double);
    template <class T>
    void layer_norm_backward(const T*, const T*, const T*, const double*, const double*, T*, T*,
                             T*, int64_t, int64_t);)

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, double* mean, double* rstd,
                        int64_t R, int64_t N, double eps) {
  TG_ISA_DISPATCH(layer_norm_forward<T>)(x, w, b, y, mean, rstd, R, N, eps);
}

template <class T>
void layer_norm_backward(const T* g, const T* x, const T* w, const double* mean,
                         const double* rstd, T* dx, T* dw, T* db, int64_t R, int64_t N) {
  TG_ISA_DISPATCH(layer_norm_backward<T>)(g, x, w, mean, rstd, dx, dw, db, R, N);
}

#define TG_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T*, double*, double*,    \
                                      int64_t, int64_t, double);                             \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const double*,          \
                                       const double*, T*, T*, T*, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels
