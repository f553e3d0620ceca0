// Pointwise kernels: arithmetic and unary math (see pointwise_kernels.h for the functions and
// the layout; activation_kernels.cpp has the activations). One copy per instruction set
// (ops/internal/isa_dispatch.h); each formula is the one the ops had, written once for float and
// double, and the loops are internal/pointwise_rows.h's.
#include "pointwise_kernels.h"

#include "internal/pointwise_rows.h"

#include <cmath>

namespace tg::kernels::TG_ISA_NS {

template <class T>
void unary_pointwise(Unary f, const PointwiseScalars& s, const T* x, T* y, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides) {
  if (activation_unary(f, x, y, shape, x_strides, y_strides)) return;
  const T a = static_cast<T>(s.a), b = static_cast<T>(s.b);
  auto run = [&](auto fn) { map_rows(x, y, shape, x_strides, y_strides, fn); };
  switch (f) {
    case Unary::AddScalar: return run([a](T v) { return v + a; });
    case Unary::MulScalar: return run([a](T v) { return v * a; });
    case Unary::DivScalar: return run([a](T v) { return v / a; });
    case Unary::Square: return run([](T v) { return v * v; });
    case Unary::LeakyRelu: return run([a](T v) { return v > T(0) ? v : v * a; });
    case Unary::Pow: return run([a](T v) { return std::pow(v, a); });
    case Unary::Exp: return run([](T v) { return std::exp(v); });
    case Unary::Log: return run([](T v) { return std::log(v); });
    case Unary::Sqrt: return run([](T v) { return std::sqrt(v); });
    case Unary::Rsqrt: return run([](T v) { return T(1) / std::sqrt(v); });
    case Unary::Abs: return run([](T v) { return std::abs(v); });
    case Unary::Sign: return run([](T v) { return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0)); });
    case Unary::Clamp:  // PyTorch's min(max(x, lo), hi): hi wins when lo > hi; a NaN, in x or a bound, wins
      return run([a, b](T v) {
        if (std::isnan(v)) return v;
        const T r = v < a || std::isnan(a) ? a : v;
        return r > b || std::isnan(b) ? b : r;
      });
    case Unary::ClampMask: return run([a, b](T v) { return v >= a && v <= b ? T(1) : T(0); });
    default: break;  // the activations
  }
}

template <class T>
void binary_pointwise(Binary f, const PointwiseScalars& s, const T* a, const T* b, T* out,
                      const std::vector<int64_t>& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, const std::vector<int64_t>& out_strides) {
  if (activation_binary(f, a, b, out, shape, a_strides, b_strides, out_strides)) return;
  const T p = static_cast<T>(s.a), q = static_cast<T>(s.b);
  auto run = [&](auto fn) { map_rows(a, b, out, shape, a_strides, b_strides, out_strides, fn); };
  switch (f) {
    case Binary::Add: return run([](T u, T v) { return u + v; });
    case Binary::AddScaled: return run([p](T u, T v) { return u + p * v; });
    case Binary::Mul: return run([](T u, T v) { return u * v; });
    case Binary::LeakyReluBackward: return run([p](T g, T x) { return x > T(0) ? g : g * p; });
    case Binary::Div: return run([](T u, T v) { return u / v; });
    case Binary::PowBackward: {
      const T pm1 = static_cast<T>(s.a - 1.0);
      return run([p, pm1](T g, T x) { return g * p * std::pow(x, pm1); });
    }
    case Binary::SqrtBackward: return run([](T g, T y) { return g / (y + y); });
    case Binary::RsqrtBackward: return run([](T g, T y) { return T(-0.5) * g * y * y * y; });
    case Binary::AbsBackward: return run([](T g, T x) { return x > T(0) ? g : (x < T(0) ? -g : T(0)); });
    case Binary::ClampBackward: return run([p, q](T g, T x) { return x >= p && x <= q ? g : T(0); });
    default: break;  // the activations
  }
}

#define TG_POINTWISE_INSTANTIATE(T)                                                                              \
  template void unary_pointwise<T>(Unary, const PointwiseScalars&, const T*, T*, const std::vector<int64_t>&,    \
                                   const std::vector<int64_t>&, const std::vector<int64_t>&);                    \
  template void binary_pointwise<T>(Binary, const PointwiseScalars&, const T*, const T*, T*,                     \
                                    const std::vector<int64_t>&, const std::vector<int64_t>&,                    \
                                    const std::vector<int64_t>&, const std::vector<int64_t>&);
TG_POINTWISE_INSTANTIATE(float)
TG_POINTWISE_INSTANTIATE(double)
#undef TG_POINTWISE_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
