// The 2-d upsampling kernels, bilinear and bicubic; the shape legend and the coordinate maths are
// in upsample_kernels.h, the shared tap tables and row passes in internal/separable.h.
//
// Both are separable: y = Lh * x * Lw^T per plane, where Lh (Ho x H) and Lw (Wo x W) have K
// non-zeros per row (the taps: 2 for bilinear, 4 for bicubic). The forward therefore
// interpolates input rows horizontally (each needed row once, kept in a K-row cache since
// consecutive output rows share input rows), then blends K such rows vertically: a contiguous,
// vectorised loop. (aten 1.13's bilinear instead sums the four products x * (lh * lw) in double
// for every output; the results agree to an ulp or two, see the header.)
//
// The backward is the adjoint, grad_x = Lh^T * grad_y * Lw, computed as a gather: each input
// row sums the grad_y rows that read it (vertical, vectorised), then each input pixel sums the
// columns that read it (horizontal). Every grad_x element is owned by one thread and summed in
// a fixed order: no atomics, no scatter races, the same bits for any thread count.
//
// One copy of this file per instruction set (ops/internal/isa_dispatch.h; upsample_dispatch.cpp
// holds the public entry points): the vectorised loops take each copy's full width, and the
// AVX2 and AVX-512 copies fuse the blends' multiply-adds (an ulp from the generic copy).
//
// 16-bit storage (BFloat16, Float16): the forward widens each input row it interpolates to float
// (widened_row) and rounds each output once as it stores the blend: the float kernel's result
// on the widened input, rounded once. The backward reads grad_y widened in its loads and sums
// in float where the float kernel sums in double (16 lanes a vector instead of 8; the AVX-512
// copy gathers the horizontal sums 16 inputs at a time), then rounds each grad_x once: within
// an ulp of the float kernel's result rounded (tests/test_half_kernels.cpp), in about half its time.
#include "upsample_kernels.h"

#include <algorithm>
#include <cstdint>

#include "../../framework/half.h"
#include "internal/separable.h"

namespace tg::kernels::TG_ISA_NS {

using namespace upsample;

// The forward and backward with K taps per dim (2: bilinear, 4: bicubic).
template <class T, int K>
void forward_2d(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo, bool align_corners,
                double scales_h, double scales_w) {
  using O = opmath_t<T>;  // arithmetic type: float for the 16-bit types
  if (NC <= 0 || Ho <= 0 || Wo <= 0) return;
  if (H <= 0 || W <= 0) {  // nothing to interpolate from (rejected upstream); stay in bounds
    std::fill(y, y + NC * Ho * Wo, T(0.0f));
    return;
  }
  separable_forward_2d<T, K>(x, y, NC, H, W, Ho, Wo, make_taps<O, K>(H, Ho, align_corners, scales_h),
                             make_taps<O, K>(W, Wo, align_corners, scales_w));
}

template <class T, int K>
void backward_2d(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                 bool align_corners, double scales_h, double scales_w) {
  using O = opmath_t<T>;  // the weights' type: float for the 16-bit types
  if (NC <= 0 || H <= 0 || W <= 0) return;
  // With an empty grad_y (Ho or Wo = 0) every adjoint list is empty and grad_x is zeroed.
  separable_backward_2d<T>(grad_y, grad_x, NC, H, W, Ho, Wo,
                           make_adjoint(make_taps<O, K>(H, Ho, align_corners, scales_h), H, Ho),
                           make_adjoint(make_taps<O, K>(W, Wo, align_corners, scales_w), W, Wo));
}

template <class T>
void upsample_linear1d_forward(const T* x, T* y, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                               double scales_w) {
  using O = opmath_t<T>;
  if (NC <= 0 || Wo <= 0) return;
  if (W <= 0) {
    std::fill(y, y + NC * Wo, T(0.0f));
    return;
  }
  separable_forward_2d<T, 2>(x, y, NC, 1, W, 1, Wo, single_row_taps<O, 2>(),
                             make_taps<O, 2>(W, Wo, align_corners, scales_w));
}

template <class T>
void upsample_linear1d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                                double scales_w) {
  using O = opmath_t<T>;
  if (NC <= 0 || W <= 0) return;
  separable_backward_2d<T>(grad_y, grad_x, NC, 1, W, 1, Wo, make_adjoint(single_row_taps<O, 2>(), 1, 1),
                           make_adjoint(make_taps<O, 2>(W, Wo, align_corners, scales_w), W, Wo));
}

#define TG_DEFINE_2D(name, K)                                                                                    \
  template <class T>                                                                                             \
  void name##_forward(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,                \
                      bool align_corners, double scales_h, double scales_w) {                                    \
    forward_2d<T, K>(x, y, NC, H, W, Ho, Wo, align_corners, scales_h, scales_w);                                 \
  }                                                                                                              \
  template <class T>                                                                                             \
  void name##_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,     \
                       bool align_corners, double scales_h, double scales_w) {                                   \
    backward_2d<T, K>(grad_y, grad_x, NC, H, W, Ho, Wo, align_corners, scales_h, scales_w);                      \
  }
TG_DEFINE_2D(upsample_bilinear2d, 2)
TG_DEFINE_2D(upsample_bicubic2d, 4)
#undef TG_DEFINE_2D

#define TG_INSTANTIATE_2D(name, T)                                                                          \
  template void name##_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double,  \
                                  double);                                                                  \
  template void name##_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, \
                                   double);
#define TG_INSTANTIATE(T)                                                                                      \
  template void upsample_linear1d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool, double);             \
  template void upsample_linear1d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, bool, double);            \
  TG_INSTANTIATE_2D(upsample_bilinear2d, T) \
  TG_INSTANTIATE_2D(upsample_bicubic2d, T)
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE
#undef TG_INSTANTIATE_2D

}  // namespace tg::kernels::TG_ISA_NS
