// The GEMM behind every matrix product (see matmul_kernels.h for the API and the legend). One
// copy per instruction set (ops/internal/isa_dispatch.h): the vectors below are as wide as the
// copy's registers.
//
// The classic blocked GEMM (Goto / BLIS), written for row-major C with the vector lanes along
// C's rows (m):
//   - k is cut into blocks of at most kDepthBlock (sizes a function of k alone);
//   - per block, op(A)'s rows are packed in strips of MR rows, stored k-major (the MR values
//     of one k side by side), and op(B)'s columns in strips of NR columns, also k-major, edges
//     padded with zeros;
//   - a micro-kernel keeps an MR x NR tile of C in registers over one depth block: per k, NV
//     vector loads of B, MR broadcasts of A, MR * NV fused multiply-adds.
// Each element of C is summed in one accumulator lane, in k order, block after block: the same
// arithmetic wherever the element falls in a tile, a strip or a block. So how C is cut among
// threads never changes a bit; the cut depends on the shape anyway.
//
// Threads: C is cut into items of whole strips, rows first (a row part packs its A once and
// copies B, which is cheap), a function of the shape only; items are dealt out statically.
#include "matmul_kernels.h"

#include "internal/isa_dispatch.h"
#include "../framework/parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

constexpr int64_t kDepthBlock = 256;  // a k x NR strip of B (32 KB in float) stays in L1
constexpr int64_t kRowStrips = 16;    // rows of one item: its packed A (<= 192 KB) stays in L2
constexpr int64_t kColBytes = 4096;   // columns of one item: kDepthBlock of them are 1 MB of packed B
constexpr int64_t kSmallWork = 4096;  // multiply-adds below which plain loops beat packing
constexpr int64_t kParallelWork = int64_t{1} << 20;  // below this, one thread (a region costs us)

template <class T>
struct Micro {
  typedef T vec __attribute__((vector_size(kVecBytes)));
  static constexpr int W = kVecBytes / int(sizeof(T));  // lanes
  static constexpr int NV = 2;                           // vectors per row of the tile
  static constexpr int NR = NV * W;                      // tile columns
  static constexpr int MR = kRegs == 32 ? 12 : 6;        // tile rows: MR * NV accumulators
};

// Element (i, p) of op(X), X stored with leading dimension ld.
template <class T>
inline T at(const T* x, int64_t ld, bool trans, int64_t i, int64_t p) {
  return trans ? x[p * ld + i] : x[i * ld + p];
}

// Rows [i0, i0 + rows) x depth [p0, p0 + kc) of op(A) as strips of MR rows: strip s holds, for
// each p, the MR values of rows i0 + s * MR + r side by side (zeros past the last row).
template <class T>
void pack_a(const T* A, int64_t lda, bool trans, int64_t i0, int64_t rows, int64_t p0, int64_t kc, T* dst) {
  constexpr int MR = Micro<T>::MR;
  for (int64_t s = 0; s < rows; s += MR, dst += MR * kc) {
    const int live = int(std::min<int64_t>(MR, rows - s));
    if (trans) {  // the MR values of one p are contiguous
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = A + (p0 + p) * lda + i0 + s;
        for (int r = 0; r < MR; ++r) dst[p * MR + r] = r < live ? src[r] : T(0);
      }
    } else {  // the MR rows side by side, each read in order (writes stay contiguous)
      const T* src[MR];
      for (int r = 0; r < MR; ++r) src[r] = A + (i0 + s + std::min(r, live - 1)) * lda + p0;
      if (live == MR) {
        for (int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 16
          for (int r = 0; r < MR; ++r) dst[p * MR + r] = src[r][p];
      } else {
        for (int64_t p = 0; p < kc; ++p)
          for (int r = 0; r < MR; ++r) dst[p * MR + r] = r < live ? src[r][p] : T(0);
      }
    }
  }
}

// Depth [p0, p0 + kc) x columns [j0, j0 + cols) of op(B) as strips of NR columns, each k-major.
template <class T>
void pack_b(const T* B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0, int64_t cols, T* dst) {
  constexpr int NR = Micro<T>::NR;
  const int64_t full = cols / NR, tail = cols - full * NR;
  if (!trans) {  // row by row of B, read contiguously; each row's NR-wide pieces go to their strips
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = B + (p0 + p) * ldb + j0;
      T* d = dst + p * NR;
      for (int64_t s = 0; s < full; ++s) std::memcpy(d + s * NR * kc, src + s * NR, sizeof(T) * NR);
      if (tail) {
        T* dt = d + full * NR * kc;
        std::memcpy(dt, src + full * NR, sizeof(T) * tail);
        std::fill(dt + tail, dt + NR, T(0));
      }
    }
    return;
  }
  for (int64_t s = 0; s < cols; s += NR, dst += NR * kc) {  // column j is stored as a row
    const int live = int(std::min<int64_t>(NR, cols - s));
    for (int c = 0; c < NR; ++c) {
      if (c >= live) {
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = T(0);
        continue;
      }
      const T* src = B + (j0 + s + c) * ldb + p0;
      for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = src[p];
    }
  }
}

