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
#include <vector>

#include <omp.h>

#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {

template <class T>
void upsample_nearest3d_forward(const T* x, T* y, const NearestParams& p) {
  const int64_t rows = p.NC * p.Do * p.Ho, plane_rows = p.Do * p.Ho, HW = p.H * p.W;
  const int64_t work = rows * p.Wo;
  bool doubled = p.Wo == 2 * p.W;  // src_w[ow] == ow / 2: a loop that vectorises
  for (int64_t ow = 0; doubled && ow < p.Wo; ++ow) doubled = p.src_w[ow] == ow / 2;
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
      } else if (doubled) {
#pragma omp simd
        for (int64_t iw = 0; iw < p.W; ++iw) dst[2 * iw] = dst[2 * iw + 1] = src[iw];
      } else {
        const int64_t* iw = p.src_w;
        for (int64_t ow = 0; ow < p.Wo; ++ow) dst[ow] = src[iw[ow]];
      }
      prev_src = src;
    }
  }
}

// Adds one output row into its source row, column by column. The index rule is monotone, so
// the outputs of input column iw are the run [run[iw], run[iw + 1]): each column is summed in a
// register, in output order (aten's order: the same bits), instead of a store and a reload per
// output. Doubling (runs of exactly 2, the common case) has its own loop, which vectorises.
template <class T>
void add_row(const T* dy, T* dx, const int64_t* run, int64_t W, bool doubled) {
  if (doubled) {
#pragma omp simd
    for (int64_t iw = 0; iw < W; ++iw) dx[iw] = (dx[iw] + dy[2 * iw]) + dy[2 * iw + 1];
    return;
  }
  for (int64_t iw = 0; iw < W; ++iw) {
    T sum = dx[iw];
    for (int64_t ow = run[iw]; ow < run[iw + 1]; ++ow) sum += dy[ow];
    dx[iw] = sum;
  }
}

template <class T>
void upsample_nearest3d_backward(const T* grad_y, T* grad_x, const NearestParams& p) {
  const int64_t plane_in = p.D * p.H * p.W, plane_out = p.Do * p.Ho * p.Wo;
  // run[iw]: the first output column whose source is iw or later (the index rule is monotone)
  std::vector<int64_t> run(p.W + 1, p.Wo);
  for (int64_t ow = p.Wo - 1; ow >= 0; --ow) run[p.src_w[ow]] = ow;
  for (int64_t iw = p.W - 1; iw >= 0; --iw) run[iw] = std::min(run[iw], run[iw + 1]);
  bool doubled = p.Wo == 2 * p.W;
  for (int64_t ow = 0; doubled && ow < p.Wo; ++ow) doubled = p.src_w[ow] == ow / 2;
#pragma omp parallel for schedule(static) if (p.NC > 1 && p.NC * (plane_in + plane_out) >= kParallelGrain)
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    T* dx = grad_x + plane * plane_in;
    const T* dy = grad_y + plane * plane_out;
    std::memset(dx, 0, sizeof(T) * plane_in);
    for (int64_t od = 0; od < p.Do; ++od)
      for (int64_t oh = 0; oh < p.Ho; ++oh)
        add_row(dy + (od * p.Ho + oh) * p.Wo, dx + (p.src_d[od] * p.H + p.src_h[oh]) * p.W, run.data(), p.W,
                doubled);
  }
}

#define TG_INSTANTIATE_NEAREST(T)                                                    \
  template void upsample_nearest3d_forward<T>(const T*, T*, const NearestParams&); \
  template void upsample_nearest3d_backward<T>(const T*, T*, const NearestParams&);
TG_INSTANTIATE_NEAREST(float)
TG_INSTANTIATE_NEAREST(double)
#undef TG_INSTANTIATE_NEAREST

}  // namespace tg::kernels::TG_ISA_NS
