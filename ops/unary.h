// Pointwise math: powers, exponentials, absolute value, clamping, and the scalar forms of
// arithmetic users expect (x - s, x / s, s - x, s / x).
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
// Either bound may be absent. The gradient passes where min <= x <= max (PyTorch's mask).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);

// Scalar forms.
Tensor sub(const Tensor& x, double s);   // x - s
Tensor rsub(const Tensor& x, double s);  // s - x
Tensor div(const Tensor& x, double s);   // x / s
Tensor div(double s, const Tensor& x);   // s / x
Tensor reciprocal(const Tensor& x);      // 1 / x
Tensor square(const Tensor& x);          // x * x

// In place (framework/inplace.h has the autograd rules).
Tensor& sub_(Tensor& x, double s);
Tensor& div_(Tensor& x, double s);
Tensor& clamp_(Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);

inline Tensor operator/(double s, const Tensor& x) { return div(s, x); }

}  // namespace tg
