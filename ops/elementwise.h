// Arithmetic, the one home of + - * / in tapegrad: two tensors with PyTorch's broadcasting,
// or a tensor and a scalar; the in-place forms; and the operators that spell them.
#pragma once

#include "../framework/tensor.h"

namespace tg {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);

// A tensor and a scalar.
Tensor add(const Tensor& x, double s);   // x + s
Tensor sub(const Tensor& x, double s);   // x - s
Tensor rsub(const Tensor& x, double s);  // s - x
Tensor mul(const Tensor& x, double s);   // x * s
Tensor div(const Tensor& x, double s);   // x / s, a true division (PyTorch's), not x * (1 / s)
Tensor div(double s, const Tensor& x);   // s / x

// In place (framework/inplace.h has the autograd rules; Tensor has add_ and mul_ by a scalar).
// other broadcasts to x's shape, never the other way.
Tensor& sub_(Tensor& x, const Tensor& other, double alpha = 1.0);  // x -= alpha * other
Tensor& mul_(Tensor& x, const Tensor& other);
Tensor& div_(Tensor& x, const Tensor& other);
Tensor& sub_(Tensor& x, double s);
Tensor& div_(Tensor& x, double s);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return sub(x, s); }
inline Tensor operator-(double s, const Tensor& x) { return rsub(x, s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return div(x, s); }
inline Tensor operator/(double s, const Tensor& x) { return div(s, x); }

namespace detail {
// An integer tensor's scalar operand, as PyTorch: a whole scalar within the dtype's range keeps
// the integer dtype, any other is float32 (a 0-dim tensor; result_type does the rest).
Tensor integer_scalar_operand(const Tensor& x, double s);
}  // namespace detail

}  // namespace tg
