// What the upsampling kernels share (bilinear, linear, trilinear, bicubic): aten's source-index
// and weight rules as tap tables, and the separable row passes built on them. Included by the
// kernel files only, so everything lives in each instruction set's namespace (TG_ISA_NS).
//
// Every mode is separable: along each dim, output index d reads K input indices (the taps: 2
// for linear, 4 for cubic) with K weights, and the N-d result is the 1-d rule applied dim by
// dim, innermost (W) first, as aten's generic CPU kernel nests its sums. The backward is the
// adjoint: each input index lists the outputs that read it (AdjointTaps) and gathers their
// gradients in a fixed order, so no thread writes what another owns and no atomics are needed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../../framework/parallel.h"
#include "../../internal/half_access.h"
#include "../../internal/isa_dispatch.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tg::kernels::TG_ISA_NS::upsample {

// Below this many output elements an OpenMP region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 14;

// Rows of n elements of a thread's scratch, each starting on a 64-byte boundary: the vector
// loops store whole registers into them, and with std::vector's 16-byte alignment an AVX-512
// store would straddle two cache lines.
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

// The backward's row of vertical sums (A = double, or float for the 16-bit types), placed anew
// for each input row 2 KB away (modulo 4 KB) from the first grad_y row it reads. A load whose
// address matches a pending store's in its low 12 bits waits for that store ("4K aliasing"):
// with the buffer at whatever address the heap gave, the vertical pass ran up to 1.3x slower on
// one path, in one build and not in another. The distance moves by the difference of the read
// and write widths per element over a row (4 bytes for float reads and double sums); starting at
// 2 KB it stays clear for rows under ~500 elements.
template <class A>
class SumRow {
 public:
  explicit SumRow(int64_t n) : buf_(n + 4096 / sizeof(A)) {}
  A* away_from(const void* row) {
    const auto base = reinterpret_cast<std::uintptr_t>(buf_.data());
    const std::uintptr_t want = (reinterpret_cast<std::uintptr_t>(row) + 2048) % 4096 / 64 * 64;
    return buf_.data() + (want + 4096 - base % 4096) % 4096 / sizeof(A);
  }

 private:
  std::vector<A> buf_;
};

// Blocks of rows per plane: one when the planes alone keep every thread busy, else enough
// blocks for ~4 work items per thread. Results do not depend on it (each output is computed
// by one thread in a fixed order).
inline int64_t row_blocks(int64_t planes, int64_t rows) {
  const int64_t nt = max_threads();
  if (planes >= nt || rows <= 1) return 1;
  return std::min(rows, ceil_div(4 * nt, planes));
}

// aten's area_pixel_compute_scale<T>: the ratio is formed in T, as PyTorch does. Only
// align_corners maps out == 1 to scale 0 (the single output then samples x[0]); otherwise one
// output pixel samples the centre, in / 2 - 0.5. scale <= 0 means no user scale.
template <class T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  return scale > 0 ? static_cast<T>(1.0 / scale) : static_cast<T>(in) / static_cast<T>(out);
}

// The source coordinate of output index dst, before linear's clamp at 0 (cubic keeps negative
// coordinates). The scale is a T, but PyTorch 1.13 evaluates the coordinate in double (its
// accscalar_t) and rounds only the final weights to T; we checked this bit for bit against
// torch's linear weights (a coordinate rounded to float would quantise the weights to its ulp:
// errors ~1e-5 on a 300-pixel row). Cubic's coordinate is taken the same way.
template <class T>
double source_coordinate(T scale, int64_t dst, bool align_corners) {
  if (align_corners) return static_cast<double>(scale) * static_cast<double>(dst);
  return static_cast<double>(scale) * (static_cast<double>(dst) + 0.5) - 0.5;
}

