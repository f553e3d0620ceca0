// Pooling kernels; the shape legend and the window rules are in pool_kernels.h.
//
// Forward: every output is independent, so the loop over (plane, output row) is split among
// threads. Backward: several outputs may write the same input position (overlapping windows),
// so each thread owns whole grad_x planes and visits that plane's outputs in order. (With
// fewer planes than threads, e.g. one unbatched channel, backward therefore leaves cores idle;
// CNN batches have hundreds of planes.)
// Backward adds in T, like aten: a position receives at most ceil(kH / sH) * ceil(kW / sW)
// contributions (usually 1 to 4), too few for the order or the precision to matter.
//
// One copy of these kernels per instruction set (ops/internal/isa_dispatch.h); pool_dispatch.cpp
// holds pool_output_size and the public entry points that call the active copy.
#include "pool_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {

namespace {

// The first position start + m * step (m >= 0) that is >= 0.
int64_t first_inside(int64_t start, int64_t step) {
  return start >= 0 ? start : start + (-start + step - 1) / step * step;
}

// Adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)).
int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return o * in / out; }
int64_t adaptive_end(int64_t o, int64_t out, int64_t in) { return ((o + 1) * in + out - 1) / out; }

constexpr int64_t kPoolRun = 256;  // inner columns summed at a time (a stack buffer of sums)

// Forward work below kParallelGrain runs serially: an OpenMP region costs microseconds. Work is
// counted in double: windows of up to 2^31 x 2^31 taps times the outputs overflow int64.
bool parallel_forward(int64_t planes, int64_t rows, double work) {
  return planes * rows > 1 && work >= kParallelGrain;
}
bool parallel_backward(int64_t planes, double work) { return planes > 1 && work >= kParallelGrain; }

// Output columns [lo, hi) whose windows lie wholly inside the input's width: their taps need
// no bounds checks, so a row of them goes tap by tap, each tap a strided run over the columns
// (vectorised), in the same tap order as the single-window loop, hence the same results.
struct InnerColumns {
  int64_t lo, hi;
};

InnerColumns inner_columns(const Pool2dParams& p) {
  const int64_t last_tap = (p.kW - 1) * p.dW;  // window ow covers [ow sW - padW, .. + last_tap]
  const int64_t lo = std::min((p.padW + p.sW - 1) / p.sW, p.Wo);
  const int64_t hi = p.W - 1 - last_tap + p.padW < 0 ? 0 : (p.W - 1 - last_tap + p.padW) / p.sW + 1;
  return {lo, std::max(lo, std::min(hi, p.Wo))};
}

// The average window of output (oh, ow): the positions it sums, clipped to the input, and
// what the sum is divided by.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
  bool empty() const { return h0 >= h1 || w0 >= w1; }
};

AvgWindow avg_window(const Pool2dParams& p, int64_t oh, int64_t ow, bool count_include_pad, int64_t divisor_override) {
  AvgWindow win;
  int64_t h0 = oh * p.sH - p.padH, w0 = ow * p.sW - p.padW;
  int64_t h1 = std::min(h0 + p.kH, p.H + p.padH), w1 = std::min(w0 + p.kW, p.W + p.padW);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);  // counts the padding inside the window
  win.h0 = std::max<int64_t>(h0, 0), win.w0 = std::max<int64_t>(w0, 0);
  win.h1 = std::min(h1, p.H), win.w1 = std::min(w1, p.W);
  win.divisor = divisor_override != 0 ? divisor_override
                : count_include_pad   ? pool_size
                                      : (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

}  // namespace

// ---- max pooling ------------------------------------------------------------------------

