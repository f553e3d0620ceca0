// The matrix-product kernel's public entry points (matmul_kernels.h, and tg::gemm of matmul.h):
// they forward to the copy of matmul_kernels.cpp compiled for the active instruction set
// (ops/internal/isa_dispatch.h), or for bf16 operands on an AVX512-BF16 CPU to
// matmul_avx512bf16.cpp; and the float32 math modes (framework/math_mode.h) of a product.
#include "matmul.h"
#include "matmul_kernels.h"

#include "internal/isa_dispatch.h"
#include "internal/reduced_float.h"

#include <algorithm>
#include <type_traits>
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

}  // namespace

TG_ISA_DECLARE(template <class S> void gemm_batched_reduced(const S*, MatrixLayout, const S*, MatrixLayout, float*,
                                                            MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);)

#if defined(TAPEGRAD_ISA_AVX512BF16)
namespace isa_avx512bf16 {  // ops/matmul_avx512bf16.cpp
void gemm_batched_bf16(const BFloat16*, MatrixLayout, const BFloat16*, MatrixLayout, float*, MatrixLayout, int64_t,
                       int64_t, int64_t, int64_t, bool);
}
#endif

// Paths, best first. AMX (tiles of 16 x 32 bf16, TDPBF16PS; Linux needs
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) once per process) would come first here,
// as an Isa::Amx level above Avx512Bf16 with its own source beside matmul_avx512bf16.cpp: not
// written, since no machine it could be run and tested on was at hand. Float16 operands always
// take the converting path (no AVX512-FP16 kernel: its sums would be float16).
template <class S>
void gemm_batched_reduced(const S* A, MatrixLayout a, const S* B, MatrixLayout b, float* C, MatrixLayout c,
                          int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate) {
#if defined(TAPEGRAD_ISA_AVX512BF16)
  if constexpr (std::is_same_v<S, BFloat16>) {
    if (active_isa() == Isa::Avx512Bf16) {
      isa_avx512bf16::gemm_batched_bf16(A, a, B, b, C, c, batch, n, k, m, accumulate);
      return;
    }
  }
#endif
  TG_ISA_DISPATCH(gemm_batched_reduced<S>)(A, a, B, b, C, c, batch, n, k, m, accumulate);
}

template void gemm_batched_reduced<BFloat16>(const BFloat16*, MatrixLayout, const BFloat16*, MatrixLayout, float*,
                                             MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);
template void gemm_batched_reduced<Float16>(const Float16*, MatrixLayout, const Float16*, MatrixLayout, float*,
                                            MatrixLayout, int64_t, int64_t, int64_t, int64_t, bool);

void gemm_batched_float32_math(Float32Math mode, const float* A, MatrixLayout a, const float* B, MatrixLayout b,
                               float* C, MatrixLayout c, int64_t batch, int64_t n, int64_t k, int64_t m,
                               bool accumulate) {
  if (mode == Float32Math::Float32) {
    gemm_batched<float>(A, a, B, b, C, c, batch, n, k, m, accumulate);
    return;
  }
  // What the layouts address (op(A) is n x k: stored k x n when transposed).
  const int64_t na = a.trans ? span(a, batch, k, n) : span(a, batch, n, k);
  const int64_t nb = b.trans ? span(b, batch, m, k) : span(b, batch, k, m);
  auto rounded = [&](auto tag) {
    using S = decltype(tag);
    std::vector<S> ra(static_cast<size_t>(na)), rb(static_cast<size_t>(nb));
    round_operand(A, na, ra.data());
    round_operand(B, nb, rb.data());
    gemm_batched_reduced<S>(ra.data(), a, rb.data(), b, C, c, batch, n, k, m, accumulate);
  };
  switch (mode) {
    case Float32Math::BFloat16: return rounded(BFloat16{});
    case Float32Math::Float16: return rounded(Float16{});
    case Float32Math::BFloat16x3: break;
    case Float32Math::Float32: return;
  }
  const size_t sa = static_cast<size_t>(na), sb = static_cast<size_t>(nb);
  std::vector<BFloat16> a_hi(sa), a_lo(sa), b_hi(sb), b_lo(sb);
  split_bfloat16(A, na, a_hi.data(), a_lo.data());
  split_bfloat16(B, nb, b_hi.data(), b_lo.data());
  gemm_batched_reduced<BFloat16>(a_lo.data(), a, b_hi.data(), b, C, c, batch, n, k, m, accumulate);
  gemm_batched_reduced<BFloat16>(a_hi.data(), a, b_lo.data(), b, C, c, batch, n, k, m, true);
  gemm_batched_reduced<BFloat16>(a_hi.data(), a, b_hi.data(), b, C, c, batch, n, k, m, true);
}

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
