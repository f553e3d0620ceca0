// Direct correlation on a flat grid, shared by correlate (conv_kernels_correlate.cpp) and
// correlate_adjoint (conv_kernels_adjoint.cpp): a block of output channels x positions summed in
// registers, and the repacked weights it reads.
#pragma once

#include "conv_kernels_shared.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // see Lanes

namespace tg::kernels::TG_ISA_NS::conv_detail {

// ---------------------------------------------------------------------------------------------
// Direct correlation: out[o, position] = bias[o] + sum_{c, t} wr[o, c, t] * in[c, position + off[t]]
// over a flat grid, without any column matrix. A block of OB output channels x QB positions
// (two vector registers wide) is summed in registers over (c, t), each step broadcasting OB
// weights laid out as wr[ob][c][t][OB]. This keeps the FMA units busier than im2col + GEMM,
// which copies every input K times and then packs it again.

struct DirectPlan {
  int64_t n_in, in_cstride, in_slice;  // input channels, their box stride, one grid slice
  const int64_t* off;                  // tap offsets into an input channel's box
  int64_t n_taps;
  int64_t slices, rows, width, cols;   // grid: slices x rows x width, columns >= cols are garbage
  int64_t out_cstride, out_slice, out_row, out_col;  // where grid position (s, r, c) goes
};

// Positions per direct block: OB x this many vector registers of sums, kAccRegs in all (24 of
// AVX-512's 32 registers, 12 of the others' 16; the rest hold loads and broadcasts; at most
// kOverrun positions). With one or two output channels a longer run instead, streamed through
// L1.
template <class T, int OB>
constexpr int64_t direct_q() {
  return OB <= 2 ? 512 / OB : (kAccRegs / OB) * int64_t(Lanes<T>::n);
}

inline int64_t direct_blocks_per_slice(const DirectPlan& pl, int64_t QB) {
  return (pl.rows * pl.width + QB - 1) / QB;
}

// dst[2 v] = src[v] for v < n, the odd elements left alone: a W phase of a stride-2 adjoint,
// whose other phase writes the odd ones. With AVX-512, eight values at a time spread to the
// even lanes and written through a mask; as scalar stores these took ~10% of the stride-2
// input gradient (perf annotate).
template <class T>
inline void store_even(T* dst, const T* src, int64_t n) {
  int64_t v = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (; v < n; v += 8) {
      const int64_t m = std::min<int64_t>(8, n - v);
      const __m512 x = _mm512_maskz_loadu_ps(__mmask16((1u << m) - 1), src + v);
      _mm512_mask_storeu_ps(dst + 2 * v, __mmask16(0x5555u & ((1u << (2 * m)) - 1)), _mm512_permutexvar_ps(spread, x));
    }
    return;
  }
#endif
  for (; v < n; ++v) dst[2 * v] = src[v];
}

// dst[v * step] = lane v of x for v < m (m <= the lanes): one channel's run of a register block
// transposed (direct_rows). Float runs of step 1 or 2 go out through masked stores on AVX-512
// and AVX2 (step 2, a W phase of a stride-2 adjoint, spreads the lanes to the even lanes of two
// registers first, as store_even); the others lane by lane. Written lane by lane, the row
// blocks' sums took ~18% of the stride-2 input gradient (perf annotate).
template <class T>
inline void store_lanes(T* dst, int64_t step, typename Lanes<T>::vec x, int m) {
  constexpr int n = Lanes<T>::n;
  if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX512F__)
    static_assert(n == 16);
    if (step == 1) return _mm512_mask_storeu_ps(dst, __mmask16((1u << m) - 1), x);
    if (step == 2) {
      const int lo = std::min(m, 8), hi = m - lo;
      const __m512 x_lo = __builtin_shufflevector(x, x, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      _mm512_mask_storeu_ps(dst, __mmask16(0x5555u & ((1u << (2 * lo)) - 1)), x_lo);
      if (hi <= 0) return;
      const __m512 x_hi = __builtin_shufflevector(x, x, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
      return _mm512_mask_storeu_ps(dst + 16, __mmask16(0x5555u & ((1u << (2 * hi)) - 1)), x_hi);
    }
#elif defined(__AVX2__)
    static_assert(n == 8);
    // lanes j with j < count (count <= 8) whose index is even, or any when every_lane
    auto mask = [](int count, bool every_lane) {
      const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), j);
      if (!every_lane) in = _mm256_and_si256(in, _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0));
      return in;
    };
    if (step == 1) return _mm256_maskstore_ps(dst, mask(m, true), x);
    if (step == 2) {
      const int lo = std::min(m, 4), hi = m - lo;
      const __m256 x_lo = __builtin_shufflevector(x, x, 0, 0, 1, 1, 2, 2, 3, 3);
      _mm256_maskstore_ps(dst, mask(2 * lo, false), x_lo);
      if (hi <= 0) return;
      const __m256 x_hi = __builtin_shufflevector(x, x, 4, 4, 5, 5, 6, 6, 7, 7);
      return _mm256_maskstore_ps(dst + 8, mask(2 * hi, false), x_hi);
    }
