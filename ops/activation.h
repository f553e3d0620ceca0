// Activation functions.
#pragma once

#include <string>

#include "../framework/tensor.h"

namespace tg {

Tensor relu(const Tensor& x);
Tensor& relu_(Tensor& x);  // in place (framework/inplace.h); backward masks by the result
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// PyTorch's gelu: approximate = "none" (exact, x * Phi(x) with erf) or "tanh"
// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// PyTorch's silu (swish): x * sigmoid(x).
Tensor silu(const Tensor& x);
// PyTorch's leaky_relu: x where x > 0, else negative_slope * x (the derivative at 0 is
// negative_slope, as PyTorch's backward takes x > 0 strictly).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);

}  // namespace tg
