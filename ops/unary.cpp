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

template <class F>
std::vector<Tensor> grad_times(const std::vector<Tensor>& g, const Tensor& s, const char* op, F df) {
  return {pointwise_binary(g[0], s, op, df)};
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
  return grad_times(g, ctx.saved(kInput), "pow_backward", [p](auto gv, auto x) {
    using T = decltype(x);
    return gv * static_cast<T>(p) * std::pow(x, static_cast<T>(p - 1.0));
  });
}
std::vector<Tensor> exp_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {mul(g[0], ctx.saved(kOutput))};
  return grad_times(g, ctx.saved(kOutput), "exp_backward", [](auto gv, auto y) { return gv * y; });
}
std::vector<Tensor> log_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {div(g[0], ctx.saved(kInput))};
  return grad_times(g, ctx.saved(kInput), "log_backward", [](auto gv, auto x) { return gv / x; });
}
std::vector<Tensor> sqrt_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {div(g[0], mul(ctx.saved(kOutput), 2.0))};
  return grad_times(g, ctx.saved(kOutput), "sqrt_backward", [](auto gv, auto y) { return gv / (y + y); });
}
std::vector<Tensor> rsqrt_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {mul(g[0], mul(pow(ctx.saved(kOutput), 3.0), -0.5))};
  return grad_times(g, ctx.saved(kOutput), "rsqrt_backward", [](auto gv, auto y) {
    using T = decltype(y);
    return T(-0.5) * gv * y * y * y;
  });
}
std::vector<Tensor> abs_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    Tensor sign = pointwise_unary(ctx.saved(kInput).detach(), "abs_backward", [](auto x) {
      using T = decltype(x);
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    });
    return {mul(g[0], sign)};
  }
  return grad_times(g, ctx.saved(kInput), "abs_backward", [](auto gv, auto x) {
    using T = decltype(x);
    return x > T(0) ? gv : (x < T(0) ? -gv : T(0));
  });
}
std::vector<Tensor> clamp_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto a = ctx.attrs<ClampAttrs>();
  if (ctx.create_graph()) {
    Tensor inside = pointwise_unary(ctx.saved(kInput).detach(), "clamp_backward", [a](auto x) {
      using T = decltype(x);
      return (x >= static_cast<T>(a.lo) && x <= static_cast<T>(a.hi)) ? T(1) : T(0);
    });
    return {mul(g[0], inside)};
  }
  return grad_times(g, ctx.saved(kInput), "clamp_backward", [a](auto gv, auto x) {
    using T = decltype(x);
    return (x >= static_cast<T>(a.lo) && x <= static_cast<T>(a.hi)) ? gv : T(0);
  });
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
           [](DType dt) {
             Tensor x = uniform({4, 5}, 0.1, 1.0, DType::Float64);
             double* p = x.data<double>();
             for (int64_t i = 0; i < x.numel(); i += 2) p[i] = -p[i];
             Tensor t = x.to(dt);
             t.requires_grad_();
             return Inputs{t};
           },
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
  Tensor y;
  if (p == 2.0) y = pointwise_unary(x, "pow", [](auto v) { return v * v; });
  else y = pointwise_unary(x, "pow", [p](auto v) { return std::pow(v, static_cast<decltype(v)>(p)); });
  record_one_input(kPowOp, x, y, {{kInput, x}}, PowAttrs{p});
  return y;
}
Tensor exp(const Tensor& x) {
  Tensor y = pointwise_unary(x, "exp", [](auto v) { return std::exp(v); });
  record_one_input(kExpOp, x, y, {{kOutput, y}});
  return y;
}
Tensor log(const Tensor& x) {
  Tensor y = pointwise_unary(x, "log", [](auto v) { return std::log(v); });
  record_one_input(kLogOp, x, y, {{kInput, x}});
  return y;
}
Tensor sqrt(const Tensor& x) {
  Tensor y = pointwise_unary(x, "sqrt", [](auto v) { return std::sqrt(v); });
  record_one_input(kSqrtOp, x, y, {{kOutput, y}});
  return y;
}
Tensor rsqrt(const Tensor& x) {
  Tensor y = pointwise_unary(x, "rsqrt", [](auto v) { return decltype(v)(1) / std::sqrt(v); });
  record_one_input(kRsqrtOp, x, y, {{kOutput, y}});
  return y;
}
Tensor abs(const Tensor& x) {
  Tensor y = pointwise_unary(x, "abs", [](auto v) { return std::abs(v); });
  record_one_input(kAbsOp, x, y, {{kInput, x}});
  return y;
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  TG_CHECK(min || max, "clamp: at least one of min or max must be given");
  const double lo = min ? *min : -std::numeric_limits<double>::infinity();
  const double hi = max ? *max : std::numeric_limits<double>::infinity();
  // PyTorch: min(max(x, lo), hi), so hi wins when lo > hi; NaN propagates.
  Tensor y = pointwise_unary(x, "clamp", [lo, hi](auto v) {
    using T = decltype(v);
    if (std::isnan(v)) return v;
    T r = v < static_cast<T>(lo) ? static_cast<T>(lo) : v;
    return r > static_cast<T>(hi) ? static_cast<T>(hi) : r;
  });
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