#endif
  }
  T lanes[n];
  std::memcpy(lanes, &x, sizeof x);
  for (int v = 0; v < m; ++v) dst[v * step] = lanes[v];
}

// Writes a block's sums acc[o][j] (positions q + j, j < QBt, of slice sl) to their valid places,
// row by row; o < n_o.
template <class T, int OB, int QBt>
void store_block(const T (&acc)[OB][QBt], int64_t n_o, const DirectPlan& pl, int64_t sl, int64_t q, T* out) {
  T* oc = out + sl * pl.out_slice;
  int64_t r = q / pl.width, col = q % pl.width;
  for (int64_t j = 0; j < QBt && r < pl.rows; ++r, col = 0) {
    const int64_t run = std::min<int64_t>(QBt - j, pl.width - col);
    const int64_t nv = std::clamp<int64_t>(pl.cols - col, 0, run);
    for (int64_t o = 0; o < n_o; ++o) {
      T* orow = oc + o * pl.out_cstride + r * pl.out_row + col * pl.out_col;
      if (pl.out_col == 1) {
        for (int64_t v = 0; v < nv; ++v) orow[v] = acc[o][j + v];
      } else if (pl.out_col == 2) {
        store_even(orow, &acc[o][j], nv);
      } else {
        for (int64_t v = 0; v < nv; ++v) orow[v * pl.out_col] = acc[o][j + v];
      }
    }
    j += run;
  }
}

// One block of OB output channels x QBt positions (OB > 2), summed in registers over (c, t):
// out = bias + sum wr[c][t][o] * in_q[c, off[t] + j].
template <class T, int OB, int QBt>
void direct_block(const T* in_q, const T* wt, const T* bias, int64_t n_o, const DirectPlan& pl, int64_t sl,
                  int64_t q, T* out) {
  T acc[OB][QBt];
  for (int o = 0; o < OB; ++o) {
    const T b0 = bias && o < n_o ? bias[o] : T(0);
    for (int j = 0; j < QBt; ++j) acc[o][j] = b0;
  }
  for (int64_t c = 0; c < pl.n_in; ++c) {
    const T* ic = in_q + c * pl.in_cstride;
    for (int64_t t = 0; t < pl.n_taps; ++t, wt += OB) {
      const T* src = ic + pl.off[t];
      for (int o = 0; o < OB; ++o)
        for (int j = 0; j < QBt; ++j) acc[o][j] += wt[o] * src[j];
    }
  }
  store_block<T, OB, QBt>(acc, n_o, pl, sl, q, out);
}