// C tile (rows x cols <= MR x NR, leading dimension ldc) = (add ? C : 0) + packed A strip x
// packed B strip over kc.
template <class T>
void micro_tile(int64_t kc, const T* __restrict pa, const T* __restrict pb, T* c, int64_t ldc, int rows, int cols,
                bool add) {
  using M = Micro<T>;
  using vec = typename M::vec;
  constexpr int MR = M::MR, NV = M::NV, W = M::W, NR = M::NR;
  if (add)  // C's lines arrive while the tile is summed
    for (int r = 0; r < rows; ++r) {
      __builtin_prefetch(c + r * ldc);
      __builtin_prefetch(c + r * ldc + cols - 1);
    }
  vec acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = vec{};
  for (int64_t p = 0; p < kc; ++p, pa += MR, pb += NR) {
    vec b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], pb + v * W, sizeof(vec));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const T x = pa[r];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += b[v] * x;  // one FMA where the ISA has it
    }
  }
  if (rows == MR && cols == NR) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
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
  alignas(64) T tile[MR][NR];
  std::memcpy(tile, acc, sizeof tile);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) c[r * ldc + j] = add ? c[r * ldc + j] + tile[r][j] : tile[r][j];
}

// Products too small to pay for packing: plain loops, each sum in k order as the tiles do.
template <class T>
void gemm_small(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, int64_t ldc, int64_t n, int64_t k,
                int64_t m, bool accumulate) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      T s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(A, a.ld, a.trans, i, p) * at(B, b.ld, b.trans, p, j);
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
    }
}

// Per-thread packing buffers, kept from call to call (64-byte aligned).
template <class T, int Slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> kept;
  constexpr int64_t pad = 64 / sizeof(T);
  if (int64_t(kept.size()) < n + pad) kept.resize(n + pad);
  const auto addr = reinterpret_cast<std::uintptr_t>(kept.data());
  return kept.data() + ((64 - addr % 64) % 64) / sizeof(T);
}

// How C is cut: rows in parts of whole MR strips, columns in parts of whole NR strips, parts
// as even as strips allow; a function of the shape alone.
struct Plan {
  int64_t row_strips, col_strips, row_parts, col_parts;
  int64_t first(int64_t part, int64_t parts, int64_t strips) const { return strips * part / parts; }
};

template <class T>
Plan plan(int64_t n, int64_t k, int64_t m) {
  using M = Micro<T>;
  Plan p;
  p.row_strips = ceil_div(n, M::MR);
  p.col_strips = ceil_div(m, M::NR);
  p.row_parts = ceil_div(p.row_strips, kRowStrips);
  p.col_parts = ceil_div(p.col_strips, std::max<int64_t>(1, kColBytes / int64_t(sizeof(T)) / M::NR));
  // At least two items (for two threads) when the product is worth a region: more row parts
  // if there are rows to cut, else more column parts.
  if (p.row_parts * p.col_parts < 2 && n * k * m >= kParallelWork) {
    if (p.row_strips >= 2) p.row_parts = 2;
    else if (p.col_strips >= 2) p.col_parts = 2;
  }
  return p;
}

// One item: rows [i0, i1) x columns [j0, j1) of one product, over the whole depth.
template <class T>
void gemm_item(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, int64_t ldc, int64_t i0, int64_t i1,
               int64_t j0, int64_t j1, int64_t k, bool accumulate) {
  using M = Micro<T>;
  const int64_t rows = i1 - i0, cols = j1 - j0;
  const int64_t depth_blocks = ceil_div(k, kDepthBlock), kc_max = ceil_div(k, depth_blocks);
  T* pa = scratch<T, 0>(ceil_div(rows, M::MR) * M::MR * kc_max);
  T* pb = scratch<T, 1>(ceil_div(cols, M::NR) * M::NR * kc_max);
  for (int64_t blk = 0; blk < depth_blocks; ++blk) {
    const int64_t p0 = k * blk / depth_blocks, kc = k * (blk + 1) / depth_blocks - p0;
    pack_a(A, a.ld, a.trans, i0, rows, p0, kc, pa);
    pack_b(B, b.ld, b.trans, p0, kc, j0, cols, pb);
    const bool add = accumulate || blk > 0;
    for (int64_t js = 0; js < cols; js += M::NR) {
      const T* pbs = pb + (js / M::NR) * M::NR * kc;
      const int live_c = int(std::min<int64_t>(M::NR, cols - js));
      for (int64_t is = 0; is < rows; is += M::MR)
        micro_tile(kc, pa + (is / M::MR) * M::MR * kc, pbs, C + (i0 + is) * ldc + j0 + js, ldc,
                   int(std::min<int64_t>(M::MR, rows - is)), live_c, add);
    }
  }
}

