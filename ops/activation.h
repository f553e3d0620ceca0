// Activation functions.
#pragma once

#include "../framework/tensor.h"

namespace tg {

Tensor relu(const Tensor& x);

}  // namespace tg
