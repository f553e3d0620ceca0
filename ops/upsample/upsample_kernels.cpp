// Bilinear upsampling kernels; the shape legend and the coordinate maths are in
// upsample_kernels.h.
//
// Bilinear interpolation is separable: y = Lh * x * Lw^T per plane, where Lh (Ho x H) and
// Lw (Wo x W) have two non-zeros per row (the taps). The forward therefore interpolates input
// rows horizontally (each needed row once, kept in a two-row cache since consecutive output
// rows share input rows), then blends two such rows vertically: a contiguous, vectorised loop.
// (aten 1.13 instead sums the four products x * (lh * lw) in double for every output; the
// results agree to an ulp or two, see the header.)
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
// (widened_row) and rounds each output once as it stores the blend; the backward reads grad_y
// widened (load_op, ../internal/half_access.h) and rounds each grad_x once. All arithmetic is
// the float kernel's, so the result is its result on the widened input, rounded once.
#include "upsample_kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "../internal/half_access.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// Below this many output elements an OpenMP region costs more than it saves.
[[maybe_unused]] constexpr int64_t kParallelMin = 1 << 14;

// Row blocks per plane: one when the planes alone keep every thread busy, else enough blocks
// for ~4 work items per thread. Results do not depend on it (see the file comment).
// Rows of n elements of a thread's scratch (the forward's two interpolated rows), each starting
// on a 64-byte boundary: the vector loops store whole registers into them, and with
// std::vector's 16-byte alignment an AVX-512 store would straddle two cache lines.
template <class T>
class AlignedRows {
 public:
  AlignedRows(int64_t rows, int64_t n)
      : stride_(ceil_div(std::max<int64_t>(n, 1), kLine) * kLine), buf_(rows * stride_ + kLine) {
    const auto misalign = reinterpret_cast<std::uintptr_t>(buf_.data()) % 64;
    base_ = buf_.data() + (64 - misalign) % 64 / sizeof(T);
  }
  T* row(int64_t r) { return base_ + r * stride_; }

 private:
  static constexpr int64_t kLine = 64 / sizeof(T);
  int64_t stride_;
  std::vector<T> buf_;
  T* base_;
};

// The backward's row of vertical sums, placed anew for each input row 2 KB away (modulo 4 KB)
// from the first grad_y row it reads. A load whose address matches a pending store's in its
// low 12 bits waits for that store ("4K aliasing"): with the buffer at whatever address the
// heap gave, the vertical pass ran up to 1.3x slower on one path, in one build and not in
// another. Reads run at 4 bytes per element (float) and writes at 8, so the distance moves by
// 4 * Wo over a row; starting at 2 KB it stays clear for rows under ~500 elements.
class SumRow {
 public:
  explicit SumRow(int64_t n) : buf_(n + 4096 / sizeof(double)) {}
  double* away_from(const void* row) {
    const auto base = reinterpret_cast<std::uintptr_t>(buf_.data());
    const std::uintptr_t want = (reinterpret_cast<std::uintptr_t>(row) + 2048) % 4096 / 64 * 64;
    return buf_.data() + (want + 4096 - base % 4096) % 4096 / sizeof(double);
  }

 private:
  std::vector<double> buf_;
};

int64_t row_blocks(int64_t planes, int64_t rows) {
  const int64_t nt = max_threads();
  if (planes >= nt || rows <= 1) return 1;
  return std::min(rows, ceil_div(4 * nt, planes));
}

// aten's area_pixel_compute_scale<T>: the ratio is formed in T, as PyTorch does. Only
// align_corners maps out == 1 to scale 0 (the single output then samples x[0]); otherwise one
// output pixel samples the centre, in / 2 - 0.5.
template <class T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  return scale > 0 ? static_cast<T>(1.0 / scale) : static_cast<T>(in) / static_cast<T>(out);
}

// The source coordinate of output index dst. The scale is a T, but PyTorch 1.13 evaluates
// the coordinate in double (dst + 0.5 is a double) and rounds only the final weight to T; we
// checked this bit for bit against torch's weights (a coordinate rounded to float would
// quantise the weights to its ulp: errors ~1e-5 on a 300-pixel row).
template <class T>
double source_index(T scale, int64_t dst, bool align_corners) {
  if (align_corners) return static_cast<double>(scale) * static_cast<double>(dst);
  const double src = static_cast<double>(scale) * (dst + 0.5) - 0.5;
  return src < 0.0 ? 0.0 : src;
}

// The two taps of every output index along one dim.
template <class T>
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<T> l0, l1;
  // The same indices as int32 when the input dim fits (always, in practice): the forward's
  // gathers then fetch 16 floats per instruction instead of 8.
  std::vector<int32_t> i0_32, i1_32;
};

