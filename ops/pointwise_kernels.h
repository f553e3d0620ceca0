// The pointwise kernels: one function of one or two values applied to every element, over
// operands of any strides (broadcasting is a stride of 0). The ops of elementwise.h, unary.h and
// activation.h are these kernels plus their checks and the tape; the forward of each op and the
// backward that multiplies the incoming gradient by its derivative sit side by side here.
//
// Each call runs on the copy of the kernels compiled for the active instruction set
// (framework/isa.h): pointwise_kernels.cpp (arithmetic and unary math) and
// activation_kernels.cpp (activations), entry points in pointwise_dispatch.cpp.
//
// Shape legend: `shape` is the common shape of all operands (a broadcast input is expanded to
// it with stride 0); strides are in elements, output first. The output's elements must be
// distinct (no stride 0) and may not overlap an input unless they are the same elements in
// the same order (out == x with equal strides: in place).
//
// Results: the generic path gives the bits the scalar formulas give; AVX2 and AVX-512 may
// contract a * b + c into a fused multiply-add, which moves float results by at most a few
// ulps (see tests/test_isa_pointwise.cpp for the bound). Any thread count gives the same bits.
#pragma once

#include <cstdint>
#include <vector>

namespace tg::kernels {

// y = f(x), with the scalars a, b of PointwiseScalars where a function names them.
enum class Unary {
  AddScalar,    // x + a
  MulScalar,    // x * a
  DivScalar,    // x / a
  Square,       // x * x
  Pow,          // x ^ a
  Exp,          // e^x
  Log,          // ln x
  Sqrt,         // x ^ (1/2)
  Rsqrt,        // 1 / sqrt x
  Abs,          // |x|
  Sign,         // -1, 0, 1 (the derivative of abs, as a constant)
  Clamp,        // min(max(x, a), b); NaN in x or a bound gives NaN
  ClampMask,    // 1 where a <= x <= b, else 0 (the derivative of clamp)
  Relu,         // 0 where x < 0, else x (NaN and -0 stay, as PyTorch's clamp_min)
  ReluMask,     // 0 where x <= 0, else 1 (relu's derivative from its output; 1 at NaN)
  Sigmoid,      // 1 / (1 + e^-x)
  Tanh,         // tanh x
  Gelu,         // x Phi(x)
  GeluTanh,     // gelu's tanh approximation
  GeluSecond,   // d^2/dx^2 gelu
  GeluTanhSecond,
  Silu,         // x * sigmoid(x)
  LeakyRelu,    // x where x > 0, else a * x
};

// out = f(a, b). The *Backward functions take (grad_output, saved) and return grad_input: the
// saved tensor is the forward's input x or its output y, as named.
enum class Binary {
  Add,                // a + b
  AddScaled,          // a + s.a * b
  Mul,                // a * b          (also exp's backward: g * y)
  Div,                // a / b          (also log's backward: g / x)
  PowBackward,        // g * s.a * x^(s.a - 1)
  SqrtBackward,       // g / (2y)
  RsqrtBackward,      // -g y^3 / 2
  AbsBackward,        // g * sign(x)
  ClampBackward,      // g where s.a <= x <= s.b, else 0
  ReluBackward,       // 0 where y <= 0, else g (g at NaN, as PyTorch)
  SigmoidBackward,    // g y (1 - y)
  TanhBackward,       // g (1 - y^2)
  GeluBackward,       // g gelu'(x)
  GeluTanhBackward,   // g gelu_tanh'(x)
  SiluBackward,       // g s (1 + x (1 - s)), s = sigmoid(x)
  LeakyReluBackward,  // g where x > 0, else s.a * g
};

// The scalars some functions read (each is converted to the operands' type first).
struct PointwiseScalars {
  double a = 0, b = 0;
};

// y = f(x) over `shape`.
template <class T>
void unary_pointwise(Unary f, const PointwiseScalars& s, const T* x, T* y, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides);

// out = f(a, b) over `shape`.
template <class T>
void binary_pointwise(Binary f, const PointwiseScalars& s, const T* a, const T* b, T* out,
                      const std::vector<int64_t>& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, const std::vector<int64_t>& out_strides);

// The contiguous case: n elements each.
template <class T>
void unary_pointwise(Unary f, const PointwiseScalars& s, const T* x, T* y, int64_t n) {
  unary_pointwise(f, s, x, y, {n}, {1}, {1});
}
template <class T>
void binary_pointwise(Binary f, const PointwiseScalars& s, const T* a, const T* b, T* out, int64_t n) {
  binary_pointwise(f, s, a, b, out, {n}, {1}, {1}, {1});
}

}  // namespace tg::kernels
