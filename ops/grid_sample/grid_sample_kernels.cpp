// grid_sample (2-D) and affine_grid (2-D) kernels. Semantics and shape legend: see the header.
// One axis's coordinate maths (Axis) and the cubic coefficients are in
// grid_sample_kernels_shared.h, shared with the second-order kernel in
// grid_sample_kernels_double_backward.cpp.
//
// How the work is organised
// -------------------------
// The output positions (Ho * Wo of them per sample) are cut into blocks of kBlock. For a
// block, a "sampler" first computes each position's taps once: the plane offsets of the
// pixels it reads (-1 for a pixel outside the image, which then reads as 0) and their
// weights. Then, channel by channel, it runs a loop over the block's positions that reads
// the taps from that table, so the coordinate arithmetic is done once and not C times.
// The loop is contiguous in the output, grad_output and the table; only the input (or
// grad_input) is accessed at data-dependent offsets, within one channel plane per pass,
// which keeps that plane in cache even when the grid is random.
//
// Forward: the blocks of all samples form one parallel loop; each block owns its output.
//
// Backward: grad_grid is a sum over channels at each position, grad_input a scatter-add
// over positions into each channel plane. Without atomics, a thread must own what it
// writes, so:
//   * grad_grid is computed per block of positions (the block owns grad_grid there),
//     summing the channels in order 0..C-1;
//   * grad_input is computed per (sample, range of channels): the item owns those
//     planes, and scatters into them walking the positions in order 0..P-1.
// Neither order depends on how the work is cut, so the result is bit-identical for any
// number of threads and with or without OpenMP. When there are enough samples for every
// thread (N a multiple of the thread count, or N large), both gradients are computed in
// one pass per sample ("fused"), which computes the taps and reads grad_output once;
// it performs exactly the same additions in the same order as the split passes.
//
// Instruction sets: this file and grid_sample_kernels_double_backward.cpp are compiled once per
// instruction set (ops/internal/isa_dispatch.h), grid_sample_dispatch.cpp holds the public entry
// points. With no contraction and no auto-vectorisation (below) every copy does the same scalar
// arithmetic, so all paths give the same bits (std::fma is an instruction in the AVX2 and
// AVX-512 copies, a library call in the generic one).
//
// 16-bit storage (BFloat16, Float16; forward and first-order backward): the samplers run in
// float32, exactly as for float tensors, on float32 copies a thread makes as it goes (Widened):
// the input planes of the channels in hand, once per block of positions, and the block's
// grad_output rows; the block's output rows are summed into float32 rows and rounded once.
// The grid is read, and grad_grid written, in 16 bits (load_op / store_op,
// ../internal/half_access.h). grad_input is summed in a float32 buffer of the work item
// (PlaneSums) and rounded when the item is done. (Reading the 16-bit values at each tap instead
// made the scalar tap loops 1.7x slower than float32's: three instructions per load instead
// of one, and a scalar rounding per output.)
// Except bilinear bfloat16 in the AVX-512 copy: its output and grid gradient read the bfloat16
// planes in place, 16 positions at a time, one 32-bit gather lane fetching both taps of a row
// (BilinearSampler::sample_bf16, RowPairs), with the same float arithmetic, so the same bits;
// grad_output is still widened a row at a time and grad_input summed in PlaneSums.
// Bilinear tap tables from a float32 or bfloat16 grid under zeros and border padding are
// computed 16 grid points at a time in the AVX-512 copy (BilinearSampler::prepare_x16, the
// scalar steps as vector operations: the same tables). Measured on the bench's 8x32x64x64 case
// (bench/README.md, 2026-11-27): bf16 about 0.4x float32's time forward and 0.55-0.67x backward.
#include "grid_sample_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"
#include "internal/grid_sample_drivers.h"

// Compiler settings for this file, whatever the build flags:
// * No implicit fused multiply-add contraction. The sampling position goes through
//   floor, round and clip, whose results jump at integers and borders: a coordinate
//   computed one ulp differently from PyTorch can land on the other pixel, and the
//   bilinear grid gradient then differs by O(1) instead of O(ulp). The one place where
//   PyTorch's build does fuse (Axis::unnormalize) uses std::fma explicitly.
// * No auto-vectorisation (GCC): the loops over positions read the input at
//   data-dependent offsets, and GCC turns them into AVX-512 gathers that were measured
//   1.3x (bilinear grid gradient) to 2.5x slower than the scalar loads here.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#endif

