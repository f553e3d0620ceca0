// Layer normalisation over the trailing dims, as torch.nn.functional.layer_norm.
#pragma once

#include "../framework/tensor.h"

namespace tg {

// x (..., *normalized_shape); weight and bias of normalized_shape, or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace tg