template <class T>
void max_pool2d_forward(const T* x, T* y, int64_t* indices, const Pool2dParams& p) {
  const double work = double(p.NC) * double(p.Ho * p.Wo) * double(p.kH) * double(p.kW);
#pragma omp parallel for collapse(2) schedule(static) if (parallel_forward(p.NC, p.Ho, work))
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      const T* xp = x + plane * p.H * p.W;
      T* yr = y + (plane * p.Ho + oh) * p.Wo;
      int64_t* ir = indices + (plane * p.Ho + oh) * p.Wo;
      const int64_t h_start = oh * p.sH - p.padH;
      const int64_t h0 = first_inside(h_start, p.dH), h1 = std::min(h_start + (p.kH - 1) * p.dH + 1, p.H);
      const InnerColumns in = inner_columns(p);
      if (h0 < h1) {  // the inner columns, tap by tap (rows past h1 or above 0 hold no taps)
        for (int64_t ow = in.lo; ow < in.hi; ++ow) {
          yr[ow] = -std::numeric_limits<T>::infinity();
          ir[ow] = h0 * p.W + ow * p.sW - p.padW;
        }
        // sW in a local: read through p inside the loop, it might alias the stores (as far as
        // GCC knows), and the loop then ran scalar with a branch per tap (max_pool2d_fwd_bwd on
        // 8x64x112x112: 64 ms at 1 thread, 23 ms vectorised).
        const int64_t sW = p.sW;
        for (int64_t h = h0; h < h1; h += p.dH)
          for (int64_t kw = 0; kw < p.kW; ++kw) {
            const int64_t base = h * p.W + kw * p.dW - p.padW;  // + ow * sW: the tap's position
            const T* xt = xp + base;
#pragma omp simd
            for (int64_t ow = in.lo; ow < in.hi; ++ow) {
              const T v = xt[ow * sW];
              const bool take = v > yr[ow] || v != v;  // as below: strict, and a NaN always
              yr[ow] = take ? v : yr[ow];
              ir[ow] = take ? base + ow * sW : ir[ow];
            }
          }
      }
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        if (ow == in.lo && h0 < h1) ow = in.hi;  // done above
        if (ow >= p.Wo) break;
        const int64_t w_start = ow * p.sW - p.padW;
        const int64_t w0 = first_inside(w_start, p.dW), w1 = std::min(w_start + (p.kW - 1) * p.dW + 1, p.W);
        // aten starts from -inf at the window's first position: an all -inf window keeps it.
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_at = (h0 < h1 && w0 < w1) ? h0 * p.W + w0 : -1;
        for (int64_t h = h0; h < h1; h += p.dH) {
          for (int64_t w = w0; w < w1; w += p.dW) {
            const T v = xp[h * p.W + w];
            if (v > best || std::isnan(v)) {  // strict: the first of equal maxima; a NaN always
              best = v;
              best_at = h * p.W + w;
            }
          }
        }
        yr[ow] = best;
        ir[ow] = best_at;
      }
    }
  }
}

template <class T>
void max_pool2d_backward(const T* grad_y, const int64_t* indices, T* grad_x, const Pool2dParams& p) {
  const int64_t out_plane = p.Ho * p.Wo, in_plane = p.H * p.W;
#pragma omp parallel for schedule(static) if (parallel_backward(p.NC, p.NC * (out_plane + in_plane)))
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    T* dx = grad_x + plane * in_plane;
    const T* dy = grad_y + plane * out_plane;
    const int64_t* ind = indices + plane * out_plane;
    std::memset(dx, 0, sizeof(T) * in_plane);
    for (int64_t o = 0; o < out_plane; ++o)
      if (ind[o] >= 0) dx[ind[o]] += dy[o];
  }
}

template <class T>
void max_pool2d_gather(const T* x, const int64_t* indices, T* y, const Pool2dParams& p) {
  const int64_t out_plane = p.Ho * p.Wo, in_plane = p.H * p.W, n = p.NC * out_plane;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t plane = i / out_plane;
    y[i] = indices[i] >= 0 ? x[plane * in_plane + indices[i]] : T(0);
  }
}

// ---- average pooling --------------------------------------------------------------------

template <class T>
void avg_pool2d_forward(const T* x, T* y, const Pool2dParams& p, bool count_include_pad, int64_t divisor_override) {
  const double work = double(p.NC) * double(p.Ho * p.Wo) * double(p.kH) * double(p.kW);
#pragma omp parallel for collapse(2) schedule(static) if (parallel_forward(p.NC, p.Ho, work))
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      const T* xp = x + plane * p.H * p.W;
      T* yr = y + (plane * p.Ho + oh) * p.Wo;
      // the inner columns, tap by tap: the same sums in the same order as the loop below
      const InnerColumns in = inner_columns(p);
      const AvgWindow first = avg_window(p, oh, in.lo, count_include_pad, divisor_override);
      const bool by_taps = in.lo < in.hi && !first.empty();  // inner windows share rows and divisor
      if (by_taps) {
        double sum[kPoolRun];
        for (int64_t o0 = in.lo; o0 < in.hi; o0 += kPoolRun) {
          const int64_t n = std::min(kPoolRun, in.hi - o0);
          std::fill(sum, sum + n, 0.0);
          for (int64_t h = first.h0; h < first.h1; ++h)
            for (int64_t kw = 0; kw < p.kW; ++kw) {
              const T* xt = xp + h * p.W + o0 * p.sW - p.padW + kw;
#pragma omp simd
              for (int64_t j = 0; j < n; ++j) sum[j] += static_cast<double>(xt[j * p.sW]);
            }
          for (int64_t j = 0; j < n; ++j) yr[o0 + j] = static_cast<T>(sum[j] / static_cast<double>(first.divisor));
        }
      }
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        if (ow == in.lo && by_taps) ow = in.hi;  // done above
        if (ow >= p.Wo) break;
        const AvgWindow win = avg_window(p, oh, ow, count_include_pad, divisor_override);
        if (win.empty()) {
          yr[ow] = T(0);
          continue;
        }
        double sum = 0;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) sum += static_cast<double>(xp[h * p.W + w]);
        yr[ow] = static_cast<T>(sum / static_cast<double>(win.divisor));
      }
    }
  }
}

