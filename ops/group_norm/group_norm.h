// Group normalisation (Wu & He, 2018) on tensors and the tape, PyTorch's semantics.
// The maths, forward beside backward, is in ops/group_norm/group_norm_kernels.h.
#pragma once

#include <array>

#include "../../framework/tensor.h"

namespace tg {

// Dtypes: float32, float64, bfloat16, float16, the same for every tensor of a call (else a
// tg::Error naming the argument). In bfloat16 / float16 the statistics and the arithmetic are
// float32 (native 16-bit kernels: loads widen, each output y and every gradient is rounded once
// to the dtype); mean and rstd stay float32 for a 16-bit input (PyTorch 1.13 rounds them to the
// input's dtype), and native_group_norm_backward expects them so.

// input (N, C, *) of any rank >= 2; weight and bias (C) or undefined.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// The kernel API, as aten's native_group_norm / native_group_norm_backward.
struct GroupNormResult {
  Tensor output;      // the input's shape
  Tensor mean, rstd;  // (N, group); rstd = 1 / sqrt(var + eps)
};
GroupNormResult native_group_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t N,
                                  int64_t C, int64_t HxW, int64_t group, double eps);

struct GroupNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // undefined where output_mask says no
};
GroupNormGrads native_group_norm_backward(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& weight, int64_t N, int64_t C,
                                          int64_t HxW, int64_t group,
                                          std::array<bool, 3> output_mask = {true, true, true});

}  // namespace tg
