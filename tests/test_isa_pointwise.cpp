// The pointwise kernels (ops/pointwise_kernels.h: arithmetic, unary math, activations) give the
// generic path's results on every instruction-set path this CPU has: every function of the
// kernel API, forward and backward, in float32 and float64, on lengths around the vector widths
// (scalar tails) and long enough to run in parallel, with NaN, infinities, zeros of both signs,
// large and tiny values; and the ops themselves with autograd, broadcasting and strided inputs.
//
// Tolerances (|x - generic| <= tol * max|generic| over a tensor, see isa_test_util.h): the AVX2
// and AVX-512 copies may contract a * b + c into a fused multiply-add, which rounds once
// instead of twice, so a float32 result moves by a few ulps of its magnitude (vec_exp's and
// vec_erf's polynomials, and the cancellations in gelu_tanh's second derivative, are where it
// shows most: up to 2.4e-6 of the largest value seen); 5e-6 of the largest value is 80 ulps of it.
// float64 formulas call the same libm functions on every path, so only their arithmetic around
// those calls can contract (1 - t * t in gelu_tanh's derivative cancels most): 1e-13.
#include "isa_test_util.h"
#include "test_util.h"

#include <tapegrad/ops/pointwise_kernels.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tg {
namespace {

using kernels::Binary;
using kernels::Unary;

constexpr double kTolFloat = 5e-6;
constexpr double kTolDouble = 1e-13;

double tol_for(DType dt) { return dt == DType::Float32 ? kTolFloat : kTolDouble; }

// Lengths: scalar only, one short of / at / one past 4, 8 and 16 lanes, and long enough for
// for_each_row to cut it into pieces for the threads.
const std::vector<int64_t> kLengths = {1, 3, 7, 8, 9, 15, 16, 17, 33, 1000, 33001};

const double kInf = std::numeric_limits<double>::infinity();

// n values: 3 N(0, 1), with NaN, infinities and zeros of both signs spread along (some in a
// vector body, some in a tail; none finite and large, which would make the tolerance, relative
// to the largest value, meaningless for the rest).
std::vector<double> test_values(int64_t n, uint64_t seed) {
  const std::vector<double> special = {std::nan(""), kInf, -kInf, 0.0, -0.0};
  Generator gen(seed);
  std::vector<double> v = randn({n}, DType::Float64, &gen).to_vector<double>();
  for (int64_t i = 0; i < n; ++i) v[i] *= 3;
  for (size_t k = 0; k < special.size() && static_cast<int64_t>(k) < n; ++k) v[(k * 7919 + 1) % n] = special[k];
  return v;
}

Tensor values_tensor(int64_t n, DType dt, uint64_t seed) { return from_vector(test_values(n, seed), {n}).to(dt); }

// Edge values, one tensor of their own: signed zeros, tiny (subnormal in float) and huge values,
// both sides of vec_erf's and vec_exp's pieces and clamps, overflow, the scalars' own values.
Tensor edge_tensor(DType dt, bool reversed) {
  std::vector<double> v = {std::nan(""), kInf, -kInf, 0.0, -0.0, 1e-40, -1e-40, 1e-30, 100.0, -100.0, 88.7, 89.5,
                           -103.9, -104.5, 3.93, -3.92, 0.875, -0.874, 2.5, 0.75, -0.75, 1.0, -1.0, 1e30, -1e30};
  if (reversed) v.assign(v.rbegin(), v.rend());
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
}

const std::vector<Unary> kUnary = {
    Unary::AddScalar, Unary::MulScalar, Unary::DivScalar, Unary::Square,  Unary::Pow,        Unary::Exp,
    Unary::Log,       Unary::Sqrt,      Unary::Rsqrt,     Unary::Abs,     Unary::Sign,       Unary::Clamp,
    Unary::ClampMask, Unary::Relu,      Unary::ReluMask,  Unary::Sigmoid, Unary::Tanh,       Unary::Gelu,
    Unary::GeluTanh,  Unary::GeluSecond, Unary::GeluTanhSecond, Unary::Silu, Unary::LeakyRelu};
const std::vector<Binary> kBinary = {
    Binary::Add,          Binary::AddScaled,     Binary::Mul,          Binary::Div,
    Binary::PowBackward,  Binary::SqrtBackward,  Binary::RsqrtBackward, Binary::AbsBackward,
    Binary::ClampBackward, Binary::ReluBackward, Binary::SigmoidBackward, Binary::TanhBackward,
    Binary::GeluBackward, Binary::GeluTanhBackward, Binary::SiluBackward, Binary::LeakyReluBackward};

// Scalars for the functions that read them: an inexact 1/s, a fractional power, clamp bounds.
const kernels::PointwiseScalars kScalars{2.5, 0.75};

TEST(IsaPointwise, EveryUnaryKernelMatchesGeneric) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (Unary f : kUnary) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", unary function " + std::to_string(static_cast<int>(f)));
      testing::expect_same_on_every_isa(
          [&] {
            std::vector<Tensor> xs = {edge_tensor(dt, false)}, out;
            for (int64_t n : kLengths) xs.push_back(values_tensor(n, dt, 1 + n));
            for (const Tensor& x : xs) {
              const int64_t n = x.numel();
              Tensor y = Tensor::empty({n}, dt);
              if (dt == DType::Float32)
                kernels::unary_pointwise<float>(f, kScalars, x.data<float>(), y.data<float>(), n);
              else
                kernels::unary_pointwise<double>(f, kScalars, x.data<double>(), y.data<double>(), n);
              out.push_back(y);
            }
            return out;
          },
          tol_for(dt));
    }
  }
}

