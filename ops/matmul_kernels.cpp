// The GEMM behind every matrix product (see matmul_kernels.h for the API and the legend). One
// copy per instruction set (ops/internal/isa_dispatch.h): the vectors below are as wide as the
// copy's registers. The driver (blocking, threads) is ops/internal/gemm_blocked.h; this file
// holds the float / double kernel, which also serves 16-bit operands by converting them to
// float32 as it packs them (gemm_batched_reduced's portable path):
//   - k is cut into blocks of at most kDepthBlock (sizes a function of k alone);
//   - per block, op(A)'s rows are packed in strips of MR rows, stored k-major (the MR values
//     of one k side by side), and op(B)'s columns in strips of NR columns, also k-major, edges
//     padded with zeros (16-bit operands become float32 here, exactly);
//   - a micro-kernel keeps an MR x NR tile of C in registers over one depth block: per k, NV
//     vector loads of B, MR broadcasts of A, MR * NV fused multiply-adds.
// So a 16-bit product gives the bits of the float32 product of its widened operands.
#include "matmul_kernels.h"

#include "internal/gemm_blocked.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tg::kernels::TG_ISA_NS {
namespace {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64, kRegs = 32;
#elif defined(__AVX__)
constexpr int kVecBytes = 32, kRegs = 16;
#else
constexpr int kVecBytes = 16, kRegs = 16;
#endif

template <class T>
struct Micro {
  typedef T vec __attribute__((vector_size(kVecBytes)));
  static constexpr int W = kVecBytes / int(sizeof(T));  // lanes
  static constexpr int NV = 2;                           // vectors per row of the tile
  static constexpr int NR = NV * W;                      // tile columns
  static constexpr int MR = kRegs == 32 ? 12 : 6;        // tile rows: MR * NV accumulators
};

// dst[0, n) = src[0, n) as T: a copy, or the exact widening of 16-bit values (branch-free
// integer code that vectorises; F16C's vcvtph2ps for float16 where the copy has it).
template <class T, class Src>
inline void widen_run(const Src* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<Src, T>) {
    std::memcpy(dst, src, sizeof(T) * size_t(n));
  } else {
    int64_t i = 0;
#if defined(__F16C__)
    if constexpr (std::is_same_v<Src, Float16> && std::is_same_v<T, float>)
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
    for (; i < n; ++i) dst[i] = T(src[i]);
  }
}

// dst[p * L + l] = line l's element p, for L lines (line l at first + l * stride) and p < kc:
// the lines side by side, as packing wants them. Blocks of 4 lines x 4 p are transposed in
// registers (four 4-wide loads, eight shuffles, four 4-wide stores) instead of 16 scalar loads
// and stores: packing (A and B) went from 9% of 1024^3's time to 5% (perf, 1 thread).
template <int L, class T>
inline void interleave_lines(const T* first, int64_t stride, int64_t kc, T* dst) {
  typedef T v4 __attribute__((vector_size(4 * sizeof(T))));
  int64_t p = 0;
  for (; p + 4 <= kc; p += 4) {
    int l = 0;
#pragma GCC unroll 8
    for (; l + 4 <= L; l += 4) {
      const T* q = first + l * stride + p;
      v4 r0, r1, r2, r3;  // lines l .. l + 3 at p .. p + 3
      std::memcpy(&r0, q, sizeof(v4));
      std::memcpy(&r1, q + stride, sizeof(v4));
      std::memcpy(&r2, q + 2 * stride, sizeof(v4));
      std::memcpy(&r3, q + 3 * stride, sizeof(v4));
      const v4 t0 = __builtin_shufflevector(r0, r1, 0, 4, 1, 5), t1 = __builtin_shufflevector(r0, r1, 2, 6, 3, 7);
      const v4 t2 = __builtin_shufflevector(r2, r3, 0, 4, 1, 5), t3 = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);
      const v4 out[4] = {__builtin_shufflevector(t0, t2, 0, 1, 4, 5), __builtin_shufflevector(t0, t2, 2, 3, 6, 7),
                         __builtin_shufflevector(t1, t3, 0, 1, 4, 5), __builtin_shufflevector(t1, t3, 2, 3, 6, 7)};
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) std::memcpy(dst + (p + i) * L + l, &out[i], sizeof(v4));  // p + i's l .. l + 3
    }
    for (; l < L; ++l)
      for (int i = 0; i < 4; ++i) dst[(p + i) * L + l] = first[l * stride + p + i];
  }
  for (; p < kc; ++p)
    for (int l = 0; l < L; ++l) dst[p * L + l] = first[l * stride + p];
}

