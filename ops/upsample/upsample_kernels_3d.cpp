// The trilinear upsampling kernels; the shape legend and the coordinate rules are in
// upsample_kernels.h, the tap tables and the 2-d row passes in internal/separable.h.
//
// Trilinear is bilinear per depth slice, then linear across slices, the order of aten's nested
// sums (W innermost, then H, then D). The forward interpolates each input slice it needs to
// (Ho, Wo) once, in T's arithmetic type (a two-slice cache: consecutive output slices share
// input slices), and blends two such slices, rounding each output once.
//
// The backward is the adjoint: each input slice first sums, in double, the grad_y slices that
// read it (the depth adjoint), then takes the 2-d adjoint of that (Ho, Wo) sum (backward_rows).
// Threads own (plane, block of input slices): no atomics, the same bits for any thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "../../framework/half.h"
#include "internal/separable.h"
#include "upsample_kernels.h"

namespace tg::kernels::TG_ISA_NS {

using namespace upsample;

template <class T>
void upsample_trilinear3d_forward(const T* x, T* y, int64_t NC, int64_t D, int64_t H, int64_t W, int64_t Do,
                                  int64_t Ho, int64_t Wo, bool align_corners, double scales_d, double scales_h,
                                  double scales_w) {
  using O = opmath_t<T>;
  if (NC <= 0 || Do <= 0 || Ho <= 0 || Wo <= 0) return;
  if (D <= 0 || H <= 0 || W <= 0) {  // rejected upstream; stay in bounds
    std::fill(y, y + NC * Do * Ho * Wo, T(0.0f));
    return;
  }
  const Taps<O, 2> td = make_linear_taps<O>(D, Do, align_corners, scales_d);
  const Taps<O, 2> th = make_linear_taps<O>(H, Ho, align_corners, scales_h);
  const Taps<O, 2> tw = make_linear_taps<O>(W, Wo, align_corners, scales_w);
  const int64_t HW = H * W, HWo = Ho * Wo;
  const int64_t blocks = row_blocks(NC, Do), per_block = ceil_div(Do, blocks);

#pragma omp parallel if (NC * Do * HWo >= kParallelMin)
  {
    ForwardScratch<T, 2> s(W, Wo);
    AlignedRows<O> slices(2, HWo);  // input slice d interpolated to (Ho, Wo), in slot d % 2
    int64_t held[2];
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      const T* xp = x + p * D * HW;
      T* yp = y + p * Do * HWo;
      held[0] = held[1] = -1;
      for (int64_t od = b * per_block, od_end = std::min(Do, (b + 1) * per_block); od < od_end; ++od) {
        const O* sl[2];
        O wd[2];
        for (int j = 0; j < 2; ++j) {
          const int64_t d = td.idx[j][od];
          const int slot = static_cast<int>(d % 2);
          if (held[slot] != d) {
            s.forget();
            forward_rows<T, 2>(xp + d * HW, W, th, tw, Wo, 0, Ho, slices.row(slot), s);
            held[slot] = d;
          }
          sl[j] = slices.row(slot);
          wd[j] = td.w[j][od];
        }
        T* yr = yp + od * HWo;
#pragma omp simd
        for (int64_t k = 0; k < HWo; ++k) {
          O v = sl[0][k] * wd[0];
          v += sl[1][k] * wd[1];
          store_op(yr, k, v);
        }
      }
    }
  }
}

template <class T>
void upsample_trilinear3d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t D, int64_t H, int64_t W,
                                   int64_t Do, int64_t Ho, int64_t Wo, bool align_corners, double scales_d,
                                   double scales_h, double scales_w) {
  using O = opmath_t<T>;
  if (NC <= 0 || D <= 0 || H <= 0 || W <= 0) return;
  // With an empty grad_y every adjoint list is empty and grad_x is zeroed.
  const AdjointTaps<O> ad = make_adjoint(make_linear_taps<O>(D, Do, align_corners, scales_d), D, Do);
  const AdjointTaps<O> ah = make_adjoint(make_linear_taps<O>(H, Ho, align_corners, scales_h), H, Ho);
  const AdjointTaps<O> aw = make_adjoint(make_linear_taps<O>(W, Wo, align_corners, scales_w), W, Wo);
  const int64_t HW = H * W, HWo = Ho * Wo;
  const int64_t blocks = row_blocks(NC, D), per_block = ceil_div(D, blocks);

#pragma omp parallel if (NC * Do * HWo >= kParallelMin)
  {
    BackwardScratch<T> s(W, Wo);
    AlignedRows<double> sum(1, HWo);  // the grad_y slices that read one input slice, summed
    double* g = sum.row(0);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      const T* gyp = grad_y + p * Do * HWo;
      T* gxp = grad_x + p * D * HW;
      for (int64_t d = b * per_block, d_end = std::min(D, (b + 1) * per_block); d < d_end; ++d) {
        const int64_t k0 = ad.start[d], k_end = ad.start[d + 1];
        if (k0 == k_end) std::fill(g, g + HWo, 0.0);
        for (int64_t k = k0; k < k_end; ++k) {
          const T* gs = gyp + ad.out[k] * HWo;
          const double w = static_cast<double>(ad.w[k]);
          if (k == k0) {
#pragma omp simd
            for (int64_t i = 0; i < HWo; ++i) g[i] = w * static_cast<double>(load_op(gs, i));
          } else {
#pragma omp simd
            for (int64_t i = 0; i < HWo; ++i) g[i] += w * static_cast<double>(load_op(gs, i));
          }
        }
        backward_rows<T, double>(g, Wo, ah, aw, W, 0, H, gxp + d * HW, s);
      }
    }
  }
}

#define TG_INSTANTIATE(T)                                                                                     \
  template void upsample_trilinear3d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,    \
                                                int64_t, int64_t, bool, double, double, double);              \
  template void upsample_trilinear3d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                                 int64_t, int64_t, bool, double, double, double);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