template <class T>
void avg_pool2d_backward(const T* grad_y, T* grad_x, const Pool2dParams& p, bool count_include_pad,
                         int64_t divisor_override) {
  const int64_t out_plane = p.Ho * p.Wo, in_plane = p.H * p.W;
  const InnerColumns in = inner_columns(p);
#pragma omp parallel for schedule(static) \
    if (parallel_backward(p.NC, double(p.NC) * (double(out_plane) * double(p.kH) * double(p.kW) + double(in_plane))))
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    T* dx = grad_x + plane * in_plane;
    const T* dy = grad_y + plane * out_plane;
    std::memset(dx, 0, sizeof(T) * in_plane);
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      // Windows of one row that do not overlap (sW >= kW) write disjoint positions, so the inner
      // columns can go tap by tap (vectorised) without changing any position's order of sums.
      const AvgWindow first = avg_window(p, oh, in.lo, count_include_pad, divisor_override);
      const bool by_taps = p.sW >= p.kW && in.lo < in.hi && !first.empty();
      if (by_taps) {
        const T* dy_row = dy + oh * p.Wo;
        for (int64_t h = first.h0; h < first.h1; ++h)
          for (int64_t kw = 0; kw < p.kW; ++kw) {
            T* dt = dx + h * p.W - p.padW + kw;  // + ow * sW: the tap's position
#pragma omp simd
            for (int64_t ow = in.lo; ow < in.hi; ++ow) dt[ow * p.sW] += dy_row[ow] / static_cast<T>(first.divisor);
          }
      }
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        if (ow == in.lo && by_taps) ow = in.hi;  // done above
        if (ow >= p.Wo) break;
        const AvgWindow win = avg_window(p, oh, ow, count_include_pad, divisor_override);
        if (win.empty()) continue;
        const T share = dy[oh * p.Wo + ow] / static_cast<T>(win.divisor);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) dx[h * p.W + w] += share;
      }
    }
  }
}

// ---- adaptive average pooling -----------------------------------------------------------

// Sum of x[0..n) in double, in one fixed order whatever the instruction set: element j goes to
// lane j % 8 of eight accumulators (one AVX-512 register of doubles, two AVX2 or four SSE ones),
// the last n % 8 elements to a scalar, and the lanes meet in a fixed tree. The lanes break the
// chain of dependent adds that made a global pool (49 adds per plane, one after the other)
// cost twice PyTorch's time.
template <class T>
double run_sum(const T* x, int64_t n) {
  double lane[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
#pragma omp simd
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(x[j + k]);
  double tail = 0;
  for (; j < n; ++j) tail += static_cast<double>(x[j]);
  return (((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]))) + tail;
}

// The adaptive windows of one dim, [start[o], end[o]) for each output o, computed once per
// call: the divisions cost more than summing a small window (a global pool has 49 elements).
struct AdaptiveWindows {
  std::vector<int64_t> start, end;
  AdaptiveWindows(int64_t out, int64_t in) : start(out), end(out) {
    for (int64_t o = 0; o < out; ++o) {
      start[o] = adaptive_start(o, out, in);
      end[o] = adaptive_end(o, out, in);
    }
  }
};

// One kernel for 1-D, 2-D and 3-D: a 2-D pool is a 3-D one with D = Do = 1, a 1-D pool one
// with H = Ho = 1 too (windows [0, 1) there), so no dim is special-cased.
template <class T>
void adaptive_avg_pool3d_forward(const T* x, T* y, const AdaptivePoolParams& p) {
  const AdaptiveWindows wd(p.Do, p.D), wh(p.Ho, p.H), ww(p.Wo, p.W);
  const int64_t HW = p.H * p.W, plane_size = p.D * HW;
  // Every input position is read about once (more where windows overlap).
  const int64_t work = p.NC * (plane_size + p.Do * p.Ho * p.Wo), rows = p.NC * p.Do * p.Ho;
#pragma omp parallel if (parallel_forward(p.NC, p.Do * p.Ho, work))
  {
    // This thread's block of output rows (plane, od, oh), walked without a division per row.
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t r0 = rows / threads * t + std::min<int64_t>(t, rows % threads);
    const int64_t r1 = r0 + rows / threads + (t < rows % threads ? 1 : 0);
    const int64_t plane_rows = p.Do * p.Ho;  // both >= 1 (checked by the caller)
    int64_t plane = r0 / plane_rows, od = r0 % plane_rows / p.Ho, oh = r0 % plane_rows % p.Ho;
    for (int64_t r = r0; r < r1; ++r) {
      const T* xp = x + plane * plane_size;
      T* yr = y + r * p.Wo;
      const int64_t d0 = wd.start[od], d1 = wd.end[od], h0 = wh.start[oh], h1 = wh.end[oh];
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const int64_t w0 = ww.start[ow], w1 = ww.end[ow];
        double sum = 0;
        if (w1 - w0 == p.W && h1 - h0 == p.H) {  // whole planes (a global pool): one contiguous run
          sum = run_sum(xp + d0 * HW, (d1 - d0) * HW);
        } else if (w1 - w0 == p.W) {  // whole rows: one contiguous run per depth
          for (int64_t d = d0; d < d1; ++d) sum += run_sum(xp + d * HW + h0 * p.W, (h1 - h0) * p.W);
        } else {
          for (int64_t d = d0; d < d1; ++d)
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) sum += static_cast<double>(xp[d * HW + h * p.W + w]);
        }
        yr[ow] = static_cast<T>(sum / static_cast<double>((d1 - d0) * (h1 - h0) * (w1 - w0)));
      }
      if (++oh == p.Ho) {
        oh = 0;
        if (++od == p.Do) {
          od = 0;
          ++plane;
        }
      }
    }
  }
}