// The K taps of every output index along one dim: out[d] = sum_j w[j][d] * in[idx[j][d]].
template <class T, int K>
struct Taps {
  std::vector<int64_t> idx[K];
  std::vector<T> w[K];
  // Tap 0 alone counts (weight 1): the height axis of a 1-D linear interpolation, which has
  // none (aten's 1-D kernel never forms 0 * x, so an Inf stays Inf there). Read by the row
  // blends and the adjoint, the only users of a height axis's taps.
  bool only_first = false;
  // The same indices as int32 when the input dim fits (always, in practice): the forward's
  // gathers then fetch 16 floats per instruction instead of 8.
  std::vector<int32_t> idx32[K];

  explicit Taps(int64_t out) {
    for (int j = 0; j < K; ++j) {
      idx[j].resize(out);
      w[j].resize(out);
    }
  }
  // The same taps per block of kWindow outputs as a window of the input row: the block reads
  // only x[base[b] .. base[b] + 2 kWindow), and rel[j] holds idx[j] - base[b] (padded with 0 to
  // whole blocks). The AVX-512 copy then fetches a block's taps with two loads and one permute
  // per tap (vpermt2ps) instead of scalar loads: GCC emits no gathers for interp_row, and a
  // gather costs more than the permute. Empty when some block spans more (downsampling).
  // win_mask[3 b .. 3 b + 2] are the block's lane masks: the window's two halves that lie in
  // the row (x[base .. base + 16) and x[base + 16 .. base + 32) cut at `in`), and its outputs
  // (cut at `out`); tables rather than branches, since they change from block to block.
  static constexpr int64_t kWindow = 16;
  std::vector<int32_t> win_base, win_rel[K];
  std::vector<uint16_t> win_mask;

  void make_index32(int64_t in) {
    if (in > INT32_MAX) return;
    for (int j = 0; j < K; ++j) idx32[j].assign(idx[j].begin(), idx[j].end());
    make_windows(in);
  }

 private:
  static uint16_t first_lanes(int64_t n) {
    return n >= kWindow ? uint16_t(0xffff) : n <= 0 ? uint16_t(0) : static_cast<uint16_t>((1u << n) - 1);
  }
  void make_windows(int64_t in) {
    const auto out = static_cast<int64_t>(idx[0].size());
    const int64_t blocks = (out + kWindow - 1) / kWindow;
    win_base.assign(blocks, 0);
    win_mask.assign(3 * blocks, 0);
    for (int j = 0; j < K; ++j) win_rel[j].assign(blocks * kWindow, 0);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t end = std::min(out, (b + 1) * kWindow);
      int64_t lo = idx[0][b * kWindow], hi = lo;
      for (int64_t d = b * kWindow; d < end; ++d)
        for (int j = 0; j < K; ++j) lo = std::min(lo, idx[j][d]), hi = std::max(hi, idx[j][d]);
      if (hi - lo >= 2 * kWindow) {
        win_base.clear();
        return;
      }
      win_base[b] = static_cast<int32_t>(lo);
      win_mask[3 * b] = first_lanes(in - lo);
      win_mask[3 * b + 1] = first_lanes(in - lo - kWindow);
      win_mask[3 * b + 2] = first_lanes(out - b * kWindow);
      for (int64_t d = b * kWindow; d < end; ++d)
        for (int j = 0; j < K; ++j) win_rel[j][d] = static_cast<int32_t>(idx[j][d] - lo);
    }
  }
};

