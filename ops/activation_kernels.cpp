// Activation kernels, forward and backward side by side (see pointwise_kernels.h for the
// functions and the layout). One copy per instruction set (ops/internal/isa_dispatch.h).
//
//   relu:    y = max(x, 0)     dx = g * (y > 0)
//   sigmoid: y = 1/(1+e^-x)    dx = g * y (1 - y)
//   tanh:    y = tanh x        dx = g * (1 - y^2)
//   gelu:    y = x Phi(x)      dx = g * (Phi(x) + x phi(x))     (tanh form: its own derivative)
//   silu:    y = x sigmoid(x)  dx = g * s (1 + x (1 - s)), s = sigmoid(x)
//   (leaky_relu reads its slope, a scalar: it is with the scalar functions in pointwise_kernels.cpp)
//
// Computed in T, as PyTorch's kernels do (the constants are PyTorch's M_SQRT1_2, M_2_SQRTPI...).
// gelu's erf and exp, and sigmoid's exp, are vec_erf / vec_exp: for float they vectorise (about
// 1 ulp, like PyTorch's Sleef), for double they are std::erf / std::exp. always_inline: a call
// per element (GCC judged these too big to inline) would keep the loops from vectorising.
#include "pointwise_kernels.h"

#include "internal/pointwise_rows.h"
#include "internal/vec_math.h"

#include <cmath>
#include <type_traits>