template <class T>
Taps<T> make_taps(int64_t in, int64_t out, bool align_corners, double scale_opt) {
  Taps<T> t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.l0.resize(out);
  t.l1.resize(out);
  const T scale = pixel_scale<T>(in, out, align_corners, scale_opt);
  for (int64_t d = 0; d < out; ++d) {
    if (in == out) {  // aten copies whatever the scale says
      t.i0[d] = t.i1[d] = d;
      t.l0[d] = T(1);
      t.l1[d] = T(0);
      continue;
    }
    const double src = source_index(scale, d, align_corners);
    // Written so that NaN or huge src (absurd user scales) lands on in - 1, never outside.
    const int64_t i0 = src < static_cast<double>(in - 1) ? static_cast<int64_t>(src) : in - 1;
    const T l1 = static_cast<T>(std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0));
    t.i0[d] = i0;
    t.i1[d] = i0 + (i0 < in - 1 ? 1 : 0);
    t.l1[d] = l1;
    t.l0[d] = T(1) - l1;
  }
  if (in <= INT32_MAX) {
    t.i0_32.assign(t.i0.begin(), t.i0.end());
    t.i1_32.assign(t.i1.begin(), t.i1.end());
  }
  return t;
}

// out[ow] = l0w * xr[i0w] + l1w * xr[i1w]: one input row interpolated along W.
template <class T, class I>
void interp_row(const T* xr, const I* i0, const I* i1, const T* l0, const T* l1, int64_t Wo,
                T* out) {
  for (int64_t ow = 0; ow < Wo; ++ow) {
    T v = xr[i0[ow]] * l0[ow];
    v += xr[i1[ow]] * l1[ow];  // aten's order: with FMA contraction, fma(x1, l1, x0 * l0)
    out[ow] = v;
  }
}

template <class T>
void interp_row(const T* xr, const Taps<T>& tw, int64_t Wo, T* out) {
  if (!tw.i0_32.empty())
    interp_row(xr, tw.i0_32.data(), tw.i1_32.data(), tw.l0.data(), tw.l1.data(), Wo, out);
  else
    interp_row(xr, tw.i0.data(), tw.i1.data(), tw.l0.data(), tw.l1.data(), Wo, out);
}

// The taps seen from the input side: for input index i, entries [start[i], start[i+1]) list
// the output indices that read i and with which weight, in increasing output index (tap 0
// before tap 1 when both taps hit i), which fixes the order of the backward's sums.
template <class T>
struct AdjointTaps {
  std::vector<int64_t> start, out;
  std::vector<T> w;
};

template <class T>
AdjointTaps<T> make_adjoint(const Taps<T>& t, int64_t in, int64_t out) {
  AdjointTaps<T> a;
  a.start.assign(in + 1, 0);
  for (int64_t d = 0; d < out; ++d) {
    ++a.start[t.i0[d] + 1];
    ++a.start[t.i1[d] + 1];
  }
  for (int64_t i = 0; i < in; ++i) a.start[i + 1] += a.start[i];
  a.out.resize(2 * out);
  a.w.resize(2 * out);
  std::vector<int64_t> fill(a.start.begin(), a.start.end() - 1);
  for (int64_t d = 0; d < out; ++d) {
    int64_t k = fill[t.i0[d]]++;
    a.out[k] = d;
    a.w[k] = t.l0[d];
    k = fill[t.i1[d]]++;
    a.out[k] = d;
    a.w[k] = t.l1[d];
  }
  return a;
}

// One input row widened to T's arithmetic type O: for the 16-bit types, into `buf` (a loop of
// shifts and selects that vectorises; the gathers then read floats, as in the float kernel);
// for float and double the row itself.
template <class T, class O>
const O* widened_row(const T* xr, int64_t W, std::vector<O>& buf) {
  if constexpr (std::is_same_v<T, O>) {
    return xr;
  } else {
#pragma omp simd
    for (int64_t k = 0; k < W; ++k) buf[k] = load_op(xr, k);
    return buf.data();
  }
}

}  // namespace

