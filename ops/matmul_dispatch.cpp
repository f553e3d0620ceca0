// The matrix-product kernel's public entry points (matmul_kernels.h, and tg::gemm of matmul.h):
// they forward to the copy of matmul_kernels.cpp compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "matmul.h"
#include "matmul_kernels.h"

#include "internal/isa_dispatch.h"

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
