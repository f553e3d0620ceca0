// Pointwise math of one tensor: powers, exponentials, logarithm, roots, absolute value,
// clamping. (Arithmetic with a scalar, x - s or s / x, is in elementwise.h.)
#pragma once

#include <optional>

#include "../framework/tensor.h"

namespace tg {

Tensor pow(const Tensor& x, double exponent);  // d/dx = p x^(p-1); exactly 0 when p == 0
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)
Tensor abs(const Tensor& x);    // gradient sign(x), 0 at 0 (as PyTorch)
// Either bound may be absent. The gradient passes where min <= x <= max (PyTorch's mask). A NaN
// bound makes every output NaN, its gradient 0, as PyTorch's clamp_min / clamp_max and two-bound
// clamp (PyTorch 1.13's clamp with one bound given ignores a NaN bound in the forward alone).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);

Tensor reciprocal(const Tensor& x);  // 1 / x, as pow(x, -1)
Tensor square(const Tensor& x);      // x * x, as pow(x, 2)

// In place (framework/inplace.h has the autograd rules).
Tensor& clamp_(Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);

}  // namespace tg
