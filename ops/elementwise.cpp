// Elementwise arithmetic. Shape legend: a, b and out broadcast together (PyTorch's rules); each
// gradient is reduced back to its input's shape by sum_to.
//
//   add:  out = a + alpha*b   da = g            db = alpha*g
//   sub:  out = a - alpha*b   da = g            db = -alpha*g
//   mul:  out = a * b         da = g * b        db = g * a
//   div:  out = a / b         da = g / b        db = -g * a / b^2
//
// Operands of two dtypes are promoted first (promote_operands: bfloat16 + float32 -> float32),
// each through a recorded cast, so each gradient returns in its own input's dtype. Integer
// operands (never differentiable) compute exactly in their integer dtype; int / int is float32.
//
// With a scalar s: add_scalar (x + s, dx = g), mul_scalar (x * s, dx = g * s) and div_scalar
// (x / s, dx = g / s); x - s and s - x are add_scalar of x and of -x.
#include "elementwise.h"

#include <cmath>

#include "../framework/tape.h"
#include "../framework/inplace.h"
#include "../framework/views.h"
#include "internal/pointwise.h"
#include "internal/samples.h"
#include "unary.h"  // reciprocal, for s / x

namespace tg {

namespace {

struct AlphaAttrs {
  double alpha;
};
struct ScalarAttrs {
  double value;
};

// Forward: the pointwise kernels (pointwise_kernels.h), shared by the ops and their backward.
using kernels::Binary;
using kernels::Unary;

Tensor add_values(const Tensor& a, const Tensor& b, double alpha = 1.0) {
  if (alpha == 1.0) return pointwise_binary(a, b, Binary::Add, "add");
  return pointwise_binary(a, b, Binary::AddScaled, "add", {alpha});
}

Tensor mul_values(const Tensor& a, const Tensor& b) { return pointwise_binary(a, b, Binary::Mul, "mul"); }

Tensor div_values(const Tensor& a, const Tensor& b) { return pointwise_binary(a, b, Binary::Div, "div"); }

// ---- backward ----
// Written with the recorded ops themselves, so that under create_graph the gradients are
// differentiable again (under plain backward nothing records and the ops are the kernels).

std::vector<Tensor> add_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const double alpha = ctx.attrs<AlphaAttrs>().alpha;
  Tensor da, db;
  if (ctx.needs_grad(0)) da = sum_to(g[0], ctx.input_shape(0));
  if (ctx.needs_grad(1)) db = sum_to(alpha == 1.0 ? g[0] : mul(g[0], alpha), ctx.input_shape(1));
  return {da, db};
}

enum MulSaved { kSelf, kOther };

std::vector<Tensor> mul_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  Tensor da, db;
  if (ctx.needs_grad(0)) da = sum_to(mul(g[0], ctx.saved(kOther)), ctx.input_shape(0));
  if (ctx.needs_grad(1)) db = sum_to(mul(g[0], ctx.saved(kSelf)), ctx.input_shape(1));
  return {da, db};
}

enum DivSaved { kNumerator, kDenominator };

std::vector<Tensor> div_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor b = ctx.saved(kDenominator);
  Tensor da, db;
  Tensor g_over_b = div(g[0], b);
  if (ctx.needs_grad(0)) da = sum_to(g_over_b, ctx.input_shape(0));
  if (ctx.needs_grad(1)) db = sum_to(neg(mul(g_over_b, div(ctx.saved(kNumerator), b))), ctx.input_shape(1));
  return {da, db};
}

std::vector<Tensor> scale_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {mul(g[0], ctx.attrs<ScalarAttrs>().value)};
}

std::vector<Tensor> add_scalar_backward(const BackwardContext&, const std::vector<Tensor>& g) { return {g[0]}; }

std::vector<Tensor> div_scalar_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {div(g[0], ctx.attrs<ScalarAttrs>().value)};
}

// ---- sample cases ----

using Inputs = std::vector<Tensor>;

SampleCase binary_case(const char* name, Shape sa, Shape sb, Tensor (*op)(const Tensor&, const Tensor&),
                       double b_low = 0, double b_high = 0) {
  return {name,
          [sa, sb, b_low, b_high](DType dt) {
            Tensor b = b_low < b_high ? sample_uniform(sb, dt, b_low, b_high) : sample_tensor(sb, dt);
            return Inputs{sample_tensor(sa, dt), b};
          },
          [op](const Inputs& x) { return Inputs{op(x[0], x[1])}; }};
}