// Linear (2 taps): aten's compute_source_index_and_lambda. in == out copies whatever the scale
// says; the coordinate is clamped at 0; i0 = min(floor(src), in - 1), i1 = min(i0 + 1, in - 1),
// w1 = clamp(src - i0, 0, 1), w0 = 1 - w1.
template <class T>
Taps<T, 2> make_linear_taps(int64_t in, int64_t out, bool align_corners, double scale_opt) {
  Taps<T, 2> t(out);
  const T scale = pixel_scale<T>(in, out, align_corners, scale_opt);
  for (int64_t d = 0; d < out; ++d) {
    if (in == out) {  // aten copies whatever the scale says
      t.idx[0][d] = t.idx[1][d] = d;
      t.w[0][d] = T(1);
      t.w[1][d] = T(0);
      continue;
    }
    double src = source_coordinate(scale, d, align_corners);
    src = src < 0.0 ? 0.0 : src;
    // Written so that NaN or huge src (absurd user scales) lands on in - 1, never outside.
    const int64_t i0 = src < static_cast<double>(in - 1) ? static_cast<int64_t>(src) : in - 1;
    const T l1 = static_cast<T>(std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0));
    t.idx[0][d] = i0;
    t.idx[1][d] = i0 + (i0 < in - 1 ? 1 : 0);
    t.w[1][d] = l1;
    t.w[0][d] = T(1) - l1;
  }
  t.make_index32(in);
  return t;
}

// Cubic (4 taps): aten's HelperInterpCubic. No copy shortcut and no clamp of the coordinate:
// i = floor(src), t = src - i, taps i-1 .. i+2 clamped to [0, in - 1] (border replication),
// weights get_cubic_upsample_coefficients(t) with A = -0.75. aten evaluates the polynomials in
// T; we evaluate them in double and round each weight once: their terms (~3) cancel to weights
// near 0, so in float the result moved by up to ~2e-7 with FMA contraction (the instruction-set
// copies disagreed by 1.2e-6 relative on outputs), and double is the nearer to exact.
template <class T>
Taps<T, 4> make_cubic_taps(int64_t in, int64_t out, bool align_corners, double scale_opt) {
  Taps<T, 4> t(out);
  const T scale = pixel_scale<T>(in, out, align_corners, scale_opt);
  constexpr double A = -0.75;
  auto conv1 = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };          // |x| <= 1
  auto conv2 = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 < |x| < 2
  for (int64_t d = 0; d < out; ++d) {
    const double src = source_coordinate(scale, d, align_corners);
    const double fl = std::floor(src);
    // NaN or absurd coordinates (from absurd user scales) stay bounded: every tap then clamps.
    const int64_t i = !(fl >= -4.0) ? -4 : (fl > static_cast<double>(in) + 4.0 ? in + 4 : static_cast<int64_t>(fl));
    const double x1 = src - fl, x2 = 1 - x1;
    const double w[4] = {conv2(x1 + 1), conv1(x1), conv1(x2), conv2(x2 + 1)};
    for (int j = 0; j < 4; ++j) {
      t.idx[j][d] = std::min(std::max<int64_t>(i - 1 + j, 0), in - 1);
      t.w[j][d] = static_cast<T>(w[j]);
    }
  }
  t.make_index32(in);
  return t;
}

// The tap table of the mode with K taps: linear (2) or cubic (4).
template <class T, int K>
Taps<T, K> make_taps(int64_t in, int64_t out, bool align_corners, double scale_opt) {
  static_assert(K == 2 || K == 4, "linear or cubic");
  if constexpr (K == 2) return make_linear_taps<T>(in, out, align_corners, scale_opt);
  else return make_cubic_taps<T>(in, out, align_corners, scale_opt);
}

// The height axis of a 1-D interpolation: one row, copied (only_first).
template <class T, int K>
Taps<T, K> single_row_taps() {
  Taps<T, K> t(1);
  for (int j = 0; j < K; ++j) t.idx[j][0] = 0, t.w[j][0] = T(j == 0 ? 1 : 0);
  t.only_first = true;
  t.make_index32(1);
  return t;
}

// The taps seen from the input side: for input index i, entries [start[i], start[i+1]) list
// the output indices that read i and with which weight, in increasing output index (tap 0
// before tap 1 ... when several taps of one output hit i), which fixes the order of the
// backward's sums.
template <class T>
struct AdjointTaps {
  std::vector<int64_t> start, out;
  std::vector<T> w;
};