// The float / double kernel, reading operands of type Src (T itself, or a 16-bit type widened
// to T = float as it packs).
template <class SrcT, class T>
struct FloatKernel {
  using M = Micro<T>;
  using Src = SrcT;
  using Acc = T;
  using Packed = T;
  static constexpr int MR = M::MR, NR = M::NR;
  // A k x NR strip of B (32 KB in float) stays in L1 (48 KB on the Xeon) while A's strips
  // stream past it. Measured at 1 thread (1024^3, linear's shapes, 64 x 576 x 3136): 192 and
  // 384 no better, 512 (a 64 KB strip, read from L2) 0-3% faster, within the noise; 256 kept
  // for Zen 4's 32 KB L1.
  static constexpr int64_t kDepthBlock = 256;
  static int64_t depth(int64_t kc) { return kc; }

  // Lines p < kc of `width` values (line p at src + p * ld) cut into strips of L values, each
  // strip k-major (strip s holds line p's values s * L .. s * L + L - 1 at dst + s * L * kc +
  // p * L, zeros past the width): how op(A)^T's rows and op(B)'s rows are both packed. The
  // lines are read in order, a few at a time, each line's L-wide pieces sent to their strips.
  template <int L>
  static void cut_lines(const Src* src, int64_t ld, int64_t kc, int64_t width, T* dst) {
    constexpr int64_t kLines = 8;
    const int64_t strips = ceil_div(width, int64_t{L});
    for (int64_t p1 = 0; p1 < kc; p1 += kLines) {
      const int64_t p2 = std::min(kc, p1 + kLines);
      for (int64_t s = 0; s < strips; ++s) {
        const int64_t live = std::min<int64_t>(L, width - s * L);
        for (int64_t p = p1; p < p2; ++p) {
          T* d = dst + s * L * kc + p * L;
          const Src* line = src + p * ld + s * L;
          if (live == L) {
            widen_run(line, L, d);  // a constant size: inlined
          } else {
            widen_run(line, live, d);
            std::fill(d + live, d + L, T(0));
          }
        }
      }
    }
  }

  // Rows [i0, i0 + rows) x depth [p0, p0 + kc) of op(A) as strips of MR rows: strip s holds,
  // for each p, the MR values of rows i0 + s * MR + r side by side (zeros past the last row).
  static void pack_a(const Src* A, int64_t lda, bool trans, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                     T* dst) {
    if (trans) {  // the MR values of one p are contiguous
      cut_lines<MR>(A + p0 * lda + i0, lda, kc, rows, dst);
      return;
    }
    for (int64_t s = 0; s < rows; s += MR, dst += MR * kc) {
      const int live = int(std::min<int64_t>(MR, rows - s));
      // The MR rows side by side; 16-bit rows are widened into a buffer first.
      const T* first = nullptr;
      int64_t stride = 0;
      if constexpr (std::is_same_v<Src, T>) {
        first = A + (i0 + s) * lda + p0;
        stride = lda;
      } else {
        T* wide = scratch<T, 2>(MR * kc);
        for (int r = 0; r < live; ++r) widen_run(A + (i0 + s + r) * lda + p0, kc, wide + r * kc);
        first = wide;
        stride = kc;
      }
      if (live == MR) {
        interleave_lines<MR>(first, stride, kc, dst);
      } else {
        for (int64_t p = 0; p < kc; ++p)
          for (int r = 0; r < MR; ++r) dst[p * MR + r] = r < live ? first[r * stride + p] : T(0);
      }
    }
  }