namespace tg::kernels::TG_ISA_NS {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;

// e^x for x <= 0: vec_exp_nonpositive for float (vec_exp's bits, less work), std::exp for double.
[[gnu::always_inline]] inline float exp_nonpositive(float x) { return vec_exp_nonpositive(x); }
[[gnu::always_inline]] inline double exp_nonpositive(double x) { return vec_exp(x); }

template <class T>
[[gnu::always_inline]] inline T gelu_erf(T x) {
  return x * T(0.5) * (T(1) + vec_erf(x * static_cast<T>(kSqrt1_2)));
}
template <class T>
[[gnu::always_inline]] inline T gelu_erf_derivative(T x) {
  const T cdf = T(0.5) * (T(1) + vec_erf(x * static_cast<T>(kSqrt1_2)));
  const T pdf = static_cast<T>(kInvSqrt2Pi) * exp_nonpositive(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// Mills' ratio M(a) = (1 - Phi(a)) / phi(a) for a in [1.23, 5.6]: a smooth, slowly falling
// function (0.55 to 0.17), so the normal tail 1 - Phi(a) = phi(a) M(a) costs a polynomial once
// phi(a) is known. Degree 10 in a - 3.415, fitted (least squares on Chebyshev nodes, weighted by
// 1 / (a - M), the scale of gelu's derivative for x = -a): evaluated in float its error is at most
// 1.6e-7 of a - M (x < 0) and 0.33 ulp of 1 in phi M (x > 0).
[[gnu::always_inline]] inline float mills_ratio(float a) {
  const float v = a - 3.415f;
  float m = 1.059700381e-07f;
  m = m * v + -4.551227732e-07f;
  m = m * v + 1.110894118e-06f;
  m = m * v + -7.032848316e-06f;
  m = m * v + 4.056817488e-05f;
  m = m * v + -1.902878867e-04f;
  m = m * v + 8.763515507e-04f;
  m = m * v + -3.941681702e-03f;
  m = m * v + 1.698122732e-02f;
  m = m * v + -6.981637329e-02f;
  m = m * v + 2.723817229e-01f;
  return m;
}

// gelu' for float with one exponential, not two: phi(x) is needed anyway, and beyond vec_erf's
// first piece (|x| / sqrt 2 >= 0.875) the tail is phi(|x|) M(|x|), where erf's second piece
// would take an exponential of its own. That exponential was a fifth of the backward's
// instructions (gelu_fwd_bwd 1.12x PyTorch's time at 1 thread). Past |x| = 5.6 M is held at
// M(5.6): for x > 5.6, Phi rounds to 1 either way; for x < -5.6 gelu' = phi (M - |x|) is then
// within 1% (PyTorch's 1 + erf rounds Phi to 0 there, within 1 / x^2). As accurate as the
// generic form (whose 1 + erf cancels for x < 0) or better: tests/test_isa_pointwise.cpp and
// the golden fixtures check it.
[[gnu::always_inline]] inline float gelu_erf_derivative(float x) {
  const float z = x * static_cast<float>(kSqrt1_2);
  const float pdf = static_cast<float>(kInvSqrt2Pi) * exp_nonpositive(-0.5f * x * x);
  const float a = std::fabs(x);
  const float tail = pdf * mills_ratio(select_bits(5.6f < a, 5.6f, a));  // 1 - Phi(|x|)
  const float cdf_far = select_bits(x > 0.0f, 1.0f - tail, tail);
  const float cdf = select_bits(std::fabs(z) < 0.875f, 0.5f * (1.0f + erf_near_zero(z)), cdf_far);
  return cdf + x * pdf;
}

template <class T>
T gelu_tanh(T x) {
  const T inner = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}
template <class T>
T gelu_tanh_derivative(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c = static_cast<T>(kGeluCubic);
  const T inner = k * (x + c * x * x * x);
  const T t = std::tanh(inner);
  const T dinner = k * (T(1) + T(3) * c * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}

// The second derivatives, for the recorded gelu_backward:
//   exact: d/dx (Phi + x phi) = phi (2 - x^2)
//   tanh:  with t = tanh u, u = k (x + c x^3): (1 - t^2) (u' + x/2 (u'' - 2 t u'^2))
template <class T>
T gelu_erf_second_derivative(T x) {
  return static_cast<T>(kInvSqrt2Pi) * exp_nonpositive(T(-0.5) * x * x) * (T(2) - x * x);
}
template <class T>
T gelu_tanh_second_derivative(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c = static_cast<T>(kGeluCubic);
  const T t = std::tanh(k * (x + c * x * x * x));
  const T du = k * (T(1) + T(3) * c * x * x), ddu = T(6) * k * c * x;
  return (T(1) - t * t) * (du + T(0.5) * x * (ddu - T(2) * t * du * du));
}

// Stable on both sides: e = e^-|x| <= 1 never overflows; 1 / (1 + e) for x >= 0, e / (1 + e)
// for x < 0. One division of the chosen numerator: dividing both and blending the quotients (as
// this did) gave the same bits for twice the divisions, which bounded the loop (sigmoid_fwd_bwd
// 1.43x PyTorch's time). e is exp_nonpositive: vec_exp's bits for float, std::exp for double.
template <class T>
[[gnu::always_inline]] inline T sigmoid(T v) {
  const T e = exp_nonpositive(-std::fabs(v));
  T num;
  if constexpr (std::is_same_v<T, float>) {
    num = select_bits(v >= 0.0f, 1.0f, e);  // a blend, not a branch: see select_bits
  } else {
    num = v >= T(0) ? T(1) : e;
  }
  return num / (T(1) + e);
}

}  // namespace

template <class T>
bool activation_unary(Unary f, const T* x, T* y, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides) {
  auto run = [&](auto fn) {
    map_rows(x, y, shape, x_strides, y_strides, fn);
    return true;
  };
  switch (f) {
    case Unary::Relu: return run([](T v) { return v > T(0) ? v : T(0); });
    case Unary::ReluMask: return run([](T v) { return v > T(0) ? T(1) : T(0); });
    case Unary::Sigmoid: return run([](T v) { return sigmoid(v); });
    case Unary::Tanh: return run([](T v) { return std::tanh(v); });
    case Unary::Gelu: return run([](T v) { return gelu_erf(v); });
    case Unary::GeluTanh: return run([](T v) { return gelu_tanh(v); });
    case Unary::GeluSecond: return run([](T v) { return gelu_erf_second_derivative(v); });
    case Unary::GeluTanhSecond: return run([](T v) { return gelu_tanh_second_derivative(v); });
    case Unary::Silu: return run([](T v) { return v * sigmoid(v); });
    default: return false;
  }
}

template <class T>
bool activation_binary(Binary f, const T* a, const T* b, T* out, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& a_strides, const std::vector<int64_t>& b_strides,
                       const std::vector<int64_t>& out_strides) {
  auto run = [&](auto fn) {
    map_rows(a, b, out, shape, a_strides, b_strides, out_strides, fn);
    return true;
  };
  switch (f) {
    case Binary::ReluBackward: return run([](T g, T y) { return y > T(0) ? g : T(0); });
    case Binary::SigmoidBackward: return run([](T g, T y) { return g * y * (T(1) - y); });
    case Binary::TanhBackward: return run([](T g, T y) { return g * (T(1) - y * y); });
    // always_inline: GCC 12 judged this lambda (inlined float gelu') too big to inline into
    // the row loop, and a call per element does not vectorise (9x slower).
    case Binary::GeluBackward:
      return run([](T g, T x) __attribute__((always_inline)) { return g * gelu_erf_derivative(x); });
    case Binary::GeluTanhBackward: return run([](T g, T x) { return g * gelu_tanh_derivative(x); });
    case Binary::SiluBackward: return run([](T g, T x) {
      const T s = sigmoid(x);
      return g * s * (T(1) + x * (T(1) - s));
    });
    default: return false;
  }
}

#define TG_ACTIVATION_INSTANTIATE(T)                                                                      \
  template bool activation_unary<T>(Unary, const T*, T*, const std::vector<int64_t>&,                     \
                                    const std::vector<int64_t>&, const std::vector<int64_t>&);            \
  template bool activation_binary<T>(Binary, const T*, const T*, T*, const std::vector<int64_t>&,         \
                                     const std::vector<int64_t>&, const std::vector<int64_t>&,            \
                                     const std::vector<int64_t>&);
TG_ACTIVATION_INSTANTIATE(float)
TG_ACTIVATION_INSTANTIATE(double)
#undef TG_ACTIVATION_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