TEST(IsaPointwise, EveryBinaryKernelMatchesGeneric) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (Binary f : kBinary) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", binary function " + std::to_string(static_cast<int>(f)));
      testing::expect_same_on_every_isa(
          [&] {
            std::vector<std::pair<Tensor, Tensor>> operands = {{edge_tensor(dt, false), edge_tensor(dt, true)}};
            for (int64_t n : kLengths) operands.push_back({values_tensor(n, dt, 100 + n), values_tensor(n, dt, 200 + n)});
            std::vector<Tensor> out;
            for (const auto& [a, b] : operands) {
              const int64_t n = a.numel();
              Tensor y = Tensor::empty({n}, dt);
              if (dt == DType::Float32)
                kernels::binary_pointwise<float>(f, kScalars, a.data<float>(), b.data<float>(), y.data<float>(), n);
              else
                kernels::binary_pointwise<double>(f, kScalars, a.data<double>(), b.data<double>(), y.data<double>(), n);
              out.push_back(y);
            }
            return out;
          },
          tol_for(dt));
    }
  }
}

// The ops with autograd: the forward and the input's gradient for a random grad_output, on a
// strided (transposed) input of a ragged shape; then the gradient again under create_graph (the
// recorded backward, where the masks and gelu's second derivative run).
TEST(IsaPointwise, UnaryOpsAndActivationsForwardBackwardMatchGeneric) {
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.5); }},
      {"x * s", [](const Tensor& x) { return mul(x, 0.3); }},
      {"x + s", [](const Tensor& x) { return add(x, 0.3); }},
      {"x / s", [](const Tensor& x) { return div(x, 3.0); }},
      {"s / x", [](const Tensor& x) { return div(0.7, x); }},
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& [name, op] : ops) {
      for (bool create_graph : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + name + (create_graph ? ", create_graph" : ""));
        testing::expect_same_on_every_isa(
            [&, op = op] {
              // (37, 29) transposed: rows of 37 elements with a stride of 29
              Tensor x = from_vector(test_values(37 * 29, 5), {37, 29}).to(dt).transpose(0, 1);
              x.requires_grad_();
              Tensor y = op(x);
              Generator gen(3);
              Tensor g = randn(y.shape(), dt, &gen);
              Tensor dx = grad({y}, {x}, {g}, /*retain_graph=*/false, /*allow_unused=*/true, create_graph)[0];
              return std::vector<Tensor>{y.detach(), dx.detach()};
            },
            tol_for(dt));
      }
    }
  }
}

// Binary arithmetic with broadcasting (one side, both sides, a scalar-shaped operand) and
// strided inputs, forward and both gradients.
TEST(IsaPointwise, BinaryOpsWithBroadcastingAndStridesMatchGeneric) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.3); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
  };
  struct Layout {
    Shape a, b;
    bool transpose_a;  // a is a (transposed) view with strides
  };
  const std::vector<Layout> layouts = {
      {{5, 33}, {5, 33}, false}, {{4, 5, 33}, {33}, false}, {{4, 5, 33}, {5, 1}, false},
      {{7, 1}, {1, 19}, false},  {{1}, {3, 17}, false},     {{33, 5}, {5, 33}, true},
      {{40, 31}, {40}, true},    {{300, 300}, {300, 1}, false}};
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& [name, op] : ops) {
      for (const Layout& l : layouts) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + name + ", " + format_shape(l.a) + " with " +
                     format_shape(l.b) + (l.transpose_a ? ", a transposed" : ""));
        testing::expect_same_on_every_isa(
            [&, op = op] {
              int64_t na = 1, nb = 1;
              for (int64_t s : l.a) na *= s;
              for (int64_t s : l.b) nb *= s;
              Tensor a = from_vector(test_values(na, 11), l.a).to(dt);
              if (l.transpose_a) a = a.transpose(0, 1);
              Tensor b = from_vector(test_values(nb, 12), l.b).to(dt);
              a.requires_grad_();
              b.requires_grad_();
              Tensor y = op(a, b);
              Generator gen(4);
              std::vector<Tensor> d = grad({y}, {a, b}, {randn(y.shape(), dt, &gen)});
              return std::vector<Tensor>{y.detach(), d[0], d[1]};
            },
            tol_for(dt));
      }
    }
  }
}

}  // namespace
}  // namespace tg