namespace tg::kernels::TG_ISA_NS {
namespace {

using namespace gs_detail;  // Axis, tap_value, cubic coefficients, kBlock, acc_t, the drivers

// ---------------------------------------------------------------------------------------
// Samplers: one per interpolation mode. Each holds the tap table of one block of output
// positions and offers
//   prepare(grid, len, backward)   taps of `len` positions whose grid points start at grid
//   sample<K>(in, out, len)        forward of K consecutive channels
//   backward<K, kInput, kGrid>(in, gout, gin, len)
//                                  K consecutive channels: grad_input += (a scatter,
//                                  positions in order) and / or the grid-gradient
//                                  sums += (channels in order)
//   clear_sums(len), finish(grad_grid, len)   start / write the block's grid gradient
// Pointers are at the first of the K channels; the next channel is HW further on in
// input / grad_input and P further on in output / grad_output. Each position's taps are
// read once for the K channels (K = 2 was measured 10-30% faster than K = 1).
//
// A position whose taps are all inside the image (the usual case) takes a fast path that
// reads its neighbourhood from one base offset; the others read each tap through its own
// offset, where -1 means "outside, reads as 0, never dereferenced". The loops over
// positions are load-bound and scalar on purpose (see the pragma at the top).
// Idx is int32_t when a plane has fewer than 2^31 pixels, to halve the offset tables.
// ---------------------------------------------------------------------------------------

#if defined(__AVX512F__)
// Where the bilinear sampler's bfloat16 path (BilinearSampler::sample_bf16) finds the two taps of
// each row: per position and row (north, south), where the row's 32-bit word starts (at), and
// per group of 16 positions and tap (nw, ne, sw, se), which lanes take the word's low half (lo)
// or its high half (hi); a tap outside is in neither and reads 0. The word always lies in the
// plane (of at least 2 pixels): it starts at the west tap when both taps are inside, else one
// element before the inside tap (or at 0). Kept apart from the sampler, and owned by the driver
// for bfloat16 tensors only, so that the float32 code is untouched.
struct RowPairs {
  std::vector<int32_t> at = std::vector<int32_t>(2 * kBlock);     // [2][B]
  std::vector<uint16_t> lo = std::vector<uint16_t>(4 * kBlock / 16);  // [4][B / 16]
  std::vector<uint16_t> hi = std::vector<uint16_t>(4 * kBlock / 16);  // [4][B / 16]

  // off: the sampler's [4][B] tap offsets (-1 outside) of len positions. 16 positions at a time;
  // lanes past len: at 0, no tap.
  void fill(const int32_t* off, int64_t len) {
    const __m512i minus_one = _mm512_set1_epi32(-1), zero = _mm512_setzero_si512();
    for (int64_t p = 0; p < len; p += 16) {
      const __mmask16 lanes = len - p >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - p)) - 1);
      for (int r = 0; r < 2; ++r) {
        const __m512i ow = _mm512_mask_loadu_epi32(minus_one, lanes, &off[2 * r * kBlock + p]);
        const __m512i oe = _mm512_mask_loadu_epi32(minus_one, lanes, &off[(2 * r + 1) * kBlock + p]);
        const __mmask16 in_w = _mm512_cmpge_epi32_mask(ow, zero), in_e = _mm512_cmpge_epi32_mask(oe, zero);
        // Both inside: the west tap; else one before the inside one (or at 0).
        const __m512i one_in = _mm512_mask_mov_epi32(oe, in_w, ow);
        const __m512i a = _mm512_mask_mov_epi32(_mm512_max_epi32(_mm512_sub_epi32(one_in, _mm512_set1_epi32(1)), zero),
                                                in_w & in_e, ow);
        _mm512_storeu_si512(&at[r * kBlock + p], a);
        const __m512i o[2] = {ow, oe};
        const __mmask16 in[2] = {in_w, in_e};
        for (int t = 0; t < 2; ++t) {
          const __mmask16 low = in[t] & _mm512_cmpeq_epi32_mask(o[t], a);
          lo[(2 * r + t) * kBlock / 16 + p / 16] = low;
          hi[(2 * r + t) * kBlock / 16 + p / 16] = in[t] & ~low;
        }
      }
    }
  }
};
#endif

template <class TS, class Idx>
struct BilinearSampler {
  using T = opmath_t<TS>;
  static constexpr bool kHasGridGrad = true;
  static constexpr int kCoords = 2;
  static constexpr int kTaps = 4;
  using Acc = acc_t<T>;

  Axis<T> ax, ay;
  int64_t W, HW, P;
  // Taps in the order nw, ne, sw, se (north = smaller y, west = smaller x).
  std::vector<Idx> base;          // [B] offset of nw if all 4 taps are inside, else -1
  std::vector<Idx> off;           // [4][B] offset of each tap (used when base < 0)
  std::vector<T> wt;              // [4][B] interpolation weights
  std::vector<T> fx, fy;          // [B] x - floor(x), y - floor(y) (backward)
  std::vector<T> mult_x, mult_y;  // [B] d source / d grid (backward)
  std::vector<Acc> gx, gy;        // [B] grid-gradient sums (backward)

  BilinearSampler(const Extent& e, int64_t P_, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), W(e.W), HW(e.plane()),
        P(P_), base(kBlock), off(4 * kBlock), wt(4 * kBlock) {}