template <class T, int K>
AdjointTaps<T> make_adjoint(const Taps<T, K>& t, int64_t in, int64_t out) {
  AdjointTaps<T> a;
  const int taps = t.only_first ? 1 : K;
  a.start.assign(in + 1, 0);
  for (int64_t d = 0; d < out; ++d)
    for (int j = 0; j < taps; ++j) ++a.start[t.idx[j][d] + 1];
  for (int64_t i = 0; i < in; ++i) a.start[i + 1] += a.start[i];
  a.out.resize(taps * out);
  a.w.resize(taps * out);
  std::vector<int64_t> fill(a.start.begin(), a.start.end() - 1);
  for (int64_t d = 0; d < out; ++d)
    for (int j = 0; j < taps; ++j) {
      const int64_t k = fill[t.idx[j][d]]++;
      a.out[k] = d;
      a.w[k] = t.w[j][d];
    }
  return a;
}

// out[ow] = sum_j w[j][ow] * xr[idx[j][ow]]: one input row interpolated along W, the taps
// summed in order (aten's: with FMA contraction, fma(x1, w1, x0 * w0) and so on).
template <class T, int K, class I>
void interp_row(const T* xr, const I* const* idx, const T* const* w, int64_t Wo, T* out) {
  for (int64_t ow = 0; ow < Wo; ++ow) {
    T v = xr[idx[0][ow]] * w[0][ow];
    for (int j = 1; j < K; ++j) v += xr[idx[j][ow]] * w[j][ow];
    out[ow] = v;
  }
}

#if defined(__AVX512F__)
// 16 elements of a row of S = float, BFloat16 or Float16 as floats (exact), lanes outside `m`
// zero and never read: a 16-bit value widens in the load (bf16: its bits shifted up by 16).
template <class S>
__m512 load16_as_float(const S* p, __mmask16 m) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if constexpr (std::is_same_v<S, BFloat16>) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else return _mm512_cvtph_ps(h);
  }
}

// A block's window of an input row, x[base .. base + 32) (lanes past the row's end zero, never
// read), and pick(rel): the 16 inputs x[base + rel[l]] of one tap as floats. float and float16
// keep the window as two registers of floats (float16 widened in the load) and pick with one
// vpermt2ps; bfloat16 keeps its 32 words in one register and picks each lane's word straight
// into the lane's high half, the low half zeroed (vpermw with a zeroing mask): the permute is
// the widening.
template <class S>
struct RowWindow {
  __m512 lo, hi;
  RowWindow(const S* p, __mmask16 m_lo, __mmask16 m_hi)
      : lo(load16_as_float(p, m_lo)), hi(load16_as_float(p + 16, m_hi)) {}
  __m512 pick(__m512i rel) const { return _mm512_permutex2var_ps(lo, rel, hi); }
};
template <>
struct RowWindow<BFloat16> {
  __m512i words;
  RowWindow(const BFloat16* p, __mmask16 m_lo, __mmask16 m_hi)
      : words(_mm512_maskz_loadu_epi16(m_lo | (static_cast<__mmask32>(m_hi) << 16), p)) {}
  __m512 pick(__m512i rel) const {
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xaaaaaaaa, _mm512_slli_epi32(rel, 16), words));
  }
};

