// The bf16 GEMM on AVX512-BF16 CPUs (gemm_batched_reduced<BFloat16> when Isa::Avx512Bf16 is
// active; see matmul_kernels.h for the API and the legend, ops/internal/gemm_blocked.h for the
// blocking and the threads). Compiled once, for x86-64-v4 plus AVX512-BF16 (CMake), in its own
// namespace isa_avx512bf16; the dispatcher calls it only when cpuid says the CPU has the
// instructions.
//
// vdpbf16ps (_mm512_dpbf16_ps) multiplies 16 pairs of bf16 by 16 pairs and adds each pair's
// two products to a float32 lane: acc += a[2i] b[2i] + a[2i+1] b[2i+1]. So the panels hold
// k in pairs:
//   - A: strips of MR = 12 rows; for each pair q (k = 2q, 2q + 1) the MR rows' 32-bit words
//     (two bf16 of one row) side by side, one broadcast each;
//   - B: strips of NR = 32 columns; for each pair q, 32 words (two bf16 of one column), two
//     512-bit vectors;
//   - an odd depth block pairs its last k with a zero on both sides (0 x 0 adds nothing, even
//     beside an Inf); rows and columns past the edges are zeros, never stored.
// The tile is 12 x 32 floats in 24 of the 32 vector registers.
//
// Numerics, against float32 FMAs over the widened operands (matmul_kernels.cpp's path):
// products of bf16 are exact in float32 either way; the instruction adds a pair of products
// and the accumulator with its own rounding (round to nearest even, no exceptions), which
// changes the rounding error of the sum but not its bound (about k 2^-24 sum |a||b| for a sum
// of k products). It also treats denormal inputs (bf16 below 2^-126 in magnitude) as zeros and
// flushes denormal results to zero, whatever MXCSR says: an absolute error of at most about
// 2^-126 (|a| + |b| + 1) per step, far below bf16's resolution of any normal value. Inf and NaN
// propagate as in float32. Products too small to pack (gemm_blocked's gemm_small) use float32
// arithmetic, as on the other paths.
//
// Speed: on the Intel Xeon (AVX512_BF16 and FP16, no AMX exposed) this was written on,
// vdpbf16ps runs far below the FMA rate (a 1024^3 product takes 1.75x the AVX-512 float32
// kernel's time, the inner loop is all vdpbf16ps), so Isa::Avx512Bf16 is not the default there
// (framework/isa.cpp); on Zen 4 it runs at 1.8x the float32 kernel's rate (a 1024^3 product in
// 11.3 against 20.9 ms on an AMD EPYC, 186 GFLOP/s on one core, 80% of its bf16 peak).
// AMX would be a sibling of this file (see matmul_dispatch.cpp).
#include "matmul_kernels.h"