template <class T>
void adaptive_avg_pool3d_backward(const T* grad_y, T* grad_x, const AdaptivePoolParams& p) {
  const AdaptiveWindows wd(p.Do, p.D), wh(p.Ho, p.H), ww(p.Wo, p.W);
  const int64_t HW = p.H * p.W, plane_size = p.D * HW, out_plane = p.Do * p.Ho * p.Wo;
  // Windows that tile the input (each output size divides its input size) cover each position
  // once: it is written once, as 0 + share (the bits of the zeroing and the add below, -0
  // included).
  const bool tiles = p.D % p.Do == 0 && p.H % p.Ho == 0 && p.W % p.Wo == 0;
#pragma omp parallel for schedule(static) if (parallel_backward(p.NC, p.NC * (plane_size + out_plane)))
  for (int64_t plane = 0; plane < p.NC; ++plane) {
    T* dx = grad_x + plane * plane_size;
    const T* dy = grad_y + plane * out_plane;
    if (!tiles) std::memset(dx, 0, sizeof(T) * plane_size);
    for (int64_t od = 0; od < p.Do; ++od) {
      const int64_t d0 = wd.start[od], d1 = wd.end[od];
      for (int64_t oh = 0; oh < p.Ho; ++oh) {
        const int64_t h0 = wh.start[oh], h1 = wh.end[oh];
        for (int64_t ow = 0; ow < p.Wo; ++ow) {
          const int64_t w0 = ww.start[ow], w1 = ww.end[ow];
          // aten's order of divisions (a division by a depth of 1 is exact: 2-D's bits)
          const T share = dy[(od * p.Ho + oh) * p.Wo + ow] / static_cast<T>(d1 - d0) / static_cast<T>(h1 - h0) /
                          static_cast<T>(w1 - w0);
          for (int64_t d = d0; d < d1; ++d) {
            T* dxd = dx + d * HW;
            if (tiles && w1 - w0 == p.W) {  // whole rows: one contiguous run
              const T once = T(0) + share;
              T* run = dxd + h0 * p.W;
#pragma omp simd
              for (int64_t i = 0; i < (h1 - h0) * p.W; ++i) run[i] = once;
            } else if (tiles) {
              const T once = T(0) + share;
              for (int64_t h = h0; h < h1; ++h)
#pragma omp simd
                for (int64_t w = w0; w < w1; ++w) dxd[h * p.W + w] = once;
            } else {
              for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) dxd[h * p.W + w] += share;
            }
          }
        }
      }
    }
  }
}

#define TG_INSTANTIATE_POOL(T)                                                                                   \
  template void max_pool2d_forward<T>(const T*, T*, int64_t*, const Pool2dParams&);                              \
  template void max_pool2d_backward<T>(const T*, const int64_t*, T*, const Pool2dParams&);                       \
  template void max_pool2d_gather<T>(const T*, const int64_t*, T*, const Pool2dParams&);                         \
  template void avg_pool2d_forward<T>(const T*, T*, const Pool2dParams&, bool, int64_t);                         \
  template void avg_pool2d_backward<T>(const T*, T*, const Pool2dParams&, bool, int64_t);                        \
  template void adaptive_avg_pool3d_forward<T>(const T*, T*, const AdaptivePoolParams&);                      \
  template void adaptive_avg_pool3d_backward<T>(const T*, T*, const AdaptivePoolParams&);
TG_INSTANTIATE_POOL(float)
TG_INSTANTIATE_POOL(double)
#undef TG_INSTANTIATE_POOL

}  // namespace tg::kernels::TG_ISA_NS
