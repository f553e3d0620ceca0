// The matrix-product kernel (raw pointers, no tape): one GEMM with transposes, leading
// dimensions and a batch, used by matmul, linear and their backwards (ops/matmul.cpp).
//
// Shape legend: B = batch, n = rows of C, k = the contracted dim, m = columns of C.
//
//   C[b] (n x m)  =  op(A[b]) (n x k)  op(B[b]) (k x m)   (+ C[b] when accumulate)
//
// Every matrix is stored row by row with its own leading dimension (ld >= its stored width);
// a transposed operand is stored as the transpose: op(A) = A^T with A stored (k x n). Matrix b
// of a batch starts batch_stride elements after matrix b - 1 (0 repeats one matrix for every b).
//
// Defined in matmul_dispatch.cpp, which forwards to the copy compiled for the active
// instruction set (matmul_kernels.cpp, see ops/internal/isa_dispatch.h). Threads: OpenMP over
// blocks of C cut by the shape alone, every element summed in the same order on any block, so
// results are identical bit for bit for any thread count (on one instruction-set path). Called
// from inside a parallel region it runs on the calling thread. No validation: the sizes must
// describe buffers that exist.
#pragma once

#include <cstdint>

#include "../framework/half.h"
#include "../framework/math_mode.h"

namespace tg::kernels {

struct MatrixLayout {
  int64_t ld = 0;            // elements from one stored row to the next
  int64_t batch_stride = 0;  // elements from one matrix of the batch to the next
  bool trans = false;        // stored transposed
};

template <class T>
void gemm_batched(const T* A, MatrixLayout a, const T* B, MatrixLayout b, T* C, MatrixLayout c, int64_t batch,
                  int64_t n, int64_t k, int64_t m, bool accumulate);

// The same product with 16-bit operands S (BFloat16 or Float16) and a float32 result: every
// product and every sum is computed in float32 (a bf16 or fp16 times a bf16 or fp16 is exact in
// float32), and C is float32, so the caller rounds once, when it stores a 16-bit output. This
// is the product behind bf16/fp16 matmul, linear and convolution, and behind the reduced float32
// math modes (framework/math_mode.h), which round float32 operands to S first.
//
// Paths (chosen at run time, framework/isa.h): with Isa::Avx512Bf16 active, BFloat16 operands
// use vdpbf16ps (ops/matmul_avx512bf16.cpp: products exact, each pair of products added before
// the accumulator, bf16 denormals read as zero and float32 denormal sums flushed to zero);
// otherwise, and for Float16 always, the float32 kernel of the active path with the operands
// widened as they are packed (the bits of gemm_batched<float> on the widened operands). Each
// path gives the same bits for any thread count. No AMX path yet (see matmul_dispatch.cpp).
template <class S>
void gemm_batched_reduced(const S* A, MatrixLayout a, const S* B, MatrixLayout b, float* C, MatrixLayout c,
                          int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate);

// A float32 product under a math mode (framework/math_mode.h): Float32 is gemm_batched<float>;
// BFloat16 / Float16 round both operands to S and call gemm_batched_reduced<S>; BFloat16x3
// splits each operand x = hi + lo (split_bfloat16) and accumulates lo_a hi_b, hi_a lo_b, then
// hi_a hi_b (small terms first) into C with gemm_batched_reduced<BFloat16>. The rounded copies
// span what the layouts address (one matrix when a batch stride is 0).
void gemm_batched_float32_math(Float32Math mode, const float* A, MatrixLayout a, const float* B, MatrixLayout b,
                               float* C, MatrixLayout c, int64_t batch, int64_t n, int64_t k, int64_t m,
                               bool accumulate);

}  // namespace tg::kernels