  template <class G>
  void prepare(const G* grid, int64_t len, bool backward) {
    if (backward && fx.empty()) {
      for (auto* v : {&fx, &fy, &mult_x, &mult_y}) v->resize(kBlock);
      gx.resize(kBlock);
      gy.resize(kBlock);
    }
#if defined(__AVX512F__)
    if constexpr ((std::is_same_v<G, BFloat16> || std::is_same_v<G, float>) && std::is_same_v<T, float> &&
                  kReadsBFloat16) {
      if (ax.padding != GridSamplePadding::Reflection && (ay.size + 2) * W + 2 <= std::numeric_limits<int32_t>::max()) {
        prepare_x16(grid, len, backward);
        return;
      }
    }
#endif
    const bool zeros = ax.padding == GridSamplePadding::Zeros;
    for (int64_t p = 0; p < len; ++p) {
      T x, y;
      if (backward) {
        x = ax.source_grad(load_op(grid, 2 * p), &mult_x[p]);
        y = ay.source_grad(load_op(grid, 2 * p + 1), &mult_y[p]);
      } else {
        x = ax.source(load_op(grid, 2 * p));
        y = ay.source(load_op(grid, 2 * p + 1));
      }
      const T x_w = std::floor(x), y_n = std::floor(y);
      const T w = x - x_w, e = T(1) - w;  // distance to the west / east neighbour
      const T n = y - y_n, s = T(1) - n;  // distance to the north / south neighbour
      wt[0 * kBlock + p] = s * e;
      wt[1 * kBlock + p] = s * w;
      wt[2 * kBlock + p] = n * e;
      wt[3 * kBlock + p] = n * w;
      if (backward) {
        fx[p] = w;
        fy[p] = n;
      }
      // With border / reflection x, y are in [0, size - 1], so only the east and south
      // taps can fall outside (when x or y sits on the last pixel, with weight 0).
      const int64_t ix = zeros ? ax.floor_index(x_w) : int64_t(x_w);
      const int64_t iy = zeros ? ay.floor_index(y_n) : int64_t(y_n);
      const bool in_w = ix >= 0 && ix < ax.size, in_e = ix + 1 >= 0 && ix + 1 < ax.size;
      const bool in_n = iy >= 0 && iy < ay.size, in_s = iy + 1 >= 0 && iy + 1 < ay.size;
      const int64_t b = iy * W + ix;
      base[p] = Idx(in_n && in_s && in_w && in_e ? b : -1);
      off[0 * kBlock + p] = Idx(in_n && in_w ? b : -1);
      off[1 * kBlock + p] = Idx(in_n && in_e ? b + 1 : -1);
      off[2 * kBlock + p] = Idx(in_s && in_w ? b + W : -1);
      off[3 * kBlock + p] = Idx(in_s && in_e ? b + W + 1 : -1);
    }
  }

#if defined(__AVX512F__)
  // prepare() for a float32 or bfloat16 grid under zeros or border padding, 16 positions at a
  // time: every step is the scalar one as a vector operation (the fused unnormalisation, the
  // clip and its derivative, floor, the weights' products, floor_index's bounds, the offsets in
  // int32, which the caller has checked cannot overflow), so the same tables bit for bit.
  // The m <= 16 points' x and y from grid + 2p: a bfloat16 grid's x and y are a 32-bit word's
  // low and high halves (widened by a shift and a mask); a float32 grid's, the even and odd
  // elements of two registers.
  static void grid_x16(const BFloat16* grid, int64_t p, int64_t m, __m512* gx, __m512* gy) {
    const __m512i u = _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << (2 * m)) - 1), grid + 2 * p);
    *gx = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    *gy = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(int32_t(0xffff0000u))));
  }
  static void grid_x16(const float* grid, int64_t p, int64_t m, __m512* gx, __m512* gy) {
    const uint32_t both = uint32_t((uint64_t(1) << (2 * m)) - 1);  // 2m elements
    const __m512 lo = _mm512_maskz_loadu_ps(__mmask16(both & 0xffff), grid + 2 * p);
    const __m512 hi = _mm512_maskz_loadu_ps(__mmask16(both >> 16), grid + 2 * p + 16);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *gx = _mm512_permutex2var_ps(lo, even, hi);
    *gy = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
  }
  template <class G>
  void prepare_x16(const G* grid, int64_t len, bool backward) {
    const bool zeros = ax.padding == GridSamplePadding::Zeros;
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    const __m512i minus_one = _mm512_set1_epi32(-1), width = _mm512_set1_epi32(static_cast<int32_t>(W));
    // One axis: the source coordinate c, its derivative d (backward) and floor(c)'s index i,
    // floor(c) in f and whether the lower (lo) and upper (hi) neighbours are inside.
    struct AxisTaps {
      __m512 c, d, f;
      __mmask16 lo, hi;
      __m512i i;
    };
    auto axis = [&](const Axis<T>& a, __m512 g) {
      AxisTaps r;
      const __m512 scale = _mm512_set1_ps(a.scale), max_val = _mm512_set1_ps(a.max_val);
      const __m512 t = _mm512_add_ps(g, one);
      __m512 x = a.align_corners ? _mm512_mul_ps(t, scale) : _mm512_fmadd_ps(t, scale, _mm512_set1_ps(-0.5f));
      if (zeros) {
        r.d = scale;
      } else {  // border: clip_grad (a NaN fails both tests: clipped to 0, derivative 0)
        const __mmask16 inside = _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ) & _mm512_cmp_ps_mask(x, max_val, _CMP_LT_OQ);
        r.d = _mm512_maskz_mov_ps(inside, scale);
        x = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), x);
        x = _mm512_mask_mov_ps(max_val, _mm512_cmp_ps_mask(x, max_val, _CMP_LT_OQ), x);
      }
      r.c = x;
      r.f = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __m512i i = _mm512_cvttps_epi32(r.f);  // only lanes within floor_index's bounds are kept
      r.i = zeros ? _mm512_mask_mov_epi32(_mm512_set1_epi32(-2),
                                          _mm512_cmp_ps_mask(r.f, _mm512_set1_ps(-1.0f), _CMP_GE_OQ) &
                                              _mm512_cmp_ps_mask(r.f, max_val, _CMP_LE_OQ),
                                          i)
                  : i;
      const __m512i size = _mm512_set1_epi32(static_cast<int32_t>(a.size));
      const __m512i i1 = _mm512_add_epi32(r.i, _mm512_set1_epi32(1));
      r.lo = _mm512_cmpgt_epi32_mask(r.i, minus_one) & _mm512_cmplt_epi32_mask(r.i, size);
      r.hi = _mm512_cmpgt_epi32_mask(i1, minus_one) & _mm512_cmplt_epi32_mask(i1, size);
      return r;
    };
    for (int64_t p = 0; p < len; p += 16) {
      const int64_t m = std::min<int64_t>(16, len - p);
      const __mmask16 lanes = __mmask16((1u << m) - 1);
      __m512 gx, gy;
      grid_x16(grid, p, m, &gx, &gy);
      const AxisTaps tx = axis(ax, gx), ty = axis(ay, gy);
      const __m512 w = _mm512_sub_ps(tx.c, tx.f), e = _mm512_sub_ps(one, w);
      const __m512 n = _mm512_sub_ps(ty.c, ty.f), s = _mm512_sub_ps(one, n);
      _mm512_mask_storeu_ps(&wt[p], lanes, _mm512_mul_ps(s, e));
      _mm512_mask_storeu_ps(&wt[kBlock + p], lanes, _mm512_mul_ps(s, w));
      _mm512_mask_storeu_ps(&wt[2 * kBlock + p], lanes, _mm512_mul_ps(n, e));
      _mm512_mask_storeu_ps(&wt[3 * kBlock + p], lanes, _mm512_mul_ps(n, w));
      if (backward) {
        _mm512_mask_storeu_ps(&fx[p], lanes, w);
        _mm512_mask_storeu_ps(&fy[p], lanes, n);
        _mm512_mask_storeu_ps(&mult_x[p], lanes, tx.d);
        _mm512_mask_storeu_ps(&mult_y[p], lanes, ty.d);
      }
      const __m512i b = _mm512_add_epi32(_mm512_mullo_epi32(ty.i, width), tx.i);
      const __m512i bs = _mm512_add_epi32(b, width);
      const __m512i one_i = _mm512_set1_epi32(1);
      _mm512_mask_storeu_epi32(&base[p], lanes, _mm512_mask_mov_epi32(minus_one, ty.lo & ty.hi & tx.lo & tx.hi, b));
      _mm512_mask_storeu_epi32(&off[p], lanes, _mm512_mask_mov_epi32(minus_one, ty.lo & tx.lo, b));
      _mm512_mask_storeu_epi32(&off[kBlock + p], lanes,
                               _mm512_mask_mov_epi32(minus_one, ty.lo & tx.hi, _mm512_add_epi32(b, one_i)));
      _mm512_mask_storeu_epi32(&off[2 * kBlock + p], lanes, _mm512_mask_mov_epi32(minus_one, ty.hi & tx.lo, bs));
      _mm512_mask_storeu_epi32(&off[3 * kBlock + p], lanes,
                               _mm512_mask_mov_epi32(minus_one, ty.hi & tx.hi, _mm512_add_epi32(bs, one_i)));
    }
  }
