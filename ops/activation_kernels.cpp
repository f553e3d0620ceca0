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
// 1 ulp, like PyTorch's Sleef), for double they are std::erf / std::exp; gelu's float derivative
// takes Phi from phi and a polynomial instead (gelu_erf_derivative below). always_inline: a call
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

// Mills' ratio M(a) = (1 - Phi(a)) / phi(a) for a in [0, 5.6]: a smooth function falling from
// sqrt(pi / 2) = 1.25 to 0.17, so the normal tail 1 - Phi(a) = phi(a) M(a) costs one polynomial
// once phi(a) is known. Degree 16 in a - 2, fitted by least squares on Chebyshev nodes to the
// relative error (numpy against math.erfc: tools/fit_mills_ratio.py 5.6 16 2 prints these
// coefficients); evaluated in float, within 11 ulp of M (the most near 5.6, where the tail is
// below 1e-8).
[[gnu::always_inline]] inline float mills_ratio(float a) {
  const float v = a - 2.0f;
  float m = 1.756994550e-11f;
  m = m * v + -3.463853648e-10f;
  m = m * v + 2.944920308e-09f;
  m = m * v + -1.488764934e-08f;
  m = m * v + 5.853181406e-08f;
  m = m * v + -2.459681525e-07f;
  m = m * v + 1.162435979e-06f;
  m = m * v + -5.311995665e-06f;
  m = m * v + 2.266115007e-05f;
  m = m * v + -9.265661356e-05f;
  m = m * v + 3.654356697e-04f;
  m = m * v + -1.379670342e-03f;
  m = m * v + 4.953327589e-03f;
  m = m * v + -1.680519059e-02f;
  m = m * v + 5.342304334e-02f;
  m = m * v + -1.572615206e-01f;
  m = m * v + 4.213692248e-01f;
  return m;
}

// gelu' = Phi(x) + x phi(x) for float with one exponential where the generic form above takes
// two (vec_erf's and phi's): Phi(x) = 1 - phi(x) M(|x|) for x > 0, phi(x) M(|x|) for x <= 0. The
// two exponentials and erf's two polynomials were most of the backward's instructions
// (gelu_fwd_bwd 1.12x PyTorch's time at 1 thread; this form: 1.61 -> 1.31 ms). Against long
// double over every float in [-9, 6]: within 2.8 ulp for x >= 0 (the generic form: 1.8), 11 ulp
// for -5.6 < x < -1 (the generic form: 5e5, its 1 + erf cancels), 4.9 for -0.5 <= x < 0 (3.4)
// and 46 around gelu's minimum at -0.75, where gelu' crosses 0 (66), so overall more accurate
// than PyTorch's, which computes the generic form. Past |x| = 5.6 M is held at M(5.6): for x > 5.6
// Phi rounds to 1 either way; for x < -5.6 gelu' = phi (M - |x|) is within 1% (the generic form
// rounds Phi to 0 there: within 1 / x^2). The forward keeps vec_erf: this form made it no faster.
[[gnu::always_inline]] inline float gelu_erf_derivative(float x) {
  const float pdf = static_cast<float>(kInvSqrt2Pi) * exp_nonpositive(-0.5f * x * x);
  const float a = std::fabs(x);
  const float tail = pdf * mills_ratio(select_bits(5.6f < a, 5.6f, a));  // 1 - Phi(|x|)
  const float cdf = select_bits(x > 0.0f, 1.0f - tail, tail);
  return cdf + x * pdf;
}

template <class T>
T gelu_tanh(T x) {
  const T inner = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}
// sech^2 u = 1 - tanh^2 u = 4 e / (1 + e)^2, e = e^(-2|u|): no cancellation where tanh u nears
// +-1, and exactly 0 where |u| is huge.
template <class T>
T sech_squared(T u) {
  const T e = std::exp(T(-2) * std::fabs(u));
  return T(4) * e / ((T(1) + e) * (T(1) + e));
}

// 0.5 (1 + tanh u) + 0.5 x sech^2(u) u', u = k (x + c x^3), from e = e^(-2|u|) alone:
// 0.5 (1 + tanh u) = 1 / (1 + e) for u >= 0, e / (1 + e) for u < 0 (1 + tanh u cancelled for
// u < 0), sech^2 u = 4 e / (1 + e)^2 (1 - tanh^2 cancelled near |x| = 5: PyTorch's float32 gives
// 0 at x = -5.2 for -4.1e-7), and the second term exactly 0 where e is (its other factors
// overflow there: 0 * Inf gave NaN from |x| ~ 7e12 in float32, as PyTorch's).
template <class T>
T gelu_tanh_derivative(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c = static_cast<T>(kGeluCubic);
  const T u = k * (x + c * x * x * x);
  const T e = std::exp(T(-2) * std::fabs(u));
  const T half_one_plus_tanh = (u >= T(0) ? T(1) : e) / (T(1) + e);
  const T du = k * (T(1) + T(3) * c * x * x);
  return half_one_plus_tanh + (e == T(0) ? T(0) : T(2) * x * e / ((T(1) + e) * (T(1) + e)) * du);
}

// The second derivatives, for the recorded gelu_backward:
//   exact: d/dx (Phi + x phi) = phi (2 - x^2)
//   tanh:  with t = tanh u, u = k (x + c x^3): sech^2 u (u' + x/2 (u'' - 2 t u'^2)), sech^2
//          written out (float32 lost every digit near |x| = 5.2 with 1 - t^2), and exactly 0 where
//          |u| is huge, the limit (the bracket may overflow there: 0 * Inf gave NaN from |x| ~
//          1.3e8 in float32).
template <class T>
T gelu_erf_second_derivative(T x) {
  return static_cast<T>(kInvSqrt2Pi) * exp_nonpositive(T(-0.5) * x * x) * (T(2) - x * x);
}
template <class T>
T gelu_tanh_second_derivative(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c = static_cast<T>(kGeluCubic);
  const T u = k * (x + c * x * x * x);
  const T sech2 = sech_squared(u);
  if (sech2 == T(0)) return T(0);
  const T t = std::tanh(u);
  const T du = k * (T(1) + T(3) * c * x * x), ddu = T(6) * k * c * x;
  return sech2 * (du + T(0.5) * x * (ddu - T(2) * t * du * du));
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
    case Unary::Relu: return run([](T v) { return v < T(0) ? T(0) : v; });  // NaN and -0 stay
    case Unary::ReluMask: return run([](T v) { return v <= T(0) ? T(0) : T(1); });
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
    case Binary::ReluBackward: return run([](T g, T y) { return y <= T(0) ? T(0) : g; });
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
