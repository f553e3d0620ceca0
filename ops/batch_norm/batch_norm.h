// Batch normalisation (Ioffe & Szegedy, 2015) on tensors and the tape, PyTorch's F.batch_norm
// semantics. The maths, forward beside backward, is in ops/batch_norm/batch_norm_kernels.h.
#pragma once

#include <array>

#include "../../framework/tensor.h"

namespace tg {

// input (N, C, *) of any rank >= 2; running_mean, running_var, weight, bias (C) or undefined.
//
// training: normalises with the batch's mean and biased variance of each channel, and updates
// running_mean / running_var in place (when defined; never recorded, the version is bumped):
//   running = (1 - momentum) * running + momentum * batch statistic,
// with the UNBIASED variance (sum / (M - 1), M = N * prod(spatial dims)) for running_var.
// A channel of a single value (M = 1) is refused, as PyTorch refuses it.
// eval (training = false): normalises with running_mean and running_var, which must be defined.
// PyTorch's momentum=None (a cumulative average) is the modules' business (models/batch_norm.h):
// they pass momentum = 1 / num_batches_tracked, exactly as torch.nn.BatchNorm does.
//
// Dtypes: float32, float64, bfloat16, float16, the same for every tensor of a call (else a
// tg::Error naming the argument). A 16-bit call computes in float32 (its tensors widened) and
// rounds each output, gradient and running statistic once; its save_mean and save_invstd stay
// float32. Under autocast a 16-bit input computes in float32 (the group_norm / layer_norm policy).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// The kernel API, as aten's native_batch_norm / native_batch_norm_backward. Unlike aten's,
// save_mean and save_invstd are also returned in eval mode (the running statistics the output
// used, invstd = 1 / sqrt(running_var + eps)), so the backward reads one pair in both modes.
struct BatchNormResult {
  Tensor output;                 // the input's shape
  Tensor save_mean, save_invstd;  // (C)
};
BatchNormResult native_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var, bool training,
                                  double momentum, double eps);

struct BatchNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // undefined where output_mask says no
};
BatchNormGrads native_batch_norm_backward(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                                          const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                          std::array<bool, 3> output_mask = {true, true, true});

}  // namespace tg