#include "internal/gemm_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tg::kernels::TG_ISA_NS {
namespace {

// Two bf16 as one 32-bit word, the first in the low half (the pair's even lane).
inline uint32_t pair(uint16_t first, uint16_t second) { return uint32_t(first) | (uint32_t(second) << 16); }

inline uint32_t load_pair(const BFloat16* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// One strip of W lines that run along the depth (rows of A, or columns of a transposed B, each
// stored contiguously from `first`, ld apart; `live` of them real, the rest zeros): for each
// pair q, the W words (line[2q], line[2q + 1]), an odd depth's last pair completed with zero.
template <int W>
void pack_lines_as_pairs(const BFloat16* first, int64_t ld, int live, int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2, whole = kc / 2;
  for (int l = 0; l < W; ++l) {
    if (l >= live) {
      for (int64_t q = 0; q < kp; ++q) dst[q * W + l] = 0u;
      continue;
    }
    const BFloat16* src = first + l * ld;
    for (int64_t q = 0; q < whole; ++q) dst[q * W + l] = load_pair(src + 2 * q);
    if (kc % 2) dst[whole * W + l] = pair(src[kc - 1].bits, 0);
  }
}

struct Bf16Kernel {
  using Src = BFloat16;
  using Acc = float;
  using Packed = uint32_t;
  static constexpr int MR = 12, NR = 32;
  static constexpr int64_t kDepthBlock = 512;  // 256 pairs: a B strip (32 KB) stays in L1
  static int64_t depth(int64_t kc) { return (kc + 1) / 2; }

  // Rows [i0, i0 + rows) x depth [p0, p0 + kc) of op(A): strip s holds, for each pair q, the
  // MR words (A[i][2q], A[i][2q + 1]) of rows i = i0 + s * MR + r.
  static void pack_a(const BFloat16* A, int64_t lda, bool trans, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                     uint32_t* dst) {
    const int64_t kp = depth(kc);
    for (int64_t s = 0; s < rows; s += MR, dst += MR * kp) {
      const int live = int(std::min<int64_t>(MR, rows - s));
      if (trans) {  // stored row p holds the rows' values at p: interleave stored rows p, p + 1
        for (int64_t q = 0; q < kp; ++q) {
          const BFloat16* r0 = A + (p0 + 2 * q) * lda + i0 + s;
          const BFloat16* r1 = r0 + lda;
          const bool second = 2 * q + 1 < kc;
          for (int r = 0; r < MR; ++r)
            dst[q * MR + r] = r < live ? pair(r0[r].bits, second ? r1[r].bits : uint16_t(0)) : 0u;
        }
        continue;
      }
      pack_lines_as_pairs<MR>(A + (i0 + s) * lda + p0, lda, live, kc, dst);  // each row's pairs are contiguous
    }
  }

  // Depth [p0, p0 + kc) x columns [j0, j0 + cols) of op(B): strip s holds, for each pair q,
  // the NR words (B[2q][j], B[2q + 1][j]) of columns j = j0 + s * NR + c.
  static void pack_b(const BFloat16* B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
                     uint32_t* dst) {
    const int64_t kp = depth(kc);
    if (!trans) {  // stored rows 2q and 2q + 1, interleaved
      // Word c of the two results: lanes c of row 2q (index c) and of row 2q + 1 (32 + c).
      alignas(64) uint16_t idx[2][32];
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 16; ++c) {
          idx[h][2 * c] = uint16_t(16 * h + c);
          idx[h][2 * c + 1] = uint16_t(32 + 16 * h + c);
        }
      const __m512i lo_idx = _mm512_load_si512(idx[0]), hi_idx = _mm512_load_si512(idx[1]);
      for (int64_t q = 0; q < kp; ++q) {
        const BFloat16* r0 = B + (p0 + 2 * q) * ldb + j0;
        const BFloat16* r1 = r0 + ldb;
        const bool second = 2 * q + 1 < kc;
        for (int64_t s = 0; s < cols; s += NR) {
          uint32_t* d = dst + (s / NR) * NR * kp + q * NR;
          const int live = int(std::min<int64_t>(NR, cols - s));
          if (live == NR && second) {
            const __m512i x0 = _mm512_loadu_si512(r0 + s), x1 = _mm512_loadu_si512(r1 + s);
            _mm512_storeu_si512(d, _mm512_permutex2var_epi16(x0, lo_idx, x1));
            _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi16(x0, hi_idx, x1));
            continue;
          }
          for (int c = 0; c < NR; ++c)
            d[c] = c < live ? pair(r0[s + c].bits, second ? r1[s + c].bits : uint16_t(0)) : 0u;
        }
      }
      return;
    }
    for (int64_t s = 0; s < cols; s += NR, dst += NR * kp)  // column j is a stored row
      pack_lines_as_pairs<NR>(B + (j0 + s) * ldb + p0, ldb, int(std::min<int64_t>(NR, cols - s)), kc, dst);
  }

  // C tile (rows x cols <= MR x NR, leading dimension ldc) = (add ? C : 0) + packed A strip x
  // packed B strip over the depth(kc) pairs.
  static void tile(int64_t kc, const uint32_t* __restrict pa, const uint32_t* __restrict pb, float* c, int64_t ldc,
                   int rows, int cols, bool add) {
    if (add)  // C's lines arrive while the tile is summed
      for (int r = 0; r < rows; ++r) {
        __builtin_prefetch(c + r * ldc);
        __builtin_prefetch(c + r * ldc + cols - 1);
      }
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const int64_t kp = depth(kc);
    for (int64_t q = 0; q < kp; ++q, pa += MR, pb += NR) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb), b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
#pragma GCC unroll 12
      for (int r = 0; r < MR; ++r) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(int(pa[r]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
      }
    }
    const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? __mmask16(0xffff) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : 0;
    for (int r = 0; r < rows; ++r) {
      float* dst = c + r * ldc;
      __m512 o0 = acc[r][0], o1 = acc[r][1];
      if (add) {
        o0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, dst), o0);
        o1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, dst + 16), o1);
      }
      _mm512_mask_storeu_ps(dst, m0, o0);
      _mm512_mask_storeu_ps(dst + 16, m1, o1);
    }
  }
};

}  // namespace

void gemm_batched_bf16(const BFloat16* A, MatrixLayout a, const BFloat16* B, MatrixLayout b, float* C,
                       MatrixLayout c, int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate) {
  gemm_blocked<Bf16Kernel>(A, a, B, b, C, c, batch, n, k, m, accumulate);
}

}  // namespace tg::kernels::TG_ISA_NS
