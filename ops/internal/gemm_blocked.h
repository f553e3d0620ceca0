// The blocked GEMM's driver (Goto / BLIS), shared by the micro-kernel families: the float,
// double and converted-16-bit kernels of ops/matmul_kernels.cpp (one copy per instruction set)
// and the vdpbf16ps kernel of ops/matmul_avx512bf16.cpp. Included by those files only, inside
// nothing: it opens the includer's instruction-set namespace TG_ISA_NS (isa_dispatch.h).
//
// Shape legend and layouts: ops/matmul_kernels.h. The driver cuts and orders the work, a
// kernel K says how panels are packed and how a register tile is summed:
//
//   struct K {
//     using Src = ...;     // operand elements as stored (float, double, BFloat16, Float16)
//     using Acc = ...;     // C's elements, and the sums (float or double)
//     using Packed = ...;  // elements of the packed panels
//     static constexpr int MR, NR;              // the register tile of C
//     static constexpr int64_t kDepthBlock;     // k is cut into blocks of at most this
//     static int64_t depth(int64_t kc);         // packed elements per row (or column) of a
//                                               // depth block of kc (kc, or kc / 2 rounded up
//                                               // for pairs)
//     static void pack_a(const Src* A, int64_t lda, bool trans, int64_t i0, int64_t rows,
//                        int64_t p0, int64_t kc, Packed* dst);  // strips of MR rows
//     static void pack_b(const Src* B, int64_t ldb, bool trans, int64_t p0, int64_t kc,
//                        int64_t j0, int64_t cols, Packed* dst);  // strips of NR columns
//     static void tile(int64_t kc, const Packed* pa, const Packed* pb, Acc* c, int64_t ldc,
//                      int rows, int cols, bool add);  // C tile (+)= A strip x B strip
//   };
//
// Each element of C is summed in one accumulator lane, in k order, block after block, by the
// kernel's own arithmetic: the same wherever the element falls in a tile, a strip or a block.
// So how C is cut among threads never changes a bit (the cut follows the shape and the
// thread count).
//
// Threads: C is cut into one item per thread (more where B's columns are many), of whole
// strips, dealt out statically (Plan below).
//
// Loops of one item (Goto / BLIS order): per depth block, B's columns of the item are packed
// once (<= 1 MB, in L2), then A's rows in chunks of kRowStrips strips (<= 192 KB, in L2), and
// for each B strip (k x NR, 32 KB: in L1 while the chunk's A strips stream past it) every A
// strip of the chunk. Packing B once per item rather than once per chunk of rows, and one
// item per thread rather than one per 192 rows, took 1024^3 from 14.9 to 13.0 ms at 1 thread
// (a profile had packing at 13% of the time, B's six times over).
#pragma once

#include "../matmul_kernels.h"
#include "../../framework/parallel.h"
#include "isa_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tg::kernels::TG_ISA_NS {
namespace {

constexpr int64_t kRowStrips = 16;    // rows packed at once: their packed A (<= 192 KB) stays in L2
constexpr int64_t kColBytes = 4096;   // columns of one item: kDepthBlock of them are 1 MB of packed B
constexpr int64_t kSmallWork = 4096;  // multiply-adds below which plain loops beat packing
constexpr int64_t kParallelWork = int64_t{1} << 20;  // below this, one thread (a region costs us)

// Element (i, p) of op(X), X stored with leading dimension ld.
template <class T>
inline T at(const T* x, int64_t ld, bool trans, int64_t i, int64_t p) {
  return trans ? x[p * ld + i] : x[i * ld + p];
}

// Products too small to pay for packing: plain loops, each sum in k order as the tiles do.
template <class Acc, class Src>
void gemm_small(const Src* A, MatrixLayout a, const Src* B, MatrixLayout b, Acc* C, int64_t ldc, int64_t n,
                int64_t k, int64_t m, bool accumulate) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      Acc s = 0;
      for (int64_t p = 0; p < k; ++p) s += Acc(at(A, a.ld, a.trans, i, p)) * Acc(at(B, b.ld, b.trans, p, j));
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
    }
}

// Per-thread buffers, kept from call to call (64-byte aligned).
template <class T, int Slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> kept;
  constexpr int64_t pad = 64 / sizeof(T);
  if (int64_t(kept.size()) < n + pad) kept.resize(n + pad);
  const auto addr = reinterpret_cast<std::uintptr_t>(kept.data());
  return kept.data() + ((64 - addr % 64) % 64) / sizeof(T);
}

// How C is cut among threads: rows in parts of whole MR strips, columns in parts of whole NR
// strips, parts as even as strips allow. Each part packs the B columns it needs once per depth
// block and the A rows it needs once per depth block, so cutting rows makes every thread pack
// B whole, cutting columns makes every thread pack A whole: the smaller operand is the one
// duplicated. The cut never changes a bit of C (see above), so it may follow the thread count.
struct Plan {
  int64_t row_strips, col_strips, row_parts, col_parts;
  int64_t first(int64_t part, int64_t parts, int64_t strips) const { return strips * part / parts; }
};

template <class K>
Plan plan(int64_t n, int64_t m, int64_t threads) {
  Plan p;
  p.row_strips = ceil_div(n, K::MR);
  p.col_strips = ceil_div(m, K::NR);
  p.row_parts = 1;
  p.col_parts = ceil_div(p.col_strips, std::max<int64_t>(1, kColBytes / int64_t(sizeof(typename K::Acc)) / K::NR));
  if (threads > 1 && p.col_parts % threads != 0) {
    const bool rows = m <= n;
    if (rows && p.row_strips >= threads)
      p.row_parts = threads;
    else
      p.col_parts = std::min(p.col_strips, ceil_div(p.col_parts, threads) * threads);
  }
  return p;
}

// One item: rows [i0, i1) x columns [j0, j1) of one product, over the whole depth.
template <class K>
void gemm_item(const typename K::Src* A, MatrixLayout a, const typename K::Src* B, MatrixLayout b,
               typename K::Acc* C, int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k,
               bool accumulate) {
  using Packed = typename K::Packed;
  const int64_t rows = i1 - i0, cols = j1 - j0;
  const int64_t depth_blocks = ceil_div(k, K::kDepthBlock), kc_max = ceil_div(k, depth_blocks);
  const int64_t d_max = K::depth(kc_max);
  const int64_t chunk = kRowStrips * K::MR;
  Packed* pa = scratch<Packed, 0>(ceil_div(std::min(rows, chunk), K::MR) * K::MR * d_max);
  Packed* pb = scratch<Packed, 1>(ceil_div(cols, K::NR) * K::NR * d_max);
  for (int64_t blk = 0; blk < depth_blocks; ++blk) {
    const int64_t p0 = k * blk / depth_blocks, kc = k * (blk + 1) / depth_blocks - p0, d = K::depth(kc);
    K::pack_b(B, b.ld, b.trans, p0, kc, j0, cols, pb);
    const bool add = accumulate || blk > 0;
    for (int64_t ic = 0; ic < rows; ic += chunk) {
      const int64_t rc = std::min(chunk, rows - ic);
      K::pack_a(A, a.ld, a.trans, i0 + ic, rc, p0, kc, pa);
      for (int64_t js = 0; js < cols; js += K::NR) {
        const Packed* pbs = pb + (js / K::NR) * K::NR * d;
        const int live_c = int(std::min<int64_t>(K::NR, cols - js));
        for (int64_t is = 0; is < rc; is += K::MR)
          K::tile(kc, pa + (is / K::MR) * K::MR * d, pbs, C + (i0 + ic + is) * ldc + j0 + js, ldc,
                  int(std::min<int64_t>(K::MR, rc - is)), live_c, add);
      }
    }
  }
}

// The whole batched product (matmul_kernels.h's gemm_batched contract) with kernel K.
template <class K>
void gemm_blocked(const typename K::Src* A, MatrixLayout a, const typename K::Src* B, MatrixLayout b,
                  typename K::Acc* C, MatrixLayout c, int64_t batch, int64_t n, int64_t k, int64_t m,
                  bool accumulate) {
  using Acc = typename K::Acc;
  if (c.trans) {  // C^T = op(B)^T op(A)^T: a row-major product with the roles swapped
    a.trans = !a.trans;
    b.trans = !b.trans;
    c.trans = false;
    gemm_blocked<K>(B, b, A, a, C, c, batch, m, k, n, accumulate);
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
        for (int64_t i = 0; i < n; ++i) std::fill_n(C + bi * c.batch_stride + i * c.ld, m, Acc(0));
    return;
  }
  if (n * k * m <= kSmallWork) {
#pragma omp parallel for schedule(static) if (batch * n * k * m >= kParallelWork && max_threads() > 1)
    for (int64_t bi = 0; bi < batch; ++bi)
      gemm_small<Acc>(A + bi * a.batch_stride, a, B + bi * b.batch_stride, b, C + bi * c.batch_stride, c.ld, n, k, m,
                      accumulate);
    return;
  }
  const bool parallel = batch * n * k * m >= kParallelWork && max_threads() > 1;
  const Plan p = plan<K>(n, m, parallel && batch < max_threads() ? max_threads() : 1);
  const int64_t per_batch = p.row_parts * p.col_parts, items = batch * per_batch;
#pragma omp parallel for schedule(static) if (items > 1 && parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t bi = item / per_batch, rp = item % per_batch / p.col_parts, cp = item % p.col_parts;
    const int64_t i0 = p.first(rp, p.row_parts, p.row_strips) * K::MR;
    const int64_t i1 = std::min(n, p.first(rp + 1, p.row_parts, p.row_strips) * K::MR);
    const int64_t j0 = p.first(cp, p.col_parts, p.col_strips) * K::NR;
    const int64_t j1 = std::min(m, p.first(cp + 1, p.col_parts, p.col_strips) * K::NR);
    gemm_item<K>(A + bi * a.batch_stride, a, B + bi * b.batch_stride, b, C + bi * c.batch_stride, c.ld, i0, i1, j0,
                 j1, k, accumulate);
  }
}

}  // namespace
}  // namespace tg::kernels::TG_ISA_NS
