// Activations. Each saves what its derivative reads: relu and friends their output.
//
//   relu:    y = max(x, 0)     dx = g * (y > 0)
//   sigmoid: y = 1/(1+e^-x)    dx = g * y (1 - y)        saves y
//   tanh:    y = tanh x        dx = g * (1 - y^2)        saves y
//   gelu:    y = x Phi(x)      dx = g * (Phi(x) + x phi(x))   saves x (tanh form: its own derivative)
#include "activation.h"

#include <cmath>

#include "../framework/inplace.h"
#include "../framework/tape.h"
#include "elementwise.h"
#include "internal/elementwise_kernel.h"
#include "internal/pointwise.h"
#include "internal/samples.h"
#include "internal/vec_math.h"

namespace tg {

namespace {

// The saved slot of relu, sigmoid and tanh (one enum: the three save their output).
enum ActivationSaved { kOutput };

std::vector<Tensor> relu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor y = ctx.saved(kOutput);
  if (ctx.create_graph()) {  // g times a constant mask: differentiable again in g
    Tensor mask = pointwise_unary(y.detach(), "relu_backward", [](auto v) { return v > decltype(v)(0) ? 1 : 0; });
    return {mul(g[0], mask)};
  }
  return {dispatch_floating(y.dtype(), "relu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(g[0], y, "relu_backward", [](T gv, T yv) { return yv > T(0) ? gv : T(0); });
  })};
}

std::vector<SampleCase> relu_samples() {
  // Values kept away from the kink at 0, where the derivative is undefined.
  return {{"[4,5] away from 0",
           [](DType dt) {
             Tensor x = uniform({4, 5}, 0.1, 1.0, DType::Float64);
             double* p = x.data<double>();
             for (int64_t i = 0; i < x.numel(); i += 2) p[i] = -p[i];  // both signs, none near 0
             Tensor t = x.to(dt);
             t.requires_grad_();
             return std::vector<Tensor>{t};
           },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{relu(x[0])}; }}};
}

struct GeluAttrs {
  bool tanh_form;
};

// Computed in T, as PyTorch's kernels do (the constants are PyTorch's M_SQRT1_2, M_2_SQRTPI...).
// erf and exp are vec_erf / vec_exp: for float they vectorise (about 1 ulp, like PyTorch's
// Sleef), for double they are std::erf / std::exp. always_inline: a call per element (GCC
// judged these too big to inline) would keep the loops in elementwise_kernel.h from vectorising.
constexpr double kSqrt1_2 = 0.70710678118654752440;   // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;

template <class T>
[[gnu::always_inline]] inline T gelu_erf(T x) {
  return x * T(0.5) * (T(1) + vec_erf(x * static_cast<T>(kSqrt1_2)));
}
template <class T>
[[gnu::always_inline]] inline T gelu_erf_derivative(T x) {
  const T cdf = T(0.5) * (T(1) + vec_erf(x * static_cast<T>(kSqrt1_2)));
  const T pdf = static_cast<T>(kInvSqrt2Pi) * vec_exp(T(-0.5) * x * x);
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

// Under create_graph the same formulas in recorded ops (gelu through its own recorded
// backward op, whose derivative gelu_backward_backward knows the second derivative).
std::vector<Tensor> sigmoid_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    const Tensor y = ctx.saved(kOutput);
    return {mul(g[0], mul(y, add(neg(y), 1.0)))};
  }
  return {pointwise_binary(g[0], ctx.saved(kOutput), "sigmoid_backward",
                           [](auto gv, auto y) { return gv * y * (decltype(y)(1) - y); })};
}
std::vector<Tensor> tanh_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    const Tensor y = ctx.saved(kOutput);
    return {mul(g[0], add(neg(mul(y, y)), 1.0))};
  }
  return {pointwise_binary(g[0], ctx.saved(kOutput), "tanh_backward",
                           [](auto gv, auto y) { return gv * (decltype(y)(1) - y * y); })};
}
// The second derivative, for the recorded gelu_backward:
//   exact: d/dx (Phi + x phi) = phi (2 - x^2)
//   tanh:  with t = tanh u, u = k (x + c x^3): (1 - t^2) (u' + x/2 (u'' - 2 t u'^2))
template <class T>
T gelu_erf_second_derivative(T x) {
  return static_cast<T>(kInvSqrt2Pi) * vec_exp(T(-0.5) * x * x) * (T(2) - x * x);
}
template <class T>
T gelu_tanh_second_derivative(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c = static_cast<T>(kGeluCubic);
  const T t = std::tanh(k * (x + c * x * x * x));
  const T du = k * (T(1) + T(3) * c * x * x), ddu = T(6) * k * c * x;
  return (T(1) - t * t) * (du + T(0.5) * x * (ddu - T(2) * t * du * du));
}

Tensor gelu_times_derivative(const Tensor& g, const Tensor& x, bool tanh_form) {
  // One loop per form rather than a test per element: the erf body vectorises.
  if (tanh_form)
    return pointwise_binary(g, x, "gelu_backward", [](auto gv, auto xv) { return gv * gelu_tanh_derivative(xv); });
  return pointwise_binary(g, x, "gelu_backward", [](auto gv, auto xv) { return gv * gelu_erf_derivative(xv); });
}

Tensor recorded_gelu_backward(const Tensor& g, const Tensor& x, bool tanh_form);

