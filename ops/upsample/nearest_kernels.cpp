// Nearest-neighbour kernels; the shape legend and the index rules are in nearest_kernels.h.
//
// Forward: the output rows (plane, od, oh) are split in contiguous blocks among the threads (so
// that one plane, or a few, still uses every core). A row is a gather through src_w; a row
// whose source row is the previous output row's (upsampling along H or D) is a copy of that
// row instead.
//
// One copy of these kernels per instruction set (ops/internal/isa_dispatch.h);
// upsample_nearest.cpp holds the public entry points that call the active copy.
#include "nearest_kernels.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {

template <class T>
void upsample_nearest3d_forward(const T* x, T* y, const NearestParams& p) {
  const int64_t rows = p.NC * p.Do * p.Ho, plane_rows = p.Do * p.Ho, HW = p.H * p.W;
  const int64_t work = rows * p.Wo;
#pragma omp parallel if (rows > 1 && work >= kParallelGrain)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t r0 = rows / threads * t + std::min<int64_t>(t, rows % threads);
    const int64_t r1 = r0 + rows / threads + (t < rows % threads ? 1 : 0);
    const T* prev_src = nullptr;  // the source row of output row r - 1, when this thread wrote it
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t plane = r / plane_rows, od = r % plane_rows / p.Ho, oh = r % p.Ho;
      const T* src = x + plane * p.D * HW + p.src_d[od] * HW + p.src_h[oh] * p.W;
      T* dst = y + r * p.Wo;
      if (src == prev_src) {
        std::memcpy(dst, dst - p.Wo, sizeof(T) * p.Wo);
      } else {
        const int64_t* iw = p.src_w;
        for (int64_t ow = 0; ow < p.Wo; ++ow) dst[ow] = src[iw[ow]];
      }
      prev_src = src;
    }
  }
}

template <class T>
void upsample_nearest3d_backward(const T* grad_y, T* grad_x, const NearestParams& p) {
  const int64_t plane_in = p.D * p.H * p.W, plane_out = p.Do * p.Ho * p.Wo;
#pragma omp parallel for schedule(static) if (p.NC > 1 && p.NC * (plane_in + plane_out) >= kParallelGrain)
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    T* dx = grad_x + plane * plane_in;
    const T* dy = grad_y + plane * plane_out;
    std::memset(dx, 0, sizeof(T) * plane_in);
    for (int64_t od = 0; od < p.Do; ++od)
      for (int64_t oh = 0; oh < p.Ho; ++oh) {
        T* dx_row = dx + (p.src_d[od] * p.H + p.src_h[oh]) * p.W;
        const T* dy_row = dy + (od * p.Ho + oh) * p.Wo;
        for (int64_t ow = 0; ow < p.Wo; ++ow) dx_row[p.src_w[ow]] += dy_row[ow];
      }
  }
}

#define TG_INSTANTIATE_NEAREST(T)                                                    \
  template void upsample_nearest3d_forward<T>(const T*, T*, const NearestParams&); \
  template void upsample_nearest3d_backward<T>(const T*, T*, const NearestParams&);
TG_INSTANTIATE_NEAREST(float)
TG_INSTANTIATE_NEAREST(double)
#undef TG_INSTANTIATE_NEAREST

}  // namespace tg::kernels::TG_ISA_NS
