// The upsampling kernels' public API (upsample_kernels.h): entry points that forward to the
// copy of the kernels (upsample_kernels.cpp) compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "upsample_kernels.h"

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels {

#define TG_DECLARE_2D(name)                                                                \
  template <class T>                                                                       \
  void name##_forward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, double); \
  template <class T>                                                                       \
  void name##_backward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, double);
#define TG_DECLARE_3D(name)                                                                               \
  template <class T>                                                                                      \
  void name##_forward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,  \
                      double, double, double);                                                            \
  template <class T>                                                                                      \
  void name##_backward(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, \
                       double, double, double);
TG_ISA_DECLARE(
    template <class T> void upsample_linear1d_forward(const T*, T*, int64_t, int64_t, int64_t, bool, double);
    template <class T> void upsample_linear1d_backward(const T*, T*, int64_t, int64_t, int64_t, bool, double);
    TG_DECLARE_2D(upsample_bilinear2d) TG_DECLARE_2D(upsample_bicubic2d) TG_DECLARE_3D(upsample_trilinear3d))

template <class T>
void upsample_linear1d_forward(const T* x, T* y, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                               double scales_w) {
  TG_ISA_DISPATCH(upsample_linear1d_forward<T>)(x, y, NC, W, Wo, align_corners, scales_w);
}
template <class T>
void upsample_linear1d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                                double scales_w) {
  TG_ISA_DISPATCH(upsample_linear1d_backward<T>)(grad_y, grad_x, NC, W, Wo, align_corners, scales_w);
}

// Each public entry point forwards to the active copy (a, b: input and output pointers).
#define TG_FORWARD_2D(name, suffix, a, b)                                                                      \
  template <class T>                                                                                           \
  void name##_##suffix(const T* a, T* b, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,             \
                       bool align_corners, double scales_h, double scales_w) {                                 \
    TG_ISA_DISPATCH(name##_##suffix<T>)(a, b, NC, H, W, Ho, Wo, align_corners, scales_h, scales_w);           \
  }
#define TG_FORWARD_3D(name, suffix, a, b)                                                                      \
  template <class T>                                                                                           \
  void name##_##suffix(const T* a, T* b, int64_t NC, int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho,  \
                       int64_t Wo, bool align_corners, double scales_d, double scales_h, double scales_w) {    \
    TG_ISA_DISPATCH(name##_##suffix<T>)(a, b, NC, D, H, W, Do, Ho, Wo, align_corners, scales_d, scales_h,      \
                                        scales_w);                                                             \
  }
TG_FORWARD_2D(upsample_bilinear2d, forward, x, y)
TG_FORWARD_2D(upsample_bilinear2d, backward, grad_y, grad_x)
TG_FORWARD_2D(upsample_bicubic2d, forward, x, y)
TG_FORWARD_2D(upsample_bicubic2d, backward, grad_y, grad_x)
TG_FORWARD_3D(upsample_trilinear3d, forward, x, y)
TG_FORWARD_3D(upsample_trilinear3d, backward, grad_y, grad_x)

#define TG_INSTANTIATE(T)                                                                      \
  template void upsample_linear1d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool, double);  \
  template void upsample_linear1d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, bool, double); \
  template void upsample_bilinear2d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, \
                                               double, double);                                \
  template void upsample_bilinear2d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, \
                                                double, double);                               \
  template void upsample_bicubic2d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, \
                                              double, double);                                 \
  template void upsample_bicubic2d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, \
                                               double, double);                                \
  template void upsample_trilinear3d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,      \
                                                int64_t, int64_t, bool, double, double, double);                \
  template void upsample_trilinear3d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,     \
                                                 int64_t, int64_t, bool, double, double, double);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels
