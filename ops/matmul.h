// Matrix products (the GEMM itself: ops/matmul_kernels.h, one copy per instruction set).
#pragma once

#include "../framework/tensor.h"

namespace tg {

// PyTorch's matmul: 1-D operands are promoted (and the added dim removed again), batch dims
// broadcast. a (..., n, k) @ b (..., k, m) -> (..., n, m).
Tensor matmul(const Tensor& a, const Tensor& b);

// y = x W^T + b, with x (..., in), weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// The raw kernel: C (n, m) = op(A) op(B) for row-major contiguous buffers, op = transpose or not;
// C is overwritten (beta = 0) or accumulated into (accumulate = true).
template <class T>
void gemm(const T* A, const T* B, T* C, int64_t n, int64_t k, int64_t m, bool trans_a, bool trans_b,
          bool accumulate = false);

}  // namespace tg