#endif

  // The 2x2 neighbourhood (nw, ne, sw, se) of position p, base b, in one plane.
  void load(const TS* plane, Idx b, int64_t p, T v[4]) const {
    if (b >= 0) {
      const TS* r = plane + b;
      v[0] = load_op(r, 0);
      v[1] = load_op(r, 1);
      v[2] = load_op(r, W);
      v[3] = load_op(r, W + 1);
    } else {
      for (int k = 0; k < 4; ++k) v[k] = tap_value(plane, off[k * kBlock + p]);
    }
  }

  template <int K>
  void sample(const TS* in, TS* out, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      const T w0 = wt[p], w1 = wt[kBlock + p], w2 = wt[2 * kBlock + p], w3 = wt[3 * kBlock + p];
      for (int k = 0; k < K; ++k) {
        T v[4];
        load(in + k * HW, b, p, v);
        store_op(out, k * P + p, v[0] * w0 + v[1] * w1 + v[2] * w2 + v[3] * w3);
      }
    }
  }

#if defined(__AVX512F__)
  // bfloat16 planes read in place, 16 positions at a time (AVX-512, 32-bit offsets; the driver
  // uses it when a plane has at least 2 pixels, with the RowPairs that pair_taps() fills from
  // the block's tap offsets after prepare()). A row's two taps (x0, x0 + 1) are neighbours
  // in memory, so one 32-bit gather lane fetches both: two gathers per 16 outputs instead of
  // 64 scalar loads, and no float32 copy of the planes. A bfloat16 widens exactly to its bits
  // shifted up by 16: the element at the lane's offset is the word's low half (shift left 16),
  // the next one its high half (and 0xffff0000). The sums are sample()'s, operation for
  // operation ((nw + ne) + sw) + se, each rounded once to bfloat16: the same bits.
  static constexpr bool kReadsBFloat16 = std::is_same_v<Idx, int32_t>;

  using Pairs = RowPairs;
  void pair_taps(int64_t len, RowPairs& q) const { q.fill(off.data(), len); }
  template <int K>
  void sample_bf16(const RowPairs& q, const BFloat16* in, BFloat16* out, int64_t len) const {
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    for (int64_t p = 0; p < len; p += 16) {
      const __mmask16 lanes = len - p >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - p)) - 1);
      const __m512i at_n = _mm512_loadu_si512(&q.at[p]), at_s = _mm512_loadu_si512(&q.at[kBlock + p]);
      __m512 w[4];
      __mmask16 l[4], h[4];
      for (int t = 0; t < 4; ++t) {
        w[t] = _mm512_loadu_ps(&wt[t * kBlock + p]);
        l[t] = q.lo[t * kBlock / 16 + p / 16];
        h[t] = q.hi[t * kBlock / 16 + p / 16];
      }
      auto tap = [&](__m512i word, int t) {
        return _mm512_castsi512_ps(_mm512_mask_and_epi32(_mm512_maskz_slli_epi32(l[t], word, 16), h[t], word, high));
      };
      for (int k = 0; k < K; ++k) {
        const void* plane = in + k * HW;
        const __m512i north = _mm512_i32gather_epi32(at_n, plane, 2);
        const __m512i south = _mm512_i32gather_epi32(at_s, plane, 2);
        __m512 r = _mm512_add_ps(_mm512_mul_ps(tap(north, 0), w[0]), _mm512_mul_ps(tap(north, 1), w[1]));
        r = _mm512_add_ps(r, _mm512_mul_ps(tap(south, 2), w[2]));
        r = _mm512_add_ps(r, _mm512_mul_ps(tap(south, 3), w[3]));
        _mm256_mask_storeu_epi16(out + k * P + p, lanes, float_to_bf16_x16(r));
      }
    }
  }

  // backward<K, false, true>() with the bfloat16 planes read in place as in sample_bf16 (gout:
  // float32 rows), 16 positions at a time: the same float products per channel, each widened to
  // double and added to the position's sums in channel order.
  template <int K>
  void grid_grad_bf16(const RowPairs& q, const BFloat16* in, const T* gout, int64_t len) {
    static_assert(std::is_same_v<Acc, double>);
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t p = 0; p < len; p += 16) {
      const __mmask16 lanes = len - p >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - p)) - 1);
      const __m512i at_n = _mm512_loadu_si512(&q.at[p]), at_s = _mm512_loadu_si512(&q.at[kBlock + p]);
      __mmask16 l[4], h[4];
      for (int t = 0; t < 4; ++t) {
        l[t] = q.lo[t * kBlock / 16 + p / 16];
        h[t] = q.hi[t * kBlock / 16 + p / 16];
      }
      auto tap = [&](__m512i word, int t) {
        return _mm512_castsi512_ps(_mm512_mask_and_epi32(_mm512_maskz_slli_epi32(l[t], word, 16), h[t], word, high));
      };
      const __m512 w = _mm512_loadu_ps(&fx[p]), n = _mm512_loadu_ps(&fy[p]);
      const __m512 e = _mm512_sub_ps(one, w), s = _mm512_sub_ps(one, n);
      __m512d sx[2] = {_mm512_loadu_pd(&gx[p]), _mm512_loadu_pd(&gx[p + 8])};
      __m512d sy[2] = {_mm512_loadu_pd(&gy[p]), _mm512_loadu_pd(&gy[p + 8])};
      for (int k = 0; k < K; ++k) {
        const void* plane = in + k * HW;
        const __m512i north = _mm512_i32gather_epi32(at_n, plane, 2);
        const __m512i south = _mm512_i32gather_epi32(at_s, plane, 2);
        const __m512 v0 = tap(north, 0), v1 = tap(north, 1), v2 = tap(south, 2), v3 = tap(south, 3);
        const __m512 g = _mm512_loadu_ps(&gout[k * P + p]);
        const __m512 tx = _mm512_mul_ps(
            _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v1, v0), s), _mm512_mul_ps(_mm512_sub_ps(v3, v2), n)), g);
        const __m512 ty = _mm512_mul_ps(
            _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v2, v0), e), _mm512_mul_ps(_mm512_sub_ps(v3, v1), w)), g);
        sx[0] = _mm512_add_pd(sx[0], _mm512_cvtps_pd(_mm512_castps512_ps256(tx)));
        sx[1] = _mm512_add_pd(sx[1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(tx), 1))));
        sy[0] = _mm512_add_pd(sy[0], _mm512_cvtps_pd(_mm512_castps512_ps256(ty)));
        sy[1] = _mm512_add_pd(sy[1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ty), 1))));
      }
      _mm512_mask_storeu_pd(&gx[p], __mmask8(lanes), sx[0]);
      _mm512_mask_storeu_pd(&gx[p + 8], __mmask8(lanes >> 8), sx[1]);
      _mm512_mask_storeu_pd(&gy[p], __mmask8(lanes), sy[0]);
      _mm512_mask_storeu_pd(&gy[p + 8], __mmask8(lanes >> 8), sy[1]);
    }
  }