  // Depth [p0, p0 + kc) x columns [j0, j0 + cols) of op(B) as strips of NR columns, each
  // k-major.
  static void pack_b(const Src* B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
                     T* dst) {
    if (!trans) {
      cut_lines<NR>(B + p0 * ldb + j0, ldb, kc, cols, dst);
      return;
    }
    T* wide = nullptr;  // one column of 16-bit B, widened
    if constexpr (!std::is_same_v<Src, T>) wide = scratch<T, 2>(kc);
    for (int64_t s = 0; s < cols; s += NR, dst += NR * kc) {  // column j is stored as a row
      const int live = int(std::min<int64_t>(NR, cols - s));
      if constexpr (std::is_same_v<Src, T>) {
        if (live == NR) {
          interleave_lines<NR>(B + (j0 + s) * ldb + p0, ldb, kc, dst);
          continue;
        }
      }
      for (int c = 0; c < NR; ++c) {
        if (c >= live) {
          for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = T(0);
          continue;
        }
        const T* src;
        if constexpr (std::is_same_v<Src, T>) {
          src = B + (j0 + s + c) * ldb + p0;
        } else {
          widen_run(B + (j0 + s + c) * ldb + p0, kc, wide);
          src = wide;
        }
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = src[p];
      }
    }
  }

  // C tile (rows x cols <= MR x NR, leading dimension ldc) = (add ? C : 0) + packed A strip x
  // packed B strip over kc. A strip with fewer rows than MR sums only the thirds of MR it
  // needs: 64 rows end in a strip of 4, which summed as 12 made 11% of the work of the
  // 64 x 576 x 3136 product (a convolution's) for nothing. Every element is summed in the same
  // lane the same way whichever R sums it.
  static void tile(int64_t kc, const T* pa, const T* pb, T* c, int64_t ldc, int rows, int cols, bool add) {
    constexpr int third = MR / 3;
    if (rows > 2 * third)
      tile_rows<MR>(kc, pa, pb, c, ldc, rows, cols, add);
    else if (rows > third)
      tile_rows<2 * third>(kc, pa, pb, c, ldc, rows, cols, add);
    else
      tile_rows<third>(kc, pa, pb, c, ldc, rows, cols, add);
  }

  // The tile's first R rows (rows <= R <= MR) of the strip.
  template <int R>
  static void tile_rows(int64_t kc, const T* __restrict pa, const T* __restrict pb, T* c, int64_t ldc, int rows,
                        int cols, bool add) {
    using vec = typename M::vec;
    constexpr int NV = M::NV, W = M::W;
    if (add)  // C's lines arrive while the tile is summed
      for (int r = 0; r < rows; ++r) {
        __builtin_prefetch(c + r * ldc);
        __builtin_prefetch(c + r * ldc + cols - 1);
      }
    vec acc[R][NV];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = vec{};
    for (int64_t p = 0; p < kc; ++p, pa += MR, pb += NR) {
      vec b[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&b[v], pb + v * W, sizeof(vec));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const T x = pa[r];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] += b[v] * x;  // one FMA where the ISA has it
      }
    }
    if (rows == R && cols == NR) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          T* dst = c + r * ldc + v * W;
          vec out = acc[r][v];
          if (add) {
            vec old;
            std::memcpy(&old, dst, sizeof(vec));
            out = old + out;
          }
          std::memcpy(dst, &out, sizeof(vec));
        }
      return;
    }
    alignas(64) T tile[R][NR];
    std::memcpy(tile, acc, sizeof tile);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) c[r * ldc + j] = add ? c[r * ldc + j] + tile[r][j] : tile[r][j];
  }
};

}  // namespace

template <class T>
void gemm_batched(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, MatrixLayout c, int64_t batch,
                  int64_t n, int64_t k, int64_t m, bool accumulate) {
  gemm_blocked<FloatKernel<T, T>>(A, a, B, b, C, c, batch, n, k, m, accumulate);
}

template void gemm_batched<float>(const float*, MatrixLayout, const float*, MatrixLayout, float*, MatrixLayout,
                                  int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched<double>(const double*, MatrixLayout, const double*, MatrixLayout, double*, MatrixLayout,
                                   int64_t, int64_t, int64_t, int64_t, bool);

// The portable reduced path: the float32 kernel on operands widened as they are packed.
template <class S>
void gemm_batched_reduced(const S* A, MatrixLayout a, const S* B, MatrixLayout b, float* C, MatrixLayout c,
                          int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate) {
  gemm_blocked<FloatKernel<S, float>>(A, a, B, b, C, c, batch, n, k, m, accumulate);
}

template void gemm_batched_reduced<BFloat16>(const BFloat16*, MatrixLayout, const BFloat16*, MatrixLayout, float*,
                                             MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched_reduced<Float16>(const Float16*, MatrixLayout, const Float16*, MatrixLayout, float*,
                                            MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);

}  // namespace tg::kernels::TG_ISA_NS

#pragma GCC diagnostic pop