template <class T>
void upsample_bilinear2d_forward(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho,
                                 int64_t Wo, bool align_corners, double scales_h,
                                 double scales_w) {
  using O = opmath_t<T>;  // arithmetic type: float for the 16-bit types
  if (NC <= 0 || Ho <= 0 || Wo <= 0) return;
  if (H <= 0 || W <= 0) {  // nothing to interpolate from (rejected upstream); stay in bounds
    std::fill(y, y + NC * Ho * Wo, T(0.0f));
    return;
  }
  const Taps<O> th = make_taps<O>(H, Ho, align_corners, scales_h);
  const Taps<O> tw = make_taps<O>(W, Wo, align_corners, scales_w);
  const int64_t blocks = row_blocks(NC, Ho), rows_per_block = ceil_div(Ho, blocks);

#pragma omp parallel if (NC * Ho * Wo >= kParallelMin)
  {
    // Two horizontally interpolated input rows and which rows they hold.
    AlignedRows<O> cache(2, Wo);
    int64_t held[2];
    std::vector<O> wide(std::is_same_v<T, O> ? 0 : W);  // a 16-bit input row as floats
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      const T* xp = x + p * H * W;
      T* yp = y + p * Ho * Wo;
      held[0] = held[1] = -1;
      // The slot holding input row ih interpolated along W, computed unless already held;
      // slot `keep` (holding the other row this output row needs) is not overwritten.
      auto row = [&](int64_t ih, int keep) -> int {
        if (held[0] == ih) return 0;
        if (held[1] == ih) return 1;
        const int slot = keep == 0 ? 1 : 0;
        interp_row(widened_row(xp + ih * W, W, wide), tw, Wo, cache.row(slot));
        held[slot] = ih;
        return slot;
      };
      const int64_t oh_end = std::min(Ho, (b + 1) * rows_per_block);
      for (int64_t oh = b * rows_per_block; oh < oh_end; ++oh) {
        const int64_t h1 = th.i1[oh];
        const int s0 = row(th.i0[oh], held[0] == h1 ? 0 : (held[1] == h1 ? 1 : -1));
        const int s1 = row(h1, s0);
        const O* r0 = cache.row(s0);
        const O* r1 = cache.row(s1);
        const O l0 = th.l0[oh], l1 = th.l1[oh];
        T* yr = yp + oh * Wo;
#pragma omp simd
        for (int64_t ow = 0; ow < Wo; ++ow) {
          O v = r0[ow] * l0;
          v += r1[ow] * l1;
          store_op(yr, ow, v);
        }
      }
    }
  }
}

template <class T>
void upsample_bilinear2d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W,
                                  int64_t Ho, int64_t Wo, bool align_corners, double scales_h,
                                  double scales_w) {
  using O = opmath_t<T>;  // the weights' type: float for the 16-bit types
  if (NC <= 0 || H <= 0 || W <= 0) return;
  // With an empty grad_y (Ho or Wo = 0) every adjoint list is empty and grad_x is zeroed.
  const Taps<O> th = make_taps<O>(H, Ho, align_corners, scales_h);
  const Taps<O> tw = make_taps<O>(W, Wo, align_corners, scales_w);
  const AdjointTaps<O> ah = make_adjoint(th, H, Ho);
  const AdjointTaps<O> aw = make_adjoint(tw, W, Wo);
  const int64_t blocks = row_blocks(NC, H), rows_per_block = ceil_div(H, blocks);

#pragma omp parallel if (NC * Ho * Wo >= kParallelMin)
  {
    // One input row's worth of grad_y summed vertically, in double: the sums can be long
    // (every output row for H = 1) and double keeps float results exact to the last ulp.
    SumRow sums(Wo);
    // A 16-bit grad_x row in float, rounded in one vectorised pass (a scalar rounding per
    // element in the horizontal loop cost 10% of the backward).
    std::vector<O> row(std::is_same_v<T, O> ? 0 : W);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      const T* gyp = grad_y + p * Ho * Wo;
      T* gxp = grad_x + p * H * W;
      const int64_t ih_end = std::min(H, (b + 1) * rows_per_block);
      for (int64_t ih = b * rows_per_block; ih < ih_end; ++ih) {
        // acc = sum over the adjoint list of w * grad_y[oh, :], two rows per pass over acc
        // (half its loads and stores); the first pass assigns, which also clears acc.
        int64_t k = ah.start[ih];
        const int64_t k_end = ah.start[ih + 1];
        double* acc = sums.away_from(gyp + (k < k_end ? ah.out[k] * Wo : 0));
        double* a = acc;
        if (k == k_end) std::fill(acc, acc + Wo, 0.0);
        for (bool first = true; k < k_end; k += 2, first = false) {
          const T* g0 = gyp + ah.out[k] * Wo;
          const double w0 = static_cast<double>(ah.w[k]);
          // an odd list ends with a zero-weight repeat of its last row
          const T* g1 = k + 1 < k_end ? gyp + ah.out[k + 1] * Wo : g0;
          const double w1 = k + 1 < k_end ? static_cast<double>(ah.w[k + 1]) : 0.0;
          if (first) {
#pragma omp simd
            for (int64_t ow = 0; ow < Wo; ++ow)
              a[ow] = w0 * static_cast<double>(load_op(g0, ow)) + w1 * static_cast<double>(load_op(g1, ow));
          } else {
#pragma omp simd
            for (int64_t ow = 0; ow < Wo; ++ow)
              a[ow] += w0 * static_cast<double>(load_op(g0, ow)) + w1 * static_cast<double>(load_op(g1, ow));
          }
        }
        T* gx = gxp + ih * W;
        O* out;  // 16-bit: via float, as the float kernel's, then rounded once
        if constexpr (std::is_same_v<T, O>) out = gx; else out = row.data();
        for (int64_t iw = 0; iw < W; ++iw) {
          double s = 0.0;
          for (int64_t k = aw.start[iw]; k < aw.start[iw + 1]; ++k)
            s += static_cast<double>(aw.w[k]) * acc[aw.out[k]];
          out[iw] = static_cast<O>(s);
        }
        if constexpr (!std::is_same_v<T, O>) store_row(out, W, gx);
      }
    }
  }
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

}  // namespace tg::kernels::TG_ISA_NS