// interp_row on a windowed tap table (Taps::win_base), 16 outputs a step, reading the row of S
// itself (no widened copy): the block's window of the row in registers (masked loads, so never
// past the row's end), each tap's inputs picked by one permute, then the same products summed
// in the same order as the scalar loop, fused as GCC contracts it on this copy,
// fma(x1, w1, x0 * w0): the bits are the scalar loop's.
template <class S, int K>
void interp_row_windowed(const S* xr, const Taps<float, K>& tw, int64_t Wo, float* out) {
  constexpr int64_t L = Taps<float, K>::kWindow;
  static_assert(L == 16, "a window is 32 elements: two registers of floats, or one of 16-bit words");
  // The tables' addresses in locals: read through tw, GCC reloaded them after every store to
  // out (which might alias them), a load waiting on each store.
  const uint16_t* mask = tw.win_mask.data();
  const int32_t* base = tw.win_base.data();
  const int32_t* rel[K];
  const float* wt[K];
  for (int j = 0; j < K; ++j) rel[j] = tw.win_rel[j].data(), wt[j] = tw.w[j].data();
  for (int64_t b = 0, ow = 0; ow < Wo; ++b, ow += L) {
    const RowWindow<S> window(xr + base[b], mask[3 * b], mask[3 * b + 1]);
    const __mmask16 m_out = mask[3 * b + 2];
    auto x = [&](int j) { return window.pick(_mm512_loadu_si512(rel[j] + ow)); };  // tap j's inputs
    auto w = [&](int j) { return _mm512_maskz_loadu_ps(m_out, wt[j] + ow); };
    __m512 v = _mm512_mul_ps(x(0), w(0));
    for (int j = 1; j < K; ++j) v = _mm512_fmadd_ps(x(j), w(j), v);
    _mm512_mask_storeu_ps(out + ow, m_out, v);
  }
}
#endif

template <class T, int K>
void interp_row(const T* xr, const Taps<T, K>& tw, int64_t Wo, T* out) {
  const T* w[K];
  for (int j = 0; j < K; ++j) w[j] = tw.w[j].data();
  if (!tw.idx32[0].empty()) {
    const int32_t* idx[K];
    for (int j = 0; j < K; ++j) idx[j] = tw.idx32[j].data();
    interp_row<T, K>(xr, idx, w, Wo, out);
  } else {
    const int64_t* idx[K];
    for (int j = 0; j < K; ++j) idx[j] = tw.idx[j].data();
    interp_row<T, K>(xr, idx, w, Wo, out);
  }
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

// Input row xr (W elements of T) interpolated along W into out (Wo floats, or doubles for T =
// double): on the AVX-512 copy straight from the row for float and the 16-bit types when the
// taps fit windows, else through the widened row and the scalar loop.
template <class T, int K>
void interp_input_row(const T* xr, int64_t W, const Taps<opmath_t<T>, K>& tw, int64_t Wo, opmath_t<T>* out,
                      std::vector<opmath_t<T>>& wide) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<opmath_t<T>, float>) {
    if (!tw.win_base.empty()) return interp_row_windowed<T, K>(xr, tw, Wo, out);
  }
#endif
  interp_row<opmath_t<T>, K>(widened_row(xr, W, wide), tw, Wo, out);
}

// A thread's scratch for the 2-d forward: K input rows interpolated along W (input row ih in
// slot ih % K: the K taps of one output row are consecutive rows, clamped, so they never share
// a slot), and a 16-bit input row widened to float.
template <class T, int K>
struct ForwardScratch {
  using O = opmath_t<T>;
  AlignedRows<O> rows;
  int64_t held[K];
  std::vector<O> wide;
  ForwardScratch(int64_t W, int64_t Wo) : rows(K, Wo), wide(std::is_same_v<T, O> ? 0 : W) { forget(); }
  void forget() { std::fill(held, held + K, int64_t{-1}); }  // before a new plane
};

