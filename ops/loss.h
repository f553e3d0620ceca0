// Loss functions, with PyTorch's signatures and reduction semantics.
#pragma once

#include "../framework/tensor.h"

namespace tg {

enum class Reduction { None, Mean, Sum };

// Pointwise regression losses; input and target broadcast together (both may require grad).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta = 0 is l1.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// logits (N, C) or (N, C, d1, ...) or (C); target int64 class indices (N) / (N, d1, ...) / ().
// Mean, as PyTorch: the sum over the targets that are not ignore_index, divided by their
// number (both the NLL and the smoothing term; NaN when every target is ignored).
// Or, as PyTorch's second form, a floating target of the logits' shape and dtype holding class
// probabilities (soft labels, mixup): each lane's loss is -sum_c t_c log_softmax(logits)_c (t
// smoothed first), Mean over all lanes; ignore_index does not apply.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});

// Stable: max(x,0) - x y + log(1 + e^-|x|), with pos_weight (broadcast over the last dims, e.g.
// (C)) weighting the positive term. Gradients flow to input, target and pos_weight.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction reduction = Reduction::Mean);

// torchvision.ops.sigmoid_focal_loss: bce * (1 - p_t)^gamma, times alpha_t when alpha >= 0.
// Its default reduction is None, as torchvision's.
Tensor sigmoid_focal_loss(const Tensor& inputs, const Tensor& targets, double alpha = 0.25, double gamma = 2.0,
                          Reduction reduction = Reduction::None);

// Applies a reduction (None: the tensor itself) with the differentiable sum / mean.
Tensor apply_reduction(const Tensor& loss, Reduction reduction);

}  // namespace tg
