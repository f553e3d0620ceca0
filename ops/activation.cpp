// Activations. Each saves what its derivative reads: relu and friends their output. The
// kernels, forward and backward, are in activation_kernels.cpp (pointwise_kernels.h).
//
//   relu:    y = max(x, 0)     dx = g * (y > 0)
//   sigmoid: y = 1/(1+e^-x)    dx = g * y (1 - y)        saves y
//   tanh:    y = tanh x        dx = g * (1 - y^2)        saves y
//   gelu:    y = x Phi(x)      dx = g * (Phi(x) + x phi(x))   saves x (tanh form: its own derivative)
//   silu:    y = x sigmoid(x)  dx = g * s (1 + x (1 - s))     saves x
//   leaky_relu: y = x or a x   dx = g or a g (by x > 0)       saves x
#include "activation.h"


#include "../framework/inplace.h"
#include "../framework/recompute.h"
#include "../framework/tape.h"
#include "elementwise.h"
#include "internal/pointwise.h"
#include "internal/samples.h"

namespace tg {

namespace {

// The saved slot of relu, sigmoid and tanh (one enum: the three save their output).
enum ActivationSaved { kOutput };

using kernels::Binary;
using kernels::Unary;

std::vector<Tensor> relu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor y = ctx.saved(kOutput);
  if (ctx.create_graph()) {  // g times a constant mask: differentiable again in g
    return {mul(g[0], pointwise_unary(y.detach(), Unary::ReluMask, "relu_backward"))};
  }
  return {pointwise_binary(g[0], y, Binary::ReluBackward, "relu_backward")};
}

std::vector<SampleCase> relu_samples() {
  // Values kept away from the kink at 0, where the derivative is undefined.
  return {{"[4,5] away from 0",
           [](DType dt) { return std::vector<Tensor>{sample_away_from_zero({4, 5}, dt)}; },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{relu(x[0])}; }}};
}

struct GeluAttrs {
  bool tanh_form;
};

// Under create_graph the same formulas in recorded ops (gelu through its own recorded
// backward op, whose derivative gelu_backward_backward knows the second derivative).
std::vector<Tensor> sigmoid_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    const Tensor y = ctx.saved(kOutput);
    return {mul(g[0], mul(y, add(neg(y), 1.0)))};
  }
  return {pointwise_binary(g[0], ctx.saved(kOutput), Binary::SigmoidBackward, "sigmoid_backward")};
}
std::vector<Tensor> tanh_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) {
    const Tensor y = ctx.saved(kOutput);
    return {mul(g[0], add(neg(mul(y, y)), 1.0))};
  }
  return {pointwise_binary(g[0], ctx.saved(kOutput), Binary::TanhBackward, "tanh_backward")};
}
Tensor gelu_times_derivative(const Tensor& g, const Tensor& x, bool tanh_form) {
  return pointwise_binary(g, x, tanh_form ? Binary::GeluTanhBackward : Binary::GeluBackward, "gelu_backward");
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
    Tensor second =
        pointwise_unary(x.detach(), tanh_form ? Unary::GeluTanhSecond : Unary::GeluSecond, "gelu_backward_backward");
    dx = mul(mul(gg[0], g), second);
  }
  return {dg, dx};
}

// The saved slot of silu and leaky_relu: their input.
enum SavedInput { kSavedInput };

// Under create_graph: silu's vector-Jacobian product through x * sigmoid(x) in recorded ops.
std::vector<Tensor> silu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph())
    return recomputed_backward(ctx, {ctx.saved(kSavedInput)}, g, [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{mul(in[0], sigmoid(in[0]))};
    });
  return {pointwise_binary(g[0], ctx.saved(kSavedInput), Binary::SiluBackward, "silu_backward")};
}

struct LeakyReluAttrs {
  double negative_slope;
};

// g times a piecewise-constant factor (1 or the slope): under create_graph the factor is a
// constant and the product is recorded, so it is differentiable again in g.
std::vector<Tensor> leaky_relu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const kernels::PointwiseScalars s{ctx.attrs<LeakyReluAttrs>().negative_slope};
  const Tensor x = ctx.saved(kSavedInput);
  if (ctx.create_graph()) {
    Tensor factor = pointwise_binary(ones(x.shape(), x.dtype()), x.detach(), Binary::LeakyReluBackward,
                                     "leaky_relu_backward", s);
    return {mul(g[0], factor)};
  }
  return {pointwise_binary(g[0], x, Binary::LeakyReluBackward, "leaky_relu_backward", s)};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> silu_samples() {
  return {{"[3,4]", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{silu(x[0])}; }}};
}
std::vector<SampleCase> leaky_relu_samples() {
  // Values kept away from the kink at 0, where the derivative jumps.
  auto away_from_zero = [](DType dt) { return Inputs{sample_away_from_zero({4, 5}, dt)}; };
  return {{"[4,5] away from 0, slope 0.01", away_from_zero, [](const Inputs& x) { return Inputs{leaky_relu(x[0])}; }},
          {"[4,5] away from 0, slope -0.3", away_from_zero,
           [](const Inputs& x) { return Inputs{leaky_relu(x[0], -0.3)}; }}};
}

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

const OpDef kSiluOp{"silu", "silu_backward", "self", silu_backward, silu_samples, true};
const OpDef kLeakyReluOp{"leaky_relu", "leaky_relu_backward", "self", leaky_relu_backward, leaky_relu_samples, true};
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
  Tensor y = pointwise_unary(x, Unary::Sigmoid, "sigmoid");
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
  Tensor y = pointwise_unary(x, Unary::Tanh, "tanh");
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
  Tensor y = pointwise_unary(x, tanh_form ? Unary::GeluTanh : Unary::Gelu, "gelu");
  if (Recorder rec{kGeluOp, {x}}) {
    rec.save(kInput, x);
    rec.set_attrs(GeluAttrs{tanh_form});
    rec.set_outputs({y});
  }
  return y;
}

const OpDef kReluOp{"relu", "relu_backward", "self", relu_backward, relu_samples, true};

Tensor relu(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Relu, "relu");
  if (Recorder rec{kReluOp, {x}}) {
    rec.save(kOutput, y);
    rec.set_outputs({y});
  }
  return y;
}

Tensor silu(const Tensor& x) {
  Tensor y = pointwise_unary(x, Unary::Silu, "silu");
  if (Recorder rec{kSiluOp, {x}}) {
    rec.save(kSavedInput, x);
    rec.set_outputs({y});
  }
  return y;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor y = pointwise_unary(x, Unary::LeakyRelu, "leaky_relu", {negative_slope});
  if (Recorder rec{kLeakyReluOp, {x}}) {
    rec.save(kSavedInput, x);
    rec.set_attrs(LeakyReluAttrs{negative_slope});
    rec.set_outputs({y});
  }
  return y;
}

void register_activation_ops(Registry& r) {
  for (const OpDef* op : {&kReluOp, &kSigmoidOp, &kTanhOp, &kGeluOp, &kGeluBackwardOp, &kSiluOp, &kLeakyReluOp})
    r.add(*op);
}

}  // namespace tg