// Output rows [oh_begin, oh_end) of one plane, xp (H, W) -> yp (Ho, Wo): each needed input row
// interpolated along W once (while it stays in the scratch), then K rows blended along H in a
// contiguous, vectorised loop. Y is T (rounded once) or O (an intermediate, for trilinear).
template <class T, int K, class Y>
void forward_rows(const T* xp, int64_t W, const Taps<opmath_t<T>, K>& th, const Taps<opmath_t<T>, K>& tw,
                  int64_t Wo, int64_t oh_begin, int64_t oh_end, Y* yp, ForwardScratch<T, K>& s) {
  using O = opmath_t<T>;
  for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
    const O* r[K];
    O wt[K];
    for (int j = 0; j < K; ++j) {
      const int64_t ih = th.idx[j][oh];
      const int slot = static_cast<int>(ih % K);
      if (s.held[slot] != ih) {
        interp_input_row<T, K>(xp + ih * W, W, tw, Wo, s.rows.row(slot), s.wide);
        s.held[slot] = ih;
      }
      r[j] = s.rows.row(slot);
      wt[j] = th.w[j][oh];
    }
    const int taps = th.only_first ? 1 : K;
    Y* yr = yp + oh * Wo;
    int64_t ow = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Y, BFloat16>) {  // the same blend, rounded 32 lanes at a time
      auto blend = [&](int64_t c) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(r[0] + c), _mm512_set1_ps(wt[0]));
        for (int j = 1; j < taps; ++j) v = _mm512_fmadd_ps(_mm512_loadu_ps(r[j] + c), _mm512_set1_ps(wt[j]), v);
        return v;
      };
      for (; ow + 32 <= Wo; ow += 32)
        _mm512_storeu_si512(yr + ow, float_to_bf16_x32(blend(ow), blend(ow + 16)));
      if (ow + 16 <= Wo) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr + ow), float_to_bf16_x16(blend(ow)));
        ow += 16;
      }
    }
#endif
#pragma omp simd
    for (int64_t c = ow; c < Wo; ++c) {
      O v = r[0][c] * wt[0];
      for (int j = 1; j < taps; ++j) v += r[j][c] * wt[j];
      store_op(yr, c, v);
    }
  }
}

// The sums' type of the backward for gradients of type G: double for float and double (exact to
// the last ulp of a float result, however long the sums: every output row for H = 1), float for
// the 16-bit types, whose results keep 8 or 11 bits (float sums are also what PyTorch's
// reduced-precision kernels use) and whose vectors then hold 16 sums instead of 8.
template <class G>
using SumType = std::conditional_t<std::is_same_v<opmath_t<G>, G>, double, float>;

// The horizontal adjoint of a row as a table for gathers, 16 input indices a block: entry
// (block b, slot j, lane l) is the j-th output (in the adjoint's order) that input b * 16 + l
// receives from, with its weight, and bit l of mask[b * slots + j] says whether it has a j-th.
// Built for the AVX-512 copy's 16-bit backward, where the scalar loop over the adjoint lists
// took most of the time; empty (slots == 0) when some input index is read by so many outputs
// (far upsampling) that padding every input to that count would cost more than it saves.
struct GatherAdjoint {
  static constexpr int64_t kLanes = 16;
  int64_t slots = 0;
  std::vector<int32_t> out;
  std::vector<float> w;
  std::vector<uint16_t> mask;
};

inline GatherAdjoint make_gather_adjoint(const AdjointTaps<float>& a, int64_t in, int64_t out_size) {
  constexpr int64_t L = GatherAdjoint::kLanes;
  GatherAdjoint g;
  int64_t slots = 0;
  for (int64_t i = 0; i < in; ++i) slots = std::max(slots, a.start[i + 1] - a.start[i]);
  const int64_t blocks = ceil_div(in, L);
  if (slots == 0 || out_size > INT32_MAX || blocks * L * slots > 4 * (out_size + in) + 1024) return g;
  g.slots = slots;
  g.out.assign(blocks * slots * L, 0);
  g.w.assign(blocks * slots * L, 0.0f);
  g.mask.assign(blocks * slots, 0);
  for (int64_t i = 0; i < in; ++i) {
    const int64_t b = i / L, l = i % L;
    for (int64_t j = 0; j < a.start[i + 1] - a.start[i]; ++j) {
      const int64_t e = (b * slots + j) * L + l, k = a.start[i] + j;
      g.out[e] = static_cast<int32_t>(a.out[k]);
      g.w[e] = a.w[k];
      g.mask[b * slots + j] |= static_cast<uint16_t>(1u << l);
    }
  }
  return g;
}

