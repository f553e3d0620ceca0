// Pointwise math. Each backward reads one saved tensor: the input x where the derivative is
// a function of x, the output y where it is cheaper from y (exp, sqrt, rsqrt).
//
//   pow:   y = x^p              dx = g * p * x^(p-1)     (0 when p == 0)
//   exp:   y = e^x              dx = g * y
//   log:   y = ln x             dx = g / x
//   sqrt:  y = x^(1/2)          dx = g / (2y)
//   rsqrt: y = x^(-1/2)         dx = -g y^3 / 2
//   abs:   y = |x|              dx = g * sign(x)
//   clamp: y = min(max(x,lo),hi) dx = g where lo <= x <= hi, else 0
#include "unary.h"

#include <cmath>
#include <limits>

#include "../framework/inplace.h"
#include "../framework/tape.h"
#include "binary_math.h"
#include "elementwise.h"
#include "internal/pointwise.h"
#include "internal/samples.h"

namespace tg {

namespace {

struct PowAttrs {
  double exponent;
};
struct ClampAttrs {
  double lo, hi;  // -inf / +inf when absent
};

using kernels::Binary;
using kernels::Unary;

// g * (the derivative, from the saved tensor s) in one fused kernel.
std::vector<Tensor> grad_times(const std::vector<Tensor>& g, const Tensor& s, Binary f, const char* op,
                               kernels::PointwiseScalars scalars = {}) {
  return {pointwise_binary(g[0], s, f, op, scalars)};
}

// Each backward has two spellings of one formula: a fused kernel for plain backward, and
// recorded ops under create_graph, so that the gradient can be differentiated again. (Masks
// and signs are constants: their derivative is zero almost everywhere.)

// The saved slot of these one-input ops: each saves one tensor, its input (pow, log, abs,
// clamp) or its output (exp, sqrt, rsqrt), so the two names are one slot.
enum UnarySaved { kInput = 0, kOutput = 0 };

std::vector<Tensor> pow_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const double p = ctx.attrs<PowAttrs>().exponent;
  if (p == 0.0) return {zeros(ctx.input_shape(0), ctx.input_dtype(0))};
  if (ctx.create_graph()) return {mul(g[0], mul(pow(ctx.saved(kInput), p - 1.0), p))};
  return grad_times(g, ctx.saved(kInput), Binary::PowBackward, "pow_backward", {p});
}
std::vector<Tensor> exp_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {mul(g[0], ctx.saved(kOutput))};
  return grad_times(g, ctx.saved(kOutput), Binary::Mul, "exp_backward");
}
std::vector<Tensor> log_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {div(g[0], ctx.saved(kInput))};
  return grad_times(g, ctx.saved(kInput), Binary::Div, "log_backward");
}
std::vector<Tensor> sqrt_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {div(g[0], mul(ctx.saved(kOutput), 2.0))};
  return grad_times(g, ctx.saved(kOutput), Binary::SqrtBackward, "sqrt_backward");
}
std::vector<Tensor> rsqrt_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {mul(g[0], mul(pow(ctx.saved(kOutput), 3.0), -0.5))};
  return grad_times(g, ctx.saved(kOutput), Binary::RsqrtBackward, "rsqrt_backward");
}
std::vector<Tensor> abs_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    return {mul(g[0], pointwise_unary(ctx.saved(kInput).detach(), Unary::Sign, "abs_backward"))};
  }
  return grad_times(g, ctx.saved(kInput), Binary::AbsBackward, "abs_backward");
}
std::vector<Tensor> clamp_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto a = ctx.attrs<ClampAttrs>();
  if (ctx.create_graph()) {
    return {mul(g[0], pointwise_unary(ctx.saved(kInput).detach(), Unary::ClampMask, "clamp_backward", {a.lo, a.hi}))};
  }
  return grad_times(g, ctx.saved(kInput), Binary::ClampBackward, "clamp_backward", {a.lo, a.hi});
}

using Inputs = std::vector<Tensor>;

SampleCase unary_case(const char* name, Shape shape, double low, double high, Tensor (*op)(const Tensor&)) {
  return {name, [shape, low, high](DType dt) { return Inputs{sample_uniform(shape, dt, low, high)}; },
          [op](const Inputs& x) { return Inputs{op(x[0])}; }};
}