Tensor add_default(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor sub_default(const Tensor& a, const Tensor& b) { return sub(a, b); }

std::vector<SampleCase> add_samples() {
  return {binary_case("[3,4] + [3,4]", {3, 4}, {3, 4}, add_default),
          binary_case("[2,3,4] + [4] (broadcast)", {2, 3, 4}, {4}, add_default),
          binary_case("[3,1] + [1,4] (both broadcast)", {3, 1}, {1, 4}, add_default),
          {"[3,4] + 0.5 * [3,4] (alpha)",
           [](DType dt) { return Inputs{sample_tensor({3, 4}, dt), sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{add(x[0], x[1], 0.5)}; }}};
}
std::vector<SampleCase> mul_samples() {
  return {binary_case("[3,4] * [3,4]", {3, 4}, {3, 4}, mul),
          binary_case("[2,3,4] * [3,1] (broadcast)", {2, 3, 4}, {3, 1}, mul)};
}
std::vector<SampleCase> div_samples() {
  return {binary_case("[3,4] / [3,4], b in [0.5, 2)", {3, 4}, {3, 4}, div, 0.5, 2.0),
          binary_case("[4] / [2,3,4] (broadcast)", {4}, {2, 3, 4}, div, 0.5, 2.0)};
}
std::vector<SampleCase> sub_samples() {
  return {binary_case("[2,3] - [3] (broadcast)", {2, 3}, {3}, sub_default)};
}
std::vector<SampleCase> scale_samples() {
  return {{"[3,4] * -2.5", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{mul(x[0], -2.5)}; }},
          {"neg [5]", [](DType dt) { return Inputs{sample_tensor({5}, dt)}; },
           [](const Inputs& x) { return Inputs{neg(x[0])}; }}};
}
std::vector<SampleCase> div_scalar_samples() {
  return {{"[3,4] / -2.5", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{div(x[0], -2.5)}; }},
          {"[2,3] / 3 (inexact reciprocal)", [](DType dt) { return Inputs{sample_tensor({2, 3}, dt)}; },
           [](const Inputs& x) { return Inputs{div(x[0], 3.0)}; }}};
}
std::vector<SampleCase> add_scalar_samples() {
  return {{"[3,4] + 1.5", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{add(x[0], 1.5)}; }}};
}

}  // namespace

const OpDef kAddOp{"add", "add_backward", "self, other", add_backward, add_samples, true};
const OpDef kSubOp{"sub", "sub_backward", "self, other", add_backward, sub_samples, true};  // add with alpha = -alpha
const OpDef kMulOp{"mul", "mul_backward", "self, other", mul_backward, mul_samples, true};
const OpDef kDivOp{"div", "div_backward", "self, other", div_backward, div_samples, true};
const OpDef kMulScalarOp{"mul_scalar", "mul_scalar_backward", "self", scale_backward, scale_samples, true};
const OpDef kAddScalarOp{"add_scalar", "add_scalar_backward", "self", add_scalar_backward, add_scalar_samples, true};
const OpDef kDivScalarOp{"div_scalar", "div_scalar_backward", "self", div_scalar_backward, div_scalar_samples, true};