#endif

  template <int K, bool kInput, bool kGrid>
  void backward(const TS* in, const TS* gout, T* gin, int64_t len) {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      const T w0 = wt[p], w1 = wt[kBlock + p], w2 = wt[2 * kBlock + p], w3 = wt[3 * kBlock + p];
      Acc sx = kGrid ? gx[p] : Acc(0), sy = kGrid ? gy[p] : Acc(0);
      for (int k = 0; k < K; ++k) {
        const T g = load_op(gout, k * P + p);
        if constexpr (kInput) {  // the transpose of sample(): scatter g times the weights
          T* plane = gin + k * HW;
          if (b >= 0) {
            T* r = plane + b;
            r[0] += w0 * g;
            r[1] += w1 * g;
            r[W] += w2 * g;
            r[W + 1] += w3 * g;
          } else {
            for (int t = 0; t < 4; ++t) {
              const Idx o = off[t * kBlock + p];
              if (o >= 0) plane[o] += wt[t * kBlock + p] * g;
            }
          }
        }
        if constexpr (kGrid) {  // d out / d x = (ne - nw) * s + (se - sw) * n, same for y
          T v[4];
          load(in + k * HW, b, p, v);
          const T w = fx[p], e = T(1) - w, n = fy[p], s = T(1) - n;
          sx += Acc(((v[1] - v[0]) * s + (v[3] - v[2]) * n) * g);
          sy += Acc(((v[2] - v[0]) * e + (v[3] - v[1]) * w) * g);
        }
      }
      if constexpr (kGrid) {
        gx[p] = sx;
        gy[p] = sy;
      }
    }
  }

  void clear_sums(int64_t len) {
    std::fill(gx.begin(), gx.begin() + len, Acc(0));
    std::fill(gy.begin(), gy.begin() + len, Acc(0));
  }

  template <class G>
  void finish(G* grad_grid, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      store_op(grad_grid, 2 * p, T(gx[p] * Acc(mult_x[p])));
      store_op(grad_grid, 2 * p + 1, T(gy[p] * Acc(mult_y[p])));
    }
  }
};