#if defined(__AVX512F__)
// out[i] = sum over the adjoint list of i of w * acc[output], 16 inputs a step: slot by slot, a
// masked gather of the outputs' sums and a masked multiply-add, so each input adds its terms in
// the list's order, as the scalar loop does.
inline void gather_adjoint_row(const float* acc, const GatherAdjoint& g, int64_t in, float* out) {
  constexpr int64_t L = GatherAdjoint::kLanes;
  for (int64_t b = 0, i = 0; i < in; ++b, i += L) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < g.slots; ++j) {
      const int64_t e = (b * g.slots + j) * L;
      const __mmask16 m = g.mask[b * g.slots + j];
      if (m == 0) break;  // later slots have no more inputs than this one
      const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, _mm512_loadu_si512(g.out.data() + e), acc, 4);
      sum = _mm512_mask3_fmadd_ps(_mm512_loadu_ps(g.w.data() + e), v, sum, m);
    }
    _mm512_mask_storeu_ps(out + i, static_cast<__mmask16>(in - i >= L ? 0xffff : (1u << (in - i)) - 1), sum);
  }
}
#endif

// A thread's scratch for the 2-d backward: the vertical sums (double, or float for 16-bit
// gradients) and a 16-bit grad_x row in float, rounded in one vectorised pass (a scalar
// rounding per element in the horizontal loop cost 10% of the backward).
template <class T>
struct BackwardScratch {
  SumRow<double> sums;
  SumRow<float> sums16;
  std::vector<opmath_t<T>> row;
  BackwardScratch(int64_t W, int64_t Wo)
      : sums(Wo), sums16(std::is_same_v<T, opmath_t<T>> ? 0 : Wo), row(std::is_same_v<T, opmath_t<T>> ? 0 : W) {}
  template <class A>
  A* sum_row(const void* near) {
    if constexpr (std::is_same_v<A, double>) return sums.away_from(near); else return sums16.away_from(near);
  }
};

// Input rows [ih_begin, ih_end) of one plane's gradient: gyp (Ho, Wo) of G = T or double ->
// gxp (H, W) of T. Each input row sums the gradient rows that read it (vertical, vectorised, in
// SumType<G>), then each input pixel sums the columns that read it (horizontal; with gathers
// when `gather` holds a table).
template <class T, class G>
void backward_rows(const G* gyp, int64_t Wo, const AdjointTaps<opmath_t<T>>& ah,
                   const AdjointTaps<opmath_t<T>>& aw, int64_t W, int64_t ih_begin, int64_t ih_end, T* gxp,
                   BackwardScratch<T>& s, [[maybe_unused]] const GatherAdjoint* gather = nullptr) {
  using O = opmath_t<T>;
  using A = SumType<G>;
  for (int64_t ih = ih_begin; ih < ih_end; ++ih) {
    // acc = sum over the adjoint list of w * grad_y[oh, :], two rows per pass over acc (half
    // its loads and stores); the first pass assigns, which also clears acc.
    int64_t k = ah.start[ih];
    const int64_t k_end = ah.start[ih + 1];
    A* acc = s.template sum_row<A>(gyp + (k < k_end ? ah.out[k] * Wo : 0));
    A* a = acc;
    if (k == k_end) std::fill(acc, acc + Wo, A(0));
    for (bool first = true; k < k_end; k += 2, first = false) {
      const G* g0 = gyp + ah.out[k] * Wo;
      const A w0 = static_cast<A>(ah.w[k]);
      // an odd list ends with a zero-weight repeat of its last row
      const G* g1 = k + 1 < k_end ? gyp + ah.out[k + 1] * Wo : g0;
      const A w1 = k + 1 < k_end ? static_cast<A>(ah.w[k + 1]) : A(0);
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<A, float> && !std::is_same_v<G, float>) {
        // 16-bit rows widened in the loads (GCC leaves float16's widening scalar in the loop
        // below); the same expression on vectors, so the same contraction
        const __m512 v0 = _mm512_set1_ps(w0), v1 = _mm512_set1_ps(w1);
        for (int64_t ow = 0; ow < Wo; ow += 16) {
          const auto m = static_cast<__mmask16>(Wo - ow >= 16 ? 0xffff : (1u << (Wo - ow)) - 1);
          __m512 t = v0 * load16_as_float(g0 + ow, m) + v1 * load16_as_float(g1 + ow, m);
          if (!first) t = _mm512_maskz_loadu_ps(m, a + ow) + t;
          _mm512_mask_storeu_ps(a + ow, m, t);
        }
        continue;
      }
#endif
      if (first) {
#pragma omp simd
        for (int64_t ow = 0; ow < Wo; ++ow)
          a[ow] = w0 * static_cast<A>(load_op(g0, ow)) + w1 * static_cast<A>(load_op(g1, ow));
      } else {
#pragma omp simd
        for (int64_t ow = 0; ow < Wo; ++ow)
          a[ow] += w0 * static_cast<A>(load_op(g0, ow)) + w1 * static_cast<A>(load_op(g1, ow));
      }
    }
    T* gx = gxp + ih * W;
    O* out;  // 16-bit: via float, as the float kernel's, then rounded once
    if constexpr (std::is_same_v<T, O>) out = gx; else out = s.row.data();
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, float>) {
      if (gather && gather->slots > 0) {
        gather_adjoint_row(acc, *gather, W, out);
        store_row(out, W, gx);
        continue;
      }
    }