namespace {
// Integers (PyTorch's rules): + - * stay in the operands' integer dtype (wrapping on overflow),
// alpha must be integral; a true division of integers is float32.
bool is_integer_pair(const Tensor& a, const Tensor& b) { return !is_floating(a.dtype()) && !is_floating(b.dtype()); }

Tensor integer_add(const Tensor& a, const Tensor& b, double alpha, const char* op) {
  TG_CHECK(alpha == std::trunc(alpha) && std::abs(alpha) < 9.2e18, op,
           ": alpha must be an integer for integer operands, got ", alpha);
  const auto k = static_cast<uint64_t>(static_cast<int64_t>(alpha));
  return integer_binary(a, b, op, [k](auto x, auto y) { return x + static_cast<decltype(y)>(k) * y; });
}

Tensor add_with_alpha(const OpDef& op, const Tensor& a_in, const Tensor& b_in, double alpha) {
  const auto [a, b] = promote_operands(a_in, b_in, op.name);
  if (is_integer_pair(a, b)) return integer_add(a, b, alpha, op.name);
  check_binary_operands(a, b, op.name);
  Tensor out = add_values(a, b, alpha);
  if (Recorder rec{op, {a, b}}) {
    rec.set_attrs(AlphaAttrs{alpha});
    rec.set_outputs({out});
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return add_with_alpha(kAddOp, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return add_with_alpha(kSubOp, a, b, -alpha); }

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promote_operands(a_in, b_in, "mul");
  if (is_integer_pair(a, b)) return integer_binary(a, b, "mul", [](auto x, auto y) { return x * y; });
  check_binary_operands(a, b, "mul");
  Tensor out = mul_values(a, b);
  if (Recorder rec{kMulOp, {a, b}}) {
    // Each side keeps the other factor, and only when that side needs its gradient.
    if (rec.needs_grad(1)) rec.save(kSelf, a);
    if (rec.needs_grad(0)) rec.save(kOther, b);
    rec.set_outputs({out});
  }
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  if (is_integer_pair(a_in, b_in)) return div(a_in.to(DType::Float32), b_in.to(DType::Float32));
  const auto [a, b] = promote_operands(a_in, b_in, "div");
  check_binary_operands(a, b, "div");
  Tensor out = div_values(a, b);
  if (Recorder rec{kDivOp, {a, b}}) {
    if (rec.needs_grad(1)) rec.save(kNumerator, a);
    rec.save(kDenominator, b);
    rec.set_outputs({out});
  }
  return out;
}

Tensor detail::integer_scalar_operand(const Tensor& x, double s) {
  return detail::full_unchecked({}, s, s == std::trunc(s) && fits_integer_range(x.dtype(), s) ? x.dtype() : DType::Float32);
}

namespace {
bool is_integer(const Tensor& x) { return x.defined() && !is_floating(x.dtype()); }
}  // namespace

Tensor mul(const Tensor& x, double s) {
  if (is_integer(x)) return mul(x, detail::integer_scalar_operand(x, s));
  Tensor out = pointwise_unary(x, Unary::MulScalar, "mul", {s});
  if (Recorder rec{kMulScalarOp, {x}}) {
    rec.set_attrs(ScalarAttrs{s});
    rec.set_outputs({out});
  }
  return out;
}

Tensor neg(const Tensor& x) { return mul(x, -1.0); }

Tensor add(const Tensor& x, double s) {
  if (is_integer(x)) return add(x, detail::integer_scalar_operand(x, s));
  Tensor out = pointwise_unary(x, Unary::AddScalar, "add", {s});
  if (Recorder rec{kAddScalarOp, {x}}) rec.set_outputs({out});
  return out;
}

Tensor sub(const Tensor& x, double s) { return add(x, -s); }
// s - x; an integer x as integer_scalar_operand(s) - x (negating it first wrapped -2^63 when the
// result is floating).
Tensor rsub(const Tensor& x, double s) {
  if (is_integer(x)) return sub(detail::integer_scalar_operand(x, s), x);
  return add(neg(x), s);
}
// A true division, as PyTorch's x / s on the CPU: x * (1 / s) differs from it in the last bit
// whenever 1 / s is inexact (s = 3, 10, sqrt(d), ...).
Tensor div(const Tensor& x, double s) {
  if (is_integer(x)) return div(x.to(DType::Float32), s);
  Tensor out = pointwise_unary(x, Unary::DivScalar, "div", {s});
  if (Recorder rec{kDivScalarOp, {x}}) {
    rec.set_attrs(ScalarAttrs{s});
    rec.set_outputs({out});
  }
  return out;
}
// s / x as PyTorch's true division (s * (1 / x) differed in the last bit); an integer x divides
// as int / int does, into float32; a 16-bit x in float32, the scalar kept in float32 (README,
// "Dtypes") and the quotient rounded once.
Tensor div(double s, const Tensor& x) {
  TG_CHECK(x.defined(), "div: the tensor is undefined");
  if (is_integer(x)) return div(detail::integer_scalar_operand(x, s), x);
  if (is_reduced_floating(x.dtype())) return div(s, x.to(DType::Float32)).to(x.dtype());
  return div(detail::full_unchecked({}, s, x.dtype()), x);
}

// In place, as the out-of-place op: mul and div save self for other's gradient, so they get a
// copy of self's old value when other requires grad. With an other of another dtype the result
// is computed in the promoted dtype and written back in self's (a recorded cast), as PyTorch:
// a bfloat16 x.mul_(float32) stays bfloat16.
// An integer self with a floating result is refused, as PyTorch (int64 x.div_(y) would store the
// truncated quotient).
namespace {
Tensor in_dtype_of(const Tensor& self, const Tensor& result, const char* op) {
  detail::check_result_fits_self(op, self.dtype(), result.dtype());
  return result.to(self.dtype());
}
}  // namespace
Tensor& sub_(Tensor& x, const Tensor& other, double alpha) {
  detail::InplaceOp op{x, "sub_", {other}};
  return op.commit(in_dtype_of(x, sub(op.old_value(), other, alpha), "sub_"));
}
Tensor& mul_(Tensor& x, const Tensor& other) {
  detail::InplaceOp op{x, "mul_", {other}};
  return op.commit(in_dtype_of(x, mul(op.old_value(other.requires_grad()), other), "mul_"));
}
Tensor& div_(Tensor& x, const Tensor& other) {
  detail::InplaceOp op{x, "div_", {other}};
  return op.commit(in_dtype_of(x, div(op.old_value(other.requires_grad()), other), "div_"));
}
Tensor& sub_(Tensor& x, double s) {
  detail::InplaceOp op{x, "sub_"};
  return op.commit(sub(op.old_value(), s));
}
Tensor& div_(Tensor& x, double s) {
  detail::InplaceOp op{x, "div_"};
  return op.commit(div(op.old_value(), s));
}

void register_elementwise_ops(Registry& r) {
  for (const OpDef* op : {&kAddOp, &kSubOp, &kMulOp, &kDivOp, &kMulScalarOp, &kAddScalarOp, &kDivScalarOp}) r.add(*op);
}

}  // namespace tg