// dst (k x m, row-major) = the transpose of X stored (m x k) with leading dimension ld, in
// square blocks that stay in L1.
template <class T>
void transpose_into(const T* X, int64_t ld, int64_t m, int64_t k, T* dst) {
  constexpr int64_t kBlock = 32;
  for (int64_t j0 = 0; j0 < m; j0 += kBlock)
    for (int64_t p0 = 0; p0 < k; p0 += kBlock)
      for (int64_t j = j0; j < std::min(m, j0 + kBlock); ++j)
        for (int64_t p = p0; p < std::min(k, p0 + kBlock); ++p) dst[p * m + j] = X[j * ld + p];
}

}  // namespace

template <class T>
void gemm_batched(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, MatrixLayout c, int64_t batch,
                  int64_t n, int64_t k, int64_t m, bool accumulate) {
  if (c.trans) {  // C^T = op(B)^T op(A)^T: a row-major product with the roles swapped
    a.trans = !a.trans;
    b.trans = !b.trans;
    c.trans = false;
    TG_ISA_NS::gemm_batched<T>(B, b, A, a, C, c, batch, m, k, n, accumulate);
    return;
  }
  if (batch <= 0 || n <= 0 || m <= 0) return;
  // One B for every matrix of a stacked A: one product with batch * n rows.
  if (batch > 1 && b.batch_stride == 0 && !a.trans && a.batch_stride == n * a.ld && c.batch_stride == n * c.ld) {
    n *= batch;
    batch = 1;
  }
  if (k == 0) {
    if (!accumulate)
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < n; ++i) std::fill_n(C + bi * c.batch_stride + i * c.ld, m, T(0));
    return;
  }
  if (n * k * m <= kSmallWork) {
#pragma omp parallel for schedule(static) if (batch * n * k * m >= kParallelWork && max_threads() > 1)
    for (int64_t bi = 0; bi < batch; ++bi)
      gemm_small(A + bi * a.batch_stride, a, B + bi * b.batch_stride, b, C + bi * c.batch_stride, c.ld, n, k, m,
                 accumulate);
    return;
  }
  const Plan p = plan<T>(n, k, m);
  using M = Micro<T>;
  // A transposed B would be packed (a strided gather) once per row part: with several, one
  // plain transpose first is cheaper (linear's forward: x W^T).
  std::vector<T> b_rows;
  if (batch == 1 && b.trans && p.row_parts >= 3) {
    b_rows.resize(size_t(k * m));
    transpose_into(B, b.ld, m, k, b_rows.data());
    B = b_rows.data();
    b = {m, 0, false};
  }
  const int64_t per_batch = p.row_parts * p.col_parts, items = batch * per_batch;
#pragma omp parallel for schedule(static) if (items > 1 && batch * n * k * m >= kParallelWork && max_threads() > 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t bi = item / per_batch, rp = item % per_batch / p.col_parts, cp = item % p.col_parts;
    const int64_t i0 = p.first(rp, p.row_parts, p.row_strips) * M::MR;
    const int64_t i1 = std::min(n, p.first(rp + 1, p.row_parts, p.row_strips) * M::MR);
    const int64_t j0 = p.first(cp, p.col_parts, p.col_strips) * M::NR;
    const int64_t j1 = std::min(m, p.first(cp + 1, p.col_parts, p.col_strips) * M::NR);
    gemm_item(A + bi * a.batch_stride, a, B + bi * b.batch_stride, b, C + bi * c.batch_stride, c.ld, i0, i1, j0, j1,
              k, accumulate);
  }
}

template void gemm_batched<float>(const float*, MatrixLayout, const float*, MatrixLayout, float*, MatrixLayout,
                                  int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched<double>(const double*, MatrixLayout, const double*, MatrixLayout, double*, MatrixLayout,
                                   int64_t, int64_t, int64_t, int64_t, bool);

}  // namespace tg::kernels::TG_ISA_NS

#pragma GCC diagnostic pop