// The saved slots of gelu (kInput) and of its recorded backward gelu_backward (kGradOutput,
// kInput: gelu's input again); one enum, as the two share a name.
enum GeluSaved { kInput, kGradOutput };

std::vector<Tensor> gelu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const bool tanh_form = ctx.attrs<GeluAttrs>().tanh_form;
  if (ctx.create_graph()) return {recorded_gelu_backward(g[0], ctx.saved(kInput), tanh_form)};
  return {gelu_times_derivative(g[0], ctx.saved(kInput), tanh_form)};
}

// gelu_backward (grad_output, self) -> grad_output * gelu'(self): its gradients are
// d/dgrad_output = gelu'(self) and d/dself = grad_output * gelu''(self).
std::vector<Tensor> gelu_backward_backward(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const bool tanh_form = ctx.attrs<GeluAttrs>().tanh_form;
  const Tensor g = ctx.saved(kGradOutput), x = ctx.saved(kInput);
  Tensor dg, dx;
  if (ctx.needs_grad(0)) dg = recorded_gelu_backward(gg[0], x, tanh_form);
  if (ctx.needs_grad(1)) {
    Tensor second = tanh_form
        ? pointwise_unary(x.detach(), "gelu_backward_backward", [](auto v) { return gelu_tanh_second_derivative(v); })
        : pointwise_unary(x.detach(), "gelu_backward_backward", [](auto v) { return gelu_erf_second_derivative(v); });
    dx = mul(mul(gg[0], g), second);
  }
  return {dg, dx};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> sigmoid_samples() {
  return {{"[3,4]", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{sigmoid(x[0])}; }}};
}
std::vector<SampleCase> tanh_samples() {
  return {{"[3,4]", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{tanh(x[0])}; }}};
}
std::vector<SampleCase> gelu_samples() {
  return {{"[3,4] exact", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{gelu(x[0])}; }},
          {"[3,4] tanh", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{gelu(x[0], "tanh")}; }}};
}

}  // namespace

const OpDef kSigmoidOp{"sigmoid", "sigmoid_backward", "self", sigmoid_backward, sigmoid_samples, true};
const OpDef kTanhOp{"tanh", "tanh_backward", "self", tanh_backward, tanh_samples, true};
const OpDef kGeluOp{"gelu", "gelu_backward", "self", gelu_backward, gelu_samples, true};
// gelu is twice differentiable here, not three times: the third derivative is not recorded.
const OpDef kGeluBackwardOp{"gelu_backward", "gelu_backward_backward", "grad_output, self", gelu_backward_backward,
                            nullptr};

namespace {
Tensor recorded_gelu_backward(const Tensor& g, const Tensor& x, bool tanh_form) {
  Tensor out = gelu_times_derivative(g, x, tanh_form);
  if (Recorder rec{kGeluBackwardOp, {g, x}}) {
    rec.set_attrs(GeluAttrs{tanh_form});
    rec.save(kGradOutput, g);
    rec.save(kInput, x);
    rec.set_outputs({out});
  }
  return out;
}
}  // namespace

Tensor sigmoid(const Tensor& x) {
  // Stable on both sides: e^-x never overflows for x >= 0, e^x never for x < 0.
  Tensor y = pointwise_unary(x, "sigmoid", [](auto v) {
    using T = decltype(v);
    if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
    const T e = std::exp(v);
    return e / (T(1) + e);
  });
  if (Recorder rec{kSigmoidOp, {x}}) {
    rec.save(kOutput, y);
    rec.set_outputs({y});
  }
  return y;
}

Tensor& relu_(Tensor& x) {
  detail::InplaceOp op{x, "relu_"};
  return op.commit(relu(op.old_value()));  // relu saves its result, not the overwritten input
}

Tensor tanh(const Tensor& x) {
  Tensor y = pointwise_unary(x, "tanh", [](auto v) { return std::tanh(v); });
  if (Recorder rec{kTanhOp, {x}}) {
    rec.save(kOutput, y);
    rec.set_outputs({y});
  }
  return y;
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  TG_CHECK(approximate == "none" || approximate == "tanh",
           "gelu: expected approximate to be 'none' or 'tanh', got '", approximate, "'");
  const bool tanh_form = approximate == "tanh";
  Tensor y = tanh_form ? pointwise_unary(x, "gelu", [](auto v) { return gelu_tanh(v); })
                       : pointwise_unary(x, "gelu", [](auto v) { return gelu_erf(v); });
  if (Recorder rec{kGeluOp, {x}}) {
    rec.save(kInput, x);
    rec.set_attrs(GeluAttrs{tanh_form});
    rec.set_outputs({y});
  }
  return y;
}

const OpDef kReluOp{"relu", "relu_backward", "self", relu_backward, relu_samples, true};

Tensor relu(const Tensor& x) {
  TG_CHECK(x.defined(), "relu: the tensor is undefined");
  Tensor y = dispatch_floating(x.dtype(), "relu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T>(x, [](T v) { return v > T(0) ? v : T(0); });
  });
  if (Recorder rec{kReluOp, {x}}) {
    rec.save(kOutput, y);
    rec.set_outputs({y});
  }
  return y;
}

void register_activation_ops(Registry& r) {
  for (const OpDef* op : {&kReluOp, &kSigmoidOp, &kTanhOp, &kGeluOp, &kGeluBackwardOp}) r.add(*op);
}

}  // namespace tg