// Blocks [blk0, blk1) (slice-major, QB positions each) of all n_out output channels. `in` must
// hold QB + the largest offset readable elements past the last slice. The last block of a
// slice computes only the whole vectors that reach into the slice (a 14 x 15 grid is 4 blocks
// of 48 positions, then 18, which take 2 vectors, not 3).
template <class T, int OB>
void direct_blocks(const T* in, const T* wr, int64_t n_out, const T* bias, T* out,
                   const DirectPlan& pl, int64_t blk0, int64_t blk1) {
  constexpr int QB = int(direct_q<T, OB>());
  const int64_t n_qb = direct_blocks_per_slice(pl, QB), n_ob = (n_out + OB - 1) / OB;
  const int64_t wstep = pl.n_in * pl.n_taps * OB;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t sl = blk / n_qb, q = (blk % n_qb) * QB;
    const T* in_q = in + sl * pl.in_slice + q;
    const int64_t len = std::min<int64_t>(QB, pl.rows * pl.width - q);  // positions in the slice
    for (int64_t ob = 0; ob < n_ob; ++ob) {
      const int64_t o0 = ob * OB, n_o = std::min<int64_t>(OB, n_out - o0);
      const T* wt = wr + ob * wstep;
      const T* b = bias ? bias + o0 : nullptr;
      T* oc = out + o0 * pl.out_cstride;
      if constexpr (OB <= 2) {
        // A block this thin holds few sums: the run (which stops at the slice's end, rounded up
        // to whole vectors) goes in sub-blocks of U vectors, each summed in registers over (c, t).
        using L = Lanes<T>;
        constexpr int U = 4;
        const int64_t len_v = (len + L::n - 1) / L::n * L::n;
        T acc[OB][QB];
        T b0[OB];
        for (int o = 0; o < OB; ++o) b0[o] = b && o < n_o ? b[o] : T(0);
        auto run = [&](auto u_tag, int64_t j0) {
          constexpr int NU = decltype(u_tag)::value;
          typename L::vec a[OB][NU];
          for (int o = 0; o < OB; ++o)
            for (int u = 0; u < NU; ++u) a[o][u] = typename L::vec{} + b0[o];
          const T* w_ct = wt;
          for (int64_t c = 0; c < pl.n_in; ++c) {
            const T* ic = in_q + c * pl.in_cstride + j0;
            for (int64_t t = 0; t < pl.n_taps; ++t, w_ct += OB) {
              const T* src = ic + pl.off[t];
#pragma GCC unroll 8
              for (int u = 0; u < NU; ++u) {
                const typename L::vec xv = L::load(src + u * L::n);
#pragma GCC unroll 4
                for (int o = 0; o < OB; ++o) a[o][u] += w_ct[o] * xv;
              }
            }
          }
          for (int o = 0; o < OB; ++o)
            for (int u = 0; u < NU; ++u) std::memcpy(&acc[o][j0 + u * L::n], &a[o][u], sizeof(a[o][u]));
        };
        int64_t j0 = 0;
        for (; j0 + U * L::n <= len_v; j0 += U * L::n) run(std::integral_constant<int, U>{}, j0);
        for (; j0 < len_v; j0 += L::n) run(std::integral_constant<int, 1>{}, j0);
        store_block<T, OB, QB>(acc, n_o, pl, sl, q, oc);
      } else {
        constexpr int V = Lanes<T>::n;
        if (QB > V && len <= V) {
          direct_block<T, OB, V>(in_q, wt, b, n_o, pl, sl, q, oc);
        } else if (QB > 2 * V && len <= 2 * V) {
          direct_block<T, OB, std::min(QB, 2 * V)>(in_q, wt, b, n_o, pl, sl, q, oc);
        } else {
          direct_block<T, OB, QB>(in_q, wt, b, n_o, pl, sl, q, oc);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row blocks: the same sums with the roles swapped, output channels in the vector lanes and
// positions broadcast. A block is kRowP positions of one grid row x kRowNV vectors of output
// channels, so it never computes a garbage column, and a row is cut into chunks of kRowP
// instead of the flat grid into whole vectors: a 14 x 15 grid (3x3 stride 2 on 28 x 28) is
// 2 x 7 positions per row, 196 in all, where direct_blocks computes 14 vectors (224). Each
// output still sums bias, then (c, t) in order, one multiply-add each: the same bits.
inline constexpr int kRowNV = kVecRegs == 32 ? 2 : 1;
inline constexpr int kRowP = kVecRegs == 32 ? 14 : kAccRegs / 2;

inline int64_t row_chunks(const DirectPlan& pl) { return (pl.cols + kRowP - 1) / kRowP; }
inline int64_t row_blocks_per_slice(const DirectPlan& pl) { return pl.rows * row_chunks(pl); }

// Whether row blocks pay: n_out fills their channel vectors, and they compute at least 1/16
// fewer positions than direct_blocks with QB positions per block would.
template <class T>
bool row_blocks_pay(const DirectPlan& pl, int64_t n_out, int64_t QB) {
  constexpr int64_t V = Lanes<T>::n, OB = kRowNV * V;
  if (n_out % OB != 0 || pl.cols < kRowP) return false;
  const int64_t len = pl.rows * pl.width, rest = len % QB;
  const int64_t flat = len / QB * QB + (rest + V - 1) / V * V;
  return row_blocks_per_slice(pl) * kRowP * 16 <= flat * 15;
}

// (c, t) of a plan as one list of offsets into the input: nested loops over c and t made GCC
// copy some of a row block's sums between registers on every channel (entering and leaving
// the tap loop), which with the 1, 2 or 4 taps of a stride-2 adjoint's phases cost 3-10% of
// the input gradient.
inline std::vector<int64_t> step_offsets(const DirectPlan& pl) {
  std::vector<int64_t> in_off(pl.n_in * pl.n_taps);
  for (int64_t c = 0; c < pl.n_in; ++c)
    for (int64_t t = 0; t < pl.n_taps; ++t) in_off[c * pl.n_taps + t] = c * pl.in_cstride + pl.off[t];
  return in_off;
}

// A row block's sums: a[q][v] = bias + sum over the steps k of w_ct[k][v] * in_q[in_off[k] + q],
// kRowP positions q x kRowNV vectors of output channels. Not inlined: with two blocks' sums
// alive in direct_rows_pair, GCC kept some of the second block's in memory through its whole
// loop (a load and a store per step); here the loop has the registers to itself.
template <class T>
[[gnu::noinline]] void sum_row_block(const T* in_q, const T* w_ct, const std::vector<int64_t>& in_off,
                                     const T* bias_ob, typename Lanes<T>::vec (&out)[kRowP][kRowNV]) {
  using L = Lanes<T>;
  using vec = typename L::vec;
  constexpr int P = kRowP, NV = kRowNV, OB = NV * L::n;
  vec a[P][NV];  // (summed here, copied out at the end: summed in `out`, they stayed in memory)
  for (int v = 0; v < NV; ++v) {
    const vec b = bias_ob ? L::load(bias_ob + v * L::n) : vec{};
    for (int q = 0; q < P; ++q) a[q][v] = b;
  }
  const int64_t n_k = int64_t(in_off.size());
  for (int64_t k = 0; k < n_k; ++k, w_ct += OB) {
    const T* src = in_q + in_off[k];
    vec wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = L::load(w_ct + v * L::n);
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
      const vec xs = L::splat(src[q]);
      for (int v = 0; v < NV; ++v) a[q][v] += wv[v] * xs;
    }
  }
#pragma GCC unroll 16
  for (int q = 0; q < P; ++q)
    for (int v = 0; v < NV; ++v) out[q][v] = a[q][v];
}

// Row blocks [blk0, blk1) (slice, row, chunk) of all n_out output channels (a multiple of
// kRowNV vectors); wr is repacked with OB = kRowNV * Lanes<T>::n.
template <class T>
void direct_rows(const T* in, const T* wr, int64_t n_out, const T* bias, T* out, const DirectPlan& pl,
                 int64_t blk0, int64_t blk1) {
  using L = Lanes<T>;
  using vec = typename L::vec;
  constexpr int P = kRowP, NV = kRowNV, OB = NV * L::n;
  const int64_t n_ch = row_chunks(pl), n_ob = n_out / OB;
  const int64_t wstep = pl.n_in * pl.n_taps * OB;
  const std::vector<int64_t> in_off = step_offsets(pl);
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t sl = blk / (pl.rows * n_ch), r = blk / n_ch % pl.rows, c0 = blk % n_ch * P;
    const int64_t np = std::min<int64_t>(P, pl.cols - c0);
    const T* in_q = in + sl * pl.in_slice + r * pl.width + c0;
    for (int64_t ob = 0; ob < n_ob; ++ob) {
      vec a[P][NV];
      sum_row_block<T>(in_q, wr + ob * wstep, in_off, bias ? bias + ob * OB : nullptr, a);
      // each vector of channels transposed in registers, n positions at a time (rows past P
      // zero), so that a channel's positions sit in one register and go out as one run
      T* oc = out + sl * pl.out_slice + ob * OB * pl.out_cstride + r * pl.out_row + c0 * pl.out_col;
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
#pragma GCC unroll 2
        for (int q0 = 0; q0 < P; q0 += L::n) {  // (bounds known when compiled: a stays in registers)
          if (q0 >= np) break;
          vec t[L::n];
#pragma GCC unroll 16
          for (int j = 0; j < L::n; ++j) t[j] = q0 + j < P ? a[q0 + j][v] : vec{};
          L::transpose(t);
          const int m = int(std::min<int64_t>(L::n, np - q0));
          T* oq = oc + v * L::n * pl.out_cstride + q0 * pl.out_col;
          for (int o = 0; o < L::n; ++o) store_lanes<T>(oq + o * pl.out_cstride, pl.out_col, t[o], m);
        }
    }
  }
}

// Whether direct_rows_pair can take phases A and B of a stride-2 adjoint (plans as
// correlate_adjoint_direct makes them): the same input, slices and rows, output columns two
// apart, and B's columns right after A's, as many or one fewer (no hole in the image row).
inline bool rows_pair_fits(const DirectPlan& A, const DirectPlan& B) {
  return A.out_col == 2 && B.out_col == 2 && A.in_cstride == B.in_cstride && A.in_slice == B.in_slice &&
         A.width == B.width && A.slices == B.slices && A.rows == B.rows && A.out_cstride == B.out_cstride &&
         A.out_slice == B.out_slice && A.out_row == B.out_row && B.cols <= A.cols && B.cols >= A.cols - 1;
}

// Row blocks [blk0, blk1) of A's grid for the two W phases of a stride-2 adjoint at once (see
// rows_pair_fits; `out` points at A's first output): each block sums A's positions, then B's
// (each as direct_rows would: the same bits), and writes the 2 kRowP image columns they make,
// interleaved in registers, as contiguous runs, their lines fetched for writing while the
// block is summed. Phase by phase, every image row went out as two halves of masked stores
// into every other element, each cache line written twice (dropping those stores altogether
// made the 3x3 stride-2 input gradient 12-20% faster, dropping the forward's contiguous runs
// 0%); paired, that gradient is 3% faster at 1 thread and 8-11% at 2 (medians, Xeon).
template <class T>
void direct_rows_pair(const T* in, const T* wrA, const T* wrB, int64_t n_out, const T* bias, T* out,
                      const DirectPlan& A, const DirectPlan& B, int64_t blk0, int64_t blk1) {
  using L = Lanes<T>;
  using vec = typename L::vec;
  constexpr int P = kRowP, NV = kRowNV, OB = NV * L::n;
  const int64_t n_ch = row_chunks(A), n_ob = n_out / OB;
  const int64_t wstepA = A.n_in * A.n_taps * OB, wstepB = B.n_in * B.n_taps * OB;
  const std::vector<int64_t> offA = step_offsets(A), offB = step_offsets(B);
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t sl = blk / (A.rows * n_ch), r = blk / n_ch % A.rows, c0 = blk % n_ch * P;
    const int64_t cols = std::min<int64_t>(P, A.cols - c0) + std::clamp<int64_t>(B.cols - c0, 0, P);
    const int64_t in_at = sl * A.in_slice + r * A.width + c0;
    for (int64_t ob = 0; ob < n_ob; ++ob) {
      const T* b = bias ? bias + ob * OB : nullptr;
      T* oc = out + sl * A.out_slice + ob * OB * A.out_cstride + r * A.out_row + c0 * 2;
      for (int o = 0; o < OB; ++o) {
        __builtin_prefetch(oc + o * A.out_cstride, 1);
        __builtin_prefetch(oc + o * A.out_cstride + cols - 1, 1);
      }
      vec a[P][NV], e[P][NV];
      sum_row_block<T>(in + in_at, wrA + ob * wstepA, offA, b, a);
      sum_row_block<T>(in + in_at, wrB + ob * wstepB, offB, b, e);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
#pragma GCC unroll 4
        for (int q0 = 0; q0 < 2 * P; q0 += L::n) {  // image columns: A's, B's, A's, ...
          if (q0 >= cols) break;
          vec t[L::n];
#pragma GCC unroll 16
          for (int j = 0; j < L::n; ++j) {
            const int q = q0 + j;
            t[j] = q >= 2 * P ? vec{} : q % 2 == 0 ? a[q / 2][v] : e[q / 2][v];
          }
          L::transpose(t);
          const int m = int(std::min<int64_t>(L::n, cols - q0));
          T* oq = oc + v * L::n * A.out_cstride + q0;
          for (int o = 0; o < L::n; ++o) store_lanes<T>(oq + o * A.out_cstride, 1, t[o], m);
        }
    }
  }
}

// Output channels per register block: the fewest padded channels, then the most per block;
// blocks of 12 or 8 where kAccRegs is 24 (two or three vectors of positions), of 6 or 4 where
// it is 12.
inline int pick_ob(int64_t n_out) {
  constexpr int big = kAccRegs / 2, small = kAccRegs / 3;
  auto padded = [](int64_t n, int64_t ob) { return (n + ob - 1) / ob * ob; };
  if (n_out % big == 0 || (n_out > small && padded(n_out, big) < padded(n_out, small))) return big;
  if (n_out > 4) return small;
  return n_out > 2 ? 4 : int(std::max<int64_t>(n_out, 1));
}

// f(std::integral_constant<int, OB>{}) with OB = pick_ob(n_out): the block sizes direct_blocks
// is compiled for.
template <class F>
decltype(auto) with_ob(int64_t n_out, F&& f) {
  constexpr int big = kAccRegs / 2, small = kAccRegs / 3;
  const int ob = pick_ob(n_out);
  if (ob == big) return f(std::integral_constant<int, big>{});
  if (ob == small) return f(std::integral_constant<int, small>{});
  if (ob == 4) return f(std::integral_constant<int, 4>{});  // (small already where it is 4)
  if (ob == 2) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

// Repacked weights live in this Scratch slot of the calling thread, kept from call to call:
// as a fresh zeroed vector per call (0.6 MB for 128 x 128 x 3 x 3) they came back from the
// system with page faults and a memset every time, ~4% of the stride-2 input gradient.
inline constexpr int kRepackSlot = 7;

inline int64_t repacked_size(int64_t n_out, int64_t n_in, int64_t n_taps, int OB) {
  return (n_out + OB - 1) / OB * n_in * n_taps * OB;
}

// wr[ob][c][t][o] = weight(ob * OB + o, c, t), zero past n_out (sums never stored, but the
// kept buffer's old contents could be subnormal, which slows the multiply-adds); repacked_size
// elements.
template <class T, class F>
void repack(T* wr, int64_t n_out, int64_t n_in, int64_t n_taps, int OB, F&& weight) {
  const int64_t n_ob = (n_out + OB - 1) / OB;
  // written in order, block by block (its OB weight rows read side by side); written output by
  // output, each (c, t) went to another cache line: 4% of the stride-2 forward
  auto one_block = [&](int64_t ob) {
    T* d = wr + ob * n_in * n_taps * OB;
    const int64_t o0 = ob * OB, o1 = std::min<int64_t>(n_out, o0 + OB);
    for (int64_t c = 0; c < n_in; ++c)
      for (int64_t t = 0; t < n_taps; ++t, d += OB) {
        for (int64_t o = o0; o < o1; ++o) d[o - o0] = weight(o, c, t);
        for (int64_t o = o1; o < o0 + OB; ++o) d[o - o0] = T(0);
      }
  };
  if (n_out * n_in * n_taps < kParallelWork || omp_in_parallel() || n_ob == 1) {  // (an `if` clause would still open a region)
    for (int64_t ob = 0; ob < n_ob; ++ob) one_block(ob);
    return;
  }
#pragma omp parallel for schedule(static)  // before the kernel's parallel region: a large weight on all cores
  for (int64_t ob = 0; ob < n_ob; ++ob) one_block(ob);
}

}  // namespace tg::kernels::TG_ISA_NS::conv_detail

#pragma GCC diagnostic pop