// Nearest: NearestSampler in internal/grid_sample_drivers.h, shared with the 3-D kernels.
template <class TS, class Idx>
using Nearest2dSampler = NearestSampler<TS, Idx, 2>;

template <class TS, class Idx>
struct BicubicSampler {
  using T = opmath_t<TS>;
  static constexpr bool kHasGridGrad = true;
  static constexpr int kCoords = 2;
  static constexpr int kTaps = 16;
  using Acc = acc_t<T>;

  Axis<T> ax, ay;
  int64_t W, HW, P;
  // The 4x4 neighbourhood is separable: column offsets of the 4 x taps and row offsets
  // (iy * W) of the 4 y taps, each padded on its own and -1 when outside.
  std::vector<Idx> base;     // [B] offset of the top-left tap if the 16 taps are inside
                             //     and untouched by padding, else -1
  std::vector<Idx> xo, yo;   // [4][B] (used when base < 0)
  std::vector<T> cx, cy;     // [4][B] cubic coefficients
  std::vector<T> gcx, gcy;   // [4][B] their derivatives (backward)
  std::vector<Acc> gx, gy;   // [B] grid-gradient sums (backward)

  BicubicSampler(const Extent& e, int64_t P_, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), W(e.W), HW(e.plane()),
        P(P_), base(kBlock), xo(4 * kBlock), yo(4 * kBlock), cx(4 * kBlock), cy(4 * kBlock) {}

  template <class G>
  void prepare(const G* grid, int64_t len, bool backward) {
    if (backward && gcx.empty()) {
      gcx.resize(4 * kBlock);
      gcy.resize(4 * kBlock);
      gx.resize(kBlock);
      gy.resize(kBlock);
    }
    for (int64_t p = 0; p < len; ++p) {
      // The sample point itself is not padded; each tap is.
      const T x = ax.unnormalize(load_op(grid, 2 * p));
      const T y = ay.unnormalize(load_op(grid, 2 * p + 1));
      const T fx = std::floor(x), fy = std::floor(y);
      T c[4];
      cubic_coefficients(x - fx, c);
      for (int k = 0; k < 4; ++k) cx[k * kBlock + p] = c[k];
      cubic_coefficients(y - fy, c);
      for (int k = 0; k < 4; ++k) cy[k * kBlock + p] = c[k];
      bool contiguous = true;
      for (int k = 0; k < 4; ++k) {
        const int64_t col = ax.index(ax.pad(fx + T(k - 1)));
        const int64_t row = ay.index(ay.pad(fy + T(k - 1)));
        xo[k * kBlock + p] = Idx(col);
        yo[k * kBlock + p] = Idx(row >= 0 ? row * W : -1);
        contiguous = contiguous && col >= 0 && row >= 0 && col == xo[p] + k &&
                     row * W == yo[p] + k * W;
      }
      base[p] = Idx(contiguous ? yo[p] + xo[p] : -1);
      if (backward) {
        cubic_coefficients_grad(x - fx, c);
        for (int k = 0; k < 4; ++k) gcx[k * kBlock + p] = c[k];
        cubic_coefficients_grad(y - fy, c);
        for (int k = 0; k < 4; ++k) gcy[k * kBlock + p] = c[k];
      }
    }
  }

  // The 4x4 neighbourhood of position p, base b, in one plane: v[row][column].
  void load(const TS* plane, Idx b, int64_t p, T v[4][4]) const {
    if (b >= 0) {
      const TS* r = plane + b;
      for (int j = 0; j < 4; ++j, r += W)
        for (int i = 0; i < 4; ++i) v[j][i] = load_op(r, i);
    } else {
      for (int j = 0; j < 4; ++j) {
        const Idx row = yo[j * kBlock + p];
        for (int i = 0; i < 4; ++i) {
          const Idx col = xo[i * kBlock + p];
          v[j][i] = (row >= 0 && col >= 0) ? load_op(plane, row + col) : T(0);
        }
      }
    }
  }

  void coefficients(const std::vector<T>& table, int64_t p, T c[4]) const {
    for (int k = 0; k < 4; ++k) c[k] = table[k * kBlock + p];
  }

  template <int K>
  void sample(const TS* in, TS* out, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      T wx[4], wy[4];
      coefficients(cx, p, wx);
      coefficients(cy, p, wy);
      for (int k = 0; k < K; ++k) {
        T v[4][4], rows[4];
        load(in + k * HW, b, p, v);
        for (int j = 0; j < 4; ++j)  // along x in each row, then along y
          rows[j] = wx[0] * v[j][0] + wx[1] * v[j][1] + wx[2] * v[j][2] + wx[3] * v[j][3];
        store_op(out, k * P + p, wy[0] * rows[0] + wy[1] * rows[1] + wy[2] * rows[2] + wy[3] * rows[3]);
      }
    }
  }

  template <int K, bool kInput, bool kGrid>
  void backward(const TS* in, const TS* gout, T* gin, int64_t len) {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      T wx[4], wy[4], dx[4], dy[4];
      coefficients(cx, p, wx);
      coefficients(cy, p, wy);
      if constexpr (kGrid) {
        coefficients(gcx, p, dx);
        coefficients(gcy, p, dy);
      }
      Acc sx = kGrid ? gx[p] : Acc(0), sy = kGrid ? gy[p] : Acc(0);
      for (int k = 0; k < K; ++k) {
        const T g = load_op(gout, k * P + p);
        if constexpr (kInput) {
          T* plane = gin + k * HW;
          for (int i = 0; i < 4; ++i) {
            const Idx col = xo[i * kBlock + p];
            for (int j = 0; j < 4; ++j) {
              const T d = g * wx[i] * wy[j];
              if (b >= 0) {
                plane[b + j * W + i] += d;
              } else {
                const Idx row = yo[j * kBlock + p];
                if (row >= 0 && col >= 0) plane[row + col] += d;
              }
            }
          }
        }
        if constexpr (kGrid) {
          T v[4][4];
          load(in + k * HW, b, p, v);
          T tx = T(0), ty = T(0);
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) {
              const T vg = v[j][i] * g;
              tx -= vg * dx[i] * wy[j];
              ty -= vg * dy[j] * wx[i];
            }
          }
          sx += Acc(tx);
          sy += Acc(ty);
        }
      }
      if constexpr (kGrid) {
        gx[p] = sx;
        gy[p] = sy;
      }
    }
  }

  void clear_sums(int64_t len) {
    std::fill(gx.begin(), gx.begin() + len, Acc(0));
    std::fill(gy.begin(), gy.begin() + len, Acc(0));
  }

  // Padding acts on the taps, so the sample point's derivative is never clipped.
  template <class G>
  void finish(G* grad_grid, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      store_op(grad_grid, 2 * p, T(gx[p] * Acc(ax.scale)));
      store_op(grad_grid, 2 * p + 1, T(gy[p] * Acc(ay.scale)));
    }
  }
};

}  // namespace

template <class T>
void grid_sample_2d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C,
                            int64_t H, int64_t W, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners) {
  const int64_t P = Ho * Wo;
  if (N * C * P == 0) return;
  if (H <= 0 || W <= 0) {  // nothing to read: every tap is outside
    std::fill(output, output + N * C * P, T(0));
    return;
  }
  switch (mode) {
    case GridSampleMode::Bilinear:
      dispatch_forward<BilinearSampler>(input, grid, output, N, C, Extent{1, H, W}, P, padding,
                                        align_corners);
      break;
    case GridSampleMode::Nearest:
      dispatch_forward<Nearest2dSampler>(input, grid, output, N, C, Extent{1, H, W}, P, padding,
                                       align_corners);
      break;
    case GridSampleMode::Bicubic:
      dispatch_forward<BicubicSampler>(input, grid, output, N, C, Extent{1, H, W}, P, padding,
                                       align_corners);
      break;
  }
}