#endif
    for (int64_t iw = 0; iw < W; ++iw) {
      A sum = 0;
      for (int64_t j = aw.start[iw]; j < aw.start[iw + 1]; ++j) sum += static_cast<A>(aw.w[j]) * acc[aw.out[j]];
      out[iw] = static_cast<O>(sum);
    }
    if constexpr (!std::is_same_v<T, O>) store_row(out, W, gx);
  }
}

// The 2-d forward and backward over NC planes, threaded over (plane, block of rows); the
// bilinear and bicubic kernels are these with 2 and 4 taps.
template <class T, int K>
void separable_forward_2d(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                          const Taps<opmath_t<T>, K>& th, const Taps<opmath_t<T>, K>& tw) {
  const int64_t blocks = row_blocks(NC, Ho), rows_per_block = ceil_div(Ho, blocks);
#pragma omp parallel if (NC * Ho * Wo >= kParallelMin)
  {
    ForwardScratch<T, K> s(W, Wo);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      s.forget();
      forward_rows<T, K>(x + p * H * W, W, th, tw, Wo, b * rows_per_block, std::min(Ho, (b + 1) * rows_per_block),
                         y + p * Ho * Wo, s);
    }
  }
}

template <class T>
void separable_backward_2d(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                           const AdjointTaps<opmath_t<T>>& ah, const AdjointTaps<opmath_t<T>>& aw) {
  const int64_t blocks = row_blocks(NC, H), rows_per_block = ceil_div(H, blocks);
  GatherAdjoint gather;
#if defined(__AVX512F__)
  if constexpr (!std::is_same_v<T, opmath_t<T>>) gather = make_gather_adjoint(aw, W, Wo);
#endif
#pragma omp parallel if (NC * Ho * Wo >= kParallelMin)
  {
    BackwardScratch<T> s(W, Wo);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < NC * blocks; ++item) {
      const int64_t p = item / blocks, b = item % blocks;
      backward_rows<T>(grad_y + p * Ho * Wo, Wo, ah, aw, W, b * rows_per_block, std::min(H, (b + 1) * rows_per_block),
                       grad_x + p * H * W, s, &gather);
    }
  }
}

}  // namespace tg::kernels::TG_ISA_NS::upsample
