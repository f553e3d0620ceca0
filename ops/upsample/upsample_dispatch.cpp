// The upsampling kernels' public API (upsample_kernels.h): entry points that forward to the
// copy of the kernels (upsample_kernels.cpp) compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "upsample_kernels.h"

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void upsample_bilinear2d_forward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                     bool, double, double);
    template <class T>
    void upsample_bilinear2d_backward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                      bool, double, double);)

template <class T>
void upsample_bilinear2d_forward(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho,
                                 int64_t Wo, bool align_corners, double scales_h,
                                 double scales_w) {
  TG_ISA_DISPATCH(upsample_bilinear2d_forward<T>)(x, y, NC, H, W, Ho, Wo, align_corners, scales_h,
                                                  scales_w);
}

template <class T>
void upsample_bilinear2d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W,
                                  int64_t Ho, int64_t Wo, bool align_corners, double scales_h,
                                  double scales_w) {
  TG_ISA_DISPATCH(upsample_bilinear2d_backward<T>)(grad_y, grad_x, NC, H, W, Ho, Wo,
                                                   align_corners, scales_h, scales_w);
}

#define TG_INSTANTIATE(T)                                                                     \
  template void upsample_bilinear2d_forward<T>(const T*, T*, int64_t, int64_t, int64_t,       \
                                               int64_t, int64_t, bool, double, double);       \
  template void upsample_bilinear2d_backward<T>(const T*, T*, int64_t, int64_t, int64_t,      \
                                                int64_t, int64_t, bool, double, double);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels
