// The matrix-product kernel's public entry points (matmul_kernels.h, and tg::gemm of matmul.h):
// they forward to the copy of matmul_kernels.cpp compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "matmul.h"
#include "matmul_kernels.h"

#include "internal/isa_dispatch.h"

#include <algorithm>
#include <vector>

namespace tg {
namespace kernels {

TG_ISA_DECLARE(template <class T> void gemm_batched(const T*, MatrixLayout, const T*, MatrixLayout, T*, MatrixLayout,
                                                    int64_t, int64_t, int64_t, int64_t, bool);)

template <class T>
void gemm_batched(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, MatrixLayout c, int64_t batch,
                  int64_t n, int64_t k, int64_t m, bool accumulate) {
  TG_ISA_DISPATCH(gemm_batched<T>)(A, a, B, b, C, c, batch, n, k, m, accumulate);
}

template void gemm_batched<float>(const float*, MatrixLayout, const float*, MatrixLayout, float*, MatrixLayout,
                                  int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched<double>(const double*, MatrixLayout, const double*, MatrixLayout, double*, MatrixLayout,
                                   int64_t, int64_t, int64_t, int64_t, bool);

namespace {

// The elements a layout's batch of stored (rows x cols) matrices spans, from the first.
int64_t span(MatrixLayout l, int64_t batch, int64_t rows, int64_t cols) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
  return (batch - 1) * l.batch_stride + (rows - 1) * l.ld + cols;
}

template <class S>
std::vector<float> widened(const S* x, int64_t n) {
  std::vector<float> out(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(x[i]);
  return out;
}

}  // namespace

// Reference path (to be replaced by packed kernels): both operands widened to float32 in their
// own layouts, then the float32 product.
template <class S>
void gemm_batched_reduced(const S* A, MatrixLayout a, const S* B, MatrixLayout b, float* C, MatrixLayout c,
                          int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate) {
  const std::vector<float> wa = widened(A, a.trans ? span(a, batch, k, n) : span(a, batch, n, k));
  const std::vector<float> wb = widened(B, b.trans ? span(b, batch, m, k) : span(b, batch, k, m));
  gemm_batched<float>(wa.data(), a, wb.data(), b, C, c, batch, n, k, m, accumulate);
}

template void gemm_batched_reduced<BFloat16>(const BFloat16*, MatrixLayout, const BFloat16*, MatrixLayout, float*,
                                             MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched_reduced<Float16>(const Float16*, MatrixLayout, const Float16*, MatrixLayout, float*,
                                            MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);

}  // namespace kernels

// One contiguous product: C (n, m) = op(A) op(B), A stored (n, k) or (k, n), B (k, m) or (m, k).
template <class T>
void gemm(const T* A, const T* B, T* C, int64_t n, int64_t k, int64_t m, bool trans_a, bool trans_b,
          bool accumulate) {
  kernels::gemm_batched<T>(A, {trans_a ? n : k, 0, trans_a}, B, {trans_b ? k : m, 0, trans_b}, C, {m, 0, false}, 1,
                           n, k, m, accumulate);
}

template void gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool, bool, bool);
template void gemm<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, bool, bool, bool);

}  // namespace tg