template <class T>
void grid_sample_2d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input,
                             T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding,
                             bool align_corners) {
  const int64_t P = Ho * Wo;
  if (grad_input == nullptr && grad_grid == nullptr) return;
  if (N * P == 0 || H <= 0 || W <= 0) {
    // No positions, or nothing to sample from: the gradients are zero (or empty).
    if (grad_input) std::fill(grad_input, grad_input + N * C * std::max<int64_t>(H * W, 0), T(0));
    if (grad_grid) std::fill(grad_grid, grad_grid + N * P * 2, T(0));
    return;
  }
  switch (mode) {
    case GridSampleMode::Bilinear:
      dispatch_backward<BilinearSampler>(grad_output, input, grid, grad_input, grad_grid, N, C,
                                        Extent{1, H, W}, P, padding, align_corners);
      break;
    case GridSampleMode::Nearest:
      dispatch_backward<Nearest2dSampler>(grad_output, input, grid, grad_input, grad_grid, N, C,
                                       Extent{1, H, W}, P, padding, align_corners);
      break;
    case GridSampleMode::Bicubic:
      dispatch_backward<BicubicSampler>(grad_output, input, grid, grad_input, grad_grid, N, C,
                                       Extent{1, H, W}, P, padding, align_corners);
      break;
  }
}

template <class T>
void affine_grid_2d_forward(const T* theta, T* grid, int64_t N, int64_t H, int64_t W,
                            bool align_corners) {
  const std::vector<T> xs = linspace_from_neg_one<T>(W, align_corners);
  const std::vector<T> ys = linspace_from_neg_one<T>(H, align_corners);
#pragma omp parallel for schedule(static) if (N * H * W >= kParallelWork)
  for (int64_t r = 0; r < N * H; ++r) {  // one output row (n, h) per iteration
    const T* th = theta + (r / H) * 6;
    const T y = ys[r % H];
    T* g = grid + r * W * 2;
    // Base point (x, y, 1) times theta^T, in the order of PyTorch's bmm.
    for (int64_t w = 0; w < W; ++w) {
      g[2 * w] = xs[w] * th[0] + y * th[1] + th[2];
      g[2 * w + 1] = xs[w] * th[3] + y * th[4] + th[5];
    }
  }
}

template <class T>
void affine_grid_2d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t H, int64_t W,
                             bool align_corners) {
  using Acc = acc_t<T>;
  const std::vector<T> xs = linspace_from_neg_one<T>(W, align_corners);
  const std::vector<T> ys = linspace_from_neg_one<T>(H, align_corners);
  // Per row (n, h): sums over w of g_x * x_w, g_x, g_y * x_w, g_y. Rows are then summed in
  // order, so the result does not depend on how rows are shared among threads.
  std::vector<Acc> rows(N * H * 4);
#pragma omp parallel for schedule(static) if (N * H * W >= kParallelWork)
  for (int64_t r = 0; r < N * H; ++r) {
    const T* g = grad_grid + r * W * 2;
    Acc gxx = 0, gx = 0, gyx = 0, gy = 0;
    for (int64_t w = 0; w < W; ++w) {
      gxx += Acc(g[2 * w]) * Acc(xs[w]);
      gx += Acc(g[2 * w]);
      gyx += Acc(g[2 * w + 1]) * Acc(xs[w]);
      gy += Acc(g[2 * w + 1]);
    }
    Acc* o = &rows[r * 4];
    o[0] = gxx;
    o[1] = gx;
    o[2] = gyx;
    o[3] = gy;
  }
  for (int64_t n = 0; n < N; ++n) {
    Acc t[6] = {0, 0, 0, 0, 0, 0};
    for (int64_t h = 0; h < H; ++h) {
      const Acc* o = &rows[(n * H + h) * 4];
      const Acc y = Acc(ys[h]);
      t[0] += o[0];
      t[1] += o[1] * y;
      t[2] += o[1];
      t[3] += o[2];
      t[4] += o[3] * y;
      t[5] += o[3];
    }
    for (int k = 0; k < 6; ++k) grad_theta[n * 6 + k] = T(t[k]);
  }
}

#define TG_INSTANTIATE(T)                                                                      \
  template void grid_sample_2d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                          int64_t, int64_t, int64_t, GridSampleMode,           \
                                          GridSamplePadding, bool);                            \
  template void grid_sample_2d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,      \
                                           int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                           GridSampleMode, GridSamplePadding, bool);           \
  template void affine_grid_2d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool);      \
  template void affine_grid_2d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, bool);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
// The 16-bit types: forward and first-order backward read them natively (see the file comment).
#define TG_INSTANTIATE_16(T)                                                                   \
  template void grid_sample_2d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                          int64_t, int64_t, int64_t, GridSampleMode,           \
                                          GridSamplePadding, bool);                            \
  template void grid_sample_2d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,      \
                                           int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                           GridSampleMode, GridSamplePadding, bool);
TG_INSTANTIATE_16(BFloat16)
TG_INSTANTIATE_16(Float16)
#undef TG_INSTANTIATE_16

}  // namespace tg::kernels::TG_ISA_NS