std::vector<SampleCase> pow_samples() {
  return {{"[3,4] ^ 2.5, x in [0.5, 2)", [](DType dt) { return Inputs{sample_uniform({3, 4}, dt, 0.5, 2.0)}; },
           [](const Inputs& x) { return Inputs{pow(x[0], 2.5)}; }},
          {"[5] ^ 3 (both signs)", [](DType dt) { return Inputs{sample_tensor({5}, dt)}; },
           [](const Inputs& x) { return Inputs{pow(x[0], 3.0)}; }},
          {"[2,3] / 0.7 via s / x", [](DType dt) { return Inputs{sample_uniform({2, 3}, dt, 0.5, 2.0)}; },
           [](const Inputs& x) { return Inputs{div(0.7, x[0])}; }}};
}
std::vector<SampleCase> exp_samples() { return {unary_case("[3,4]", {3, 4}, -2, 2, exp)}; }
std::vector<SampleCase> log_samples() { return {unary_case("[3,4] in [0.2, 3)", {3, 4}, 0.2, 3, log)}; }
std::vector<SampleCase> sqrt_samples() { return {unary_case("[3,4] in [0.2, 3)", {3, 4}, 0.2, 3, sqrt)}; }
std::vector<SampleCase> rsqrt_samples() { return {unary_case("[3,4] in [0.2, 3)", {3, 4}, 0.2, 3, rsqrt)}; }
std::vector<SampleCase> abs_samples() {
  // Both signs, none near the kink at 0.
  return {{"[4,5] away from 0",
           [](DType dt) { return Inputs{sample_away_from_zero({4, 5}, dt)}; },
           [](const Inputs& x) { return Inputs{abs(x[0])}; }}};
}
std::vector<SampleCase> clamp_samples() {
  // Values on a grid that avoids the bounds (+-0.5) by at least 0.05.
  auto make = [](DType dt) {
    std::vector<double> v;
    for (int i = 0; i < 12; ++i) v.push_back(-1.05 + 0.2 * i);
    Tensor t = from_vector(v, {3, 4}).to(dt);
    t.requires_grad_();
    return Inputs{t};
  };
  return {{"[3,4] in [-0.5, 0.5]", make, [](const Inputs& x) { return Inputs{clamp(x[0], -0.5, 0.5)}; }},
          {"[3,4] min only", make, [](const Inputs& x) { return Inputs{clamp_min(x[0], -0.5)}; }},
          {"[3,4] max only", make, [](const Inputs& x) { return Inputs{clamp_max(x[0], 0.5)}; }}};
}

}  // namespace

const OpDef kPowOp{"pow", "pow_backward", "self", pow_backward, pow_samples, true};
const OpDef kExpOp{"exp", "exp_backward", "self", exp_backward, exp_samples, true};
const OpDef kLogOp{"log", "log_backward", "self", log_backward, log_samples, true};
const OpDef kSqrtOp{"sqrt", "sqrt_backward", "self", sqrt_backward, sqrt_samples, true};
const OpDef kRsqrtOp{"rsqrt", "rsqrt_backward", "self", rsqrt_backward, rsqrt_samples, true};
const OpDef kAbsOp{"abs", "abs_backward", "self", abs_backward, abs_samples, true};
const OpDef kClampOp{"clamp", "clamp_backward", "self", clamp_backward, clamp_samples, true};

Tensor pow(const Tensor& x, double p) {
  // integers, as PyTorch: a whole exponent keeps the dtype (pow of two tensors), any other is
  // float32
  if (x.defined() && !is_floating(x.dtype())) {
    TG_CHECK(!(p < 0 && p == std::trunc(p)), "pow: exponent: expected >= 0 for a ", dtype_name(x.dtype()),
             " tensor (integers to negative integer powers are not allowed, as in PyTorch), got ", p);
    return pow(x, detail::integer_scalar_operand(x, p));
  }
  Tensor y;
  if (p == 2.0) y = pointwise_unary(x, Unary::Square, "pow");
  else y = pointwise_unary(x, Unary::Pow, "pow", {p});
  record_one_input(kPowOp, x, y, {{kInput, x}}, PowAttrs{p});
  return y;
}
Tensor exp(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Exp, "exp");
  record_one_input(kExpOp, x, y, {{kOutput, y}});
  return y;
}
Tensor log(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Log, "log");
  record_one_input(kLogOp, x, y, {{kInput, x}});
  return y;
}
Tensor sqrt(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Sqrt, "sqrt");
  record_one_input(kSqrtOp, x, y, {{kOutput, y}});
  return y;
}
Tensor rsqrt(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Rsqrt, "rsqrt");
  record_one_input(kRsqrtOp, x, y, {{kOutput, y}});
  return y;
}
Tensor abs(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Abs, "abs");
  record_one_input(kAbsOp, x, y, {{kInput, x}});
  return y;
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  TG_CHECK(min || max, "clamp: at least one of min or max must be given");
  const double lo = min ? *min : -std::numeric_limits<double>::infinity();
  const double hi = max ? *max : std::numeric_limits<double>::infinity();
  if (x.defined() && !is_floating(x.dtype())) {  // integers: maximum / minimum with the bounds as
    Tensor y = x;                                 // operands (whole bounds keep the dtype)
    if (min) y = maximum(y, detail::integer_scalar_operand(x, lo));
    if (max) y = minimum(y, detail::integer_scalar_operand(x, hi));
    return y;
  }
  // PyTorch: min(max(x, lo), hi), so hi wins when lo > hi; NaN propagates.
  Tensor y = pointwise_unary(x, Unary::Clamp, "clamp", {lo, hi});
  record_one_input(kClampOp, x, y, {{kInput, x}}, ClampAttrs{lo, hi});
  return y;
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

Tensor reciprocal(const Tensor& x) { return pow(x, -1.0); }
Tensor square(const Tensor& x) { return pow(x, 2.0); }

Tensor& clamp_(Tensor& x, std::optional<double> min, std::optional<double> max) {
  detail::InplaceOp op{x, "clamp_"};
  return op.commit(clamp(op.old_value(/*copy=*/true), min, max));  // clamp's mask needs the input
}

void register_unary_ops(Registry& r) {
  for (const OpDef* op : {&kPowOp, &kExpOp, &kLogOp, &kSqrtOp, &kRsqrtOp, &kAbsOp, &kClampOp}) r.add(*op);
}

}  // namespace tg
