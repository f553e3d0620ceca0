// Pointwise losses. Each op computes the unreduced loss and records one entry; the reduction
// is then the differentiable sum/mean. Shape legend: input, target (and pos_weight) broadcast
// to the loss's shape; d = input - target.
//
//   mse_loss:        l = d^2                               dl/dd = 2d
//   l1_loss:         l = |d|                               dl/dd = sign(d)
//   smooth_l1_loss:  l = d^2/(2 beta) if |d|<beta else |d| - beta/2   dl/dd = d/beta or sign(d)
//   bce_with_logits: l = (1-y) x + w(y) sp(-x),  w = 1 + (pw-1) y,  sp(z) = log(1+e^z)
//                    dl/dx = (1-y) - w sigmoid(-x) = w sigmoid(x) - pw y
//                    dl/dy = -x + (pw-1) sp(-x)   dl/dpw = y sp(-x)
// Under create_graph the losses' gradients come from recorded ops: the diff losses' formula,
// and for bce the loss itself recomputed in recorded ops (with sp(-x) a recorded op of its own,
// log1p_exp_neg, smooth and stable at any x) and differentiated by recomputed_backward.
#include "loss.h"
#include "../framework/autocast.h"

#include <algorithm>
#include <cmath>

#include "../framework/parallel.h"
#include "../framework/recompute.h"
#include "../framework/tape.h"
#include "../framework/views.h"
#include "activation.h"
#include "elementwise.h"
#include "internal/pointwise.h"
#include "reduce.h"
#include "internal/samples.h"
#include "unary.h"
#include "where.h"
#include "internal/reduced_float.h"

namespace tg {

Tensor log1p_exp_neg(const Tensor& x);  // log(1 + e^-x), recorded; bce's create_graph backward

Tensor apply_reduction(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::Mean: return mean(loss);
    case Reduction::Sum: return sum(loss);
    default: return loss;
  }
}

namespace {

enum class Kind { Mse, L1, SmoothL1 };
struct BceAttrs {
  bool has_pos_weight;
};
struct DiffLossAttrs {
  Kind kind;
  double beta;
};

template <class T>
T sign_of(T d) {
  return d > T(0) ? T(1) : (d < T(0) ? T(-1) : T(0));
}

template <class T>
T diff_loss(T d, Kind kind, T beta) {
  switch (kind) {
    case Kind::Mse: return d * d;
    case Kind::L1: return std::abs(d);
    default: {
      const T a = std::abs(d);
      return a < beta ? T(0.5) * d * d / beta : a - T(0.5) * beta;
    }
  }
}

template <class T>
T diff_loss_derivative(T d, Kind kind, T beta) {
  switch (kind) {
    case Kind::Mse: return T(2) * d;
    case Kind::L1: return sign_of(d);
    default: return std::abs(d) < beta || std::isnan(d) ? d / beta : sign_of(d);  // NaN: NaN, as PyTorch
  }
}

// The saved slots of the losses in this file: mse, l1 and smooth_l1 save kInput and kTarget,
// log1p_exp_neg kInput, binary_cross_entropy_with_logits all four (one enum, as they share
// names).
enum LossSaved { kInput, kTarget, kPosWeightExpanded, kPosWeight };

std::vector<Tensor> diff_loss_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto a = ctx.attrs<DiffLossAttrs>();
  if (ctx.create_graph()) {
    // dl/dd = d * c1 + c0 with constants c1, c0 read off d (mse: 2, 0; l1: 0, sign d;
    // smooth_l1: 1/beta, 0 inside |d| < beta and 0, sign d outside), in recorded ops.
    const Tensor d = sub(ctx.saved(kInput), ctx.saved(kTarget));
    Tensor c1 = pointwise_unary(d.detach(), "loss_backward", [a](auto v) {
      using T = decltype(v);
      return a.kind == Kind::Mse ? T(2) : (a.kind == Kind::SmoothL1 && std::abs(v) < T(a.beta) ? T(1 / a.beta) : T(0));
    });
    Tensor c0 = pointwise_unary(d.detach(), "loss_backward", [a](auto v) {
      using T = decltype(v);
      return a.kind == Kind::Mse || (a.kind == Kind::SmoothL1 && std::abs(v) < T(a.beta)) ? T(0) : sign_of(v);
    });
    // d only where c1 != 0: an infinite d (inputs of huge opposite signs) times c1 = 0 was NaN.
    const Tensor dd = mul(g[0], add(mul(where(c1, d, scalar_tensor(0, d.dtype())), c1), c0));
    Tensor da, db;
    if (ctx.needs_grad(0)) da = sum_to(dd, ctx.input_shape(0));
    if (ctx.needs_grad(1)) db = sum_to(neg(dd), ctx.input_shape(1));
    return {da, db};
  }
  // 16 bits: from float32 copies, so that d and g d' are not rounded on the way; each gradient is
  // summed in float32 and rounded once.
  Tensor d = pointwise_binary(detail::widen(ctx.saved(kInput)), detail::widen(ctx.saved(kTarget)), "loss_backward",
                              [](auto x, auto y) { return x - y; });
  Tensor dd = pointwise_binary(detail::widen(g[0]), d, "loss_backward", [a](auto gv, auto dv) {
    return gv * diff_loss_derivative(dv, a.kind, static_cast<decltype(dv)>(a.beta));
  });
  Tensor da, db;
  if (ctx.needs_grad(0)) da = round_result(sum_to(dd, ctx.input_shape(0)), ctx.input_dtype(0));
  if (ctx.needs_grad(1))
    db = round_result(sum_to(pointwise_unary(dd, "loss_backward", [](auto v) { return -v; }), ctx.input_shape(1)),
                         ctx.input_dtype(1));
  return {da, db};
}

// sp(-x) = log(1 + e^-x), computed stably; d/dx = -sigmoid(-x). Internal to bce's recorded
// backward: its own backward is recorded sigmoid, so it is twice differentiable.
template <class T>
T log1p_exp_neg_value(T x) {
  return std::max(-x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}
std::vector<Tensor> log1p_exp_neg_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  if (ctx.create_graph()) return {mul(g[0], neg(sigmoid(neg(ctx.saved(kInput)))))};
  return {pointwise_binary(g[0], ctx.saved(kInput), "log1p_exp_neg_backward", [](auto gv, auto xv) {
    using T = decltype(xv);
    const T s = xv >= T(0) ? std::exp(-xv) / (T(1) + std::exp(-xv)) : T(1) / (T(1) + std::exp(xv));  // sigmoid(-x)
    return -gv * s;
  })};
}
std::vector<SampleCase> log1p_exp_neg_samples() {
  return {{"[2,5], values N(0, 9)",
           [](DType dt) {
             Tensor t = mul(sample_tensor({2, 5}, dt, false), 3.0);
             t.requires_grad_();
             return std::vector<Tensor>{t};
           },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{log1p_exp_neg(x[0])}; }}};
}
}  // namespace

const OpDef kLog1pExpNegOp{"log1p_exp_neg", "log1p_exp_neg_backward", "self", log1p_exp_neg_backward,
                           log1p_exp_neg_samples, true};

Tensor log1p_exp_neg(const Tensor& x) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "log1p_exp_neg: expected a defined floating tensor");
  Tensor out = pointwise_unary(x.detach(), "log1p_exp_neg", [](auto v) { return log1p_exp_neg_value(v); });
  if (Recorder rec{kLog1pExpNegOp, {x}}) {
    rec.save(kInput, x);
    rec.set_outputs({out});
  }
  return out;
}

namespace {

std::vector<Tensor> bce_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const bool has_pw = ctx.attrs<BceAttrs>().has_pos_weight;
  if (ctx.create_graph()) {
    // The unreduced loss in recorded ops, from the inputs themselves (saved with history):
    // (1 - y) x + (1 + (pw - 1) y) sp(-x), pw broadcast as in the forward.
    const Tensor pos_weight = has_pw ? ctx.saved(kPosWeight) : Tensor();
    return recomputed_backward(ctx, {ctx.saved(kInput), ctx.saved(kTarget), pos_weight}, g, [](const std::vector<Tensor>& in) {
      const Tensor &x = in[0], &y = in[1];
      const Tensor sp = log1p_exp_neg(x);
      const Tensor w = in[2].defined() ? add(mul(sub(in[2], 1.0), y), 1.0) : Tensor();
      return std::vector<Tensor>{add(mul(rsub(y, 1.0), x), w.defined() ? mul(w, sp) : sp)};
    });
  }
  // Contiguous copies are free when the inputs were contiguous; 16 bits: widened to float32, the
  // gradients rounded once below.
  const Tensor x = detail::widen(ctx.saved(kInput).contiguous());
  const Tensor y = detail::widen(ctx.saved(kTarget).contiguous());
  const Tensor pw = has_pw ? detail::widen(ctx.saved(kPosWeightExpanded)) : Tensor();  // absent: 1
  const Tensor gx = detail::widen(g[0].contiguous());
  Tensor dx, dy, dpw;
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    const T* pp = pw.defined() ? pw.data<T>() : nullptr;
    const T* pg = gx.data<T>();
    T* ox = ctx.needs_grad(0) ? (dx = Tensor::empty(x.shape(), x.dtype())).template data<T>() : nullptr;
    T* oy = ctx.needs_grad(1) ? (dy = Tensor::empty(x.shape(), x.dtype())).template data<T>() : nullptr;
    T* op = ctx.needs_grad(2) ? (dpw = Tensor::empty(x.shape(), x.dtype())).template data<T>() : nullptr;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T xv = px[i], yv = py[i], p = pp ? pp[i] : T(1);
      const T e = std::exp(-std::abs(xv)), q = e / (T(1) + e);  // q = sigmoid(-|x|)
      const T sp_neg = std::max(-xv, T(0)) + std::log1p(e);      // log(1 + e^-x)
      const T w = T(1) + (p - T(1)) * yv;
      // (1-y) - w sigmoid(-x) = w sigmoid(x) - p y: the form without cancellation for x's sign
      // (PyTorch's is the second; the first lost every digit for y = 0 and x < -17 in float32)
      if (ox) ox[i] = pg[i] * (xv >= T(0) ? (T(1) - yv) - w * q : w * q - p * yv);
      // dl/dy = -x + (p-1) sp(-x), with sp(-x) = -x + log1p(e^x) for x < 0: -p x + (p-1) log1p(e^x)
      // there (no Inf - Inf nor 0 * Inf at x = -Inf, where PyTorch gives NaN for p < 1; p = 0's
      // limit is 0)
      const T minus_px = p == T(0) ? T(0) : -(p * xv);
      if (oy) oy[i] = pg[i] * ((xv >= T(0) ? -xv : minus_px) + (p - T(1)) * std::log1p(e));
      if (op) op[i] = pg[i] * yv * sp_neg;
    }
  });
  if (dpw.defined()) dpw = sum_to(dpw, ctx.input_shape(2));
  for (int i : {0, 1, 2}) {
    Tensor& t = i == 0 ? dx : i == 1 ? dy : dpw;
    if (t.defined()) t = round_result(t, ctx.input_dtype(i));
  }
  return {dx, dy, dpw};
}

using Inputs = std::vector<Tensor>;

std::vector<SampleCase> diff_samples(Kind kind) {
  auto run = [kind](const Tensor& a, const Tensor& b, Reduction r) {
    return kind == Kind::Mse ? mse_loss(a, b, r) : kind == Kind::L1 ? l1_loss(a, b, r) : smooth_l1_loss(a, b, r, 0.5);
  };
  // input = target + offsets kept away from 0 and from +-beta (0.5), where l1 / smooth_l1 kink.
  auto make = [](DType dt) {
    Tensor t = randn({3, 4}, DType::Float64);
    std::vector<double> off;
    for (int i = 0; i < 12; ++i) off.push_back((i % 2 ? -1 : 1) * (0.1 + 0.07 * i + (i % 3 == 0 ? 0.5 : 0)));
    for (double& o : off)
      if (std::abs(std::abs(o) - 0.5) < 0.05) o += 0.1;
    Tensor a = (t.to(dt) + from_vector(off, {3, 4}).to(dt)).detach();
    Tensor b = t.to(dt);
    a.requires_grad_();
    b.requires_grad_();
    return Inputs{a, b};
  };
  return {{"[3,4] none", make, [run](const Inputs& x) { return Inputs{run(x[0], x[1], Reduction::None)}; }},
          {"[3,4] mean", make, [run](const Inputs& x) { return Inputs{run(x[0], x[1], Reduction::Mean)}; }}};
}
std::vector<SampleCase> mse_samples() { return diff_samples(Kind::Mse); }
std::vector<SampleCase> l1_samples() { return diff_samples(Kind::L1); }
std::vector<SampleCase> smooth_l1_samples() { return diff_samples(Kind::SmoothL1); }

std::vector<SampleCase> bce_samples() {
  return {{"[3,4] target in (0,1), pos_weight [4]",
           [](DType dt) {
             return Inputs{sample_tensor({3, 4}, dt), sample_uniform({3, 4}, dt, 0.0, 1.0),
                           sample_uniform({4}, dt, 0.5, 2.0)};
           },
           [](const Inputs& x) { return Inputs{binary_cross_entropy_with_logits(x[0], x[1], x[2], Reduction::None)}; }},
          {"[2,3] mean, no pos_weight",
           [](DType dt) { return Inputs{sample_tensor({2, 3}, dt), sample_uniform({2, 3}, dt, 0.0, 1.0)}; },
           [](const Inputs& x) { return Inputs{binary_cross_entropy_with_logits(x[0], x[1])}; }},
          {"[2,3] sum, logits 0 and +-8, pos_weight [2,3]",
           [](DType dt) {
             Tensor x = from_vector(std::vector<double>{0.0, 8.0, -8.0, 0.7, -1.3, 2.1}, {2, 3}).to(dt);
             x.requires_grad_();
             return Inputs{x, sample_uniform({2, 3}, dt, 0.0, 1.0), sample_uniform({2, 3}, dt, 0.5, 2.0)};
           },
           [](const Inputs& x) {
             return Inputs{binary_cross_entropy_with_logits(x[0], x[1], x[2], Reduction::Sum)};
           }}};
}

}  // namespace

const OpDef kMseLossOp{"mse_loss", "mse_loss_backward", "self, target", diff_loss_backward, mse_samples, true};
const OpDef kL1LossOp{"l1_loss", "l1_loss_backward", "self, target", diff_loss_backward, l1_samples, true};
const OpDef kSmoothL1LossOp{"smooth_l1_loss", "smooth_l1_loss_backward", "self, target", diff_loss_backward,
                            smooth_l1_samples, true};
const OpDef kBceWithLogitsOp{"binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits_backward",
                             "self, target, pos_weight", bce_backward, bce_samples, true};

namespace {
Tensor diff_loss_op(const OpDef& op, const Tensor& a, const Tensor& b, Reduction reduction, Kind kind, double beta) {
  if (auto c = autocast::to_float32(a, b)) return diff_loss_op(op, c[0], c[1], reduction, kind, beta);
  check_binary_operands(a, b, op.name);
  TG_CHECK(beta >= 0, op.name, ": expected beta >= 0, got ", beta);
  // beta 0 is exactly l1 (as PyTorch 2 routes it; 1.13's own backward gives -g at d == 0, not
  // l1's 0)
  if (kind == Kind::SmoothL1 && beta == 0) kind = Kind::L1;
  Tensor out = pointwise_binary(a, b, op.name, [kind, beta](auto x, auto y) {
    return diff_loss(x - y, kind, static_cast<decltype(x)>(beta));
  });
  if (Recorder rec{op, {a, b}}) {
    rec.save(kInput, a);
    rec.save(kTarget, b);
    rec.set_attrs(DiffLossAttrs{kind, beta});
    rec.set_outputs({out});
  }
  return apply_reduction(out, reduction);
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return diff_loss_op(kMseLossOp, input, target, reduction, Kind::Mse, 0);
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return diff_loss_op(kL1LossOp, input, target, reduction, Kind::L1, 0);
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  return diff_loss_op(kSmoothL1LossOp, input, target, reduction, Kind::SmoothL1, beta);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& pos_weight,
                                        Reduction reduction) {
  if (auto c = autocast::to_float32(input, target, pos_weight))
    return binary_cross_entropy_with_logits(c[0], c[1], c[2], reduction);
  const char* op = "binary_cross_entropy_with_logits";
  check_binary_operands(input, target, op);
  TG_CHECK(input.shape() == target.shape(), op, ": expected target size ", format_shape(target.shape()),
           " to be the same as input size ", format_shape(input.shape()));
  Tensor pw;
  if (pos_weight.defined()) {
    TG_CHECK(pos_weight.dtype() == input.dtype(), op, ": expected pos_weight to have dtype ",
             dtype_name(input.dtype()), ", got ", dtype_name(pos_weight.dtype()));
    TG_CHECK(broadcast_shapes(pos_weight.shape(), input.shape(), "binary_cross_entropy_with_logits: pos_weight") ==
                 input.shape(),
             op, ": pos_weight of shape ",
             format_shape(pos_weight.shape()), " does not broadcast to the input's shape ",
             format_shape(input.shape()));
    pw = pos_weight.detach().expand(input.shape()).contiguous();
  }
  // 16 bits: computed from float32 copies, rounded once.
  const Tensor pww = detail::widen(pw);
  Tensor x = detail::widen(input.detach().contiguous()), y = detail::widen(target.detach().contiguous());
  Tensor out = Tensor::empty(input.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    const T* pp = pww.defined() ? pww.data<T>() : nullptr;
    T* o = out.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T xv = px[i], yv = py[i], p = pp ? pp[i] : T(1);
      const T w = T(1) + (p - T(1)) * yv;
      // (1-y) x + w sp(-x) with sp(-x) = max(-x, 0) + log1p(e^-|x|): for x < 0 the x terms
      // combine first, (1 - y - w) x = -p y x, instead of cancelling after rounding
      o[i] = (xv >= T(0) ? (T(1) - yv) * xv : -(p * yv) * xv) + w * std::log1p(std::exp(-std::abs(xv)));
    }
  });
  out = round_result(out, input.dtype());
  if (Recorder rec{kBceWithLogitsOp, {input, target, pos_weight}}) {
    // input and target themselves (not the contiguous copies, which alias them when they are
    // contiguous) and pos_weight as given, for their history under create_graph; the expanded
    // pos_weight for the kernel.
    rec.save(kInput, input);
    rec.save(kTarget, target);
    if (pw.defined()) rec.save(kPosWeightExpanded, pw);
    if (pos_weight.defined()) rec.save(kPosWeight, pos_weight);
    rec.set_attrs(BceAttrs{pw.defined()});
    rec.set_outputs({out});
  }
  return apply_reduction(out, reduction);
}

Tensor sigmoid_focal_loss(const Tensor& inputs, const Tensor& targets, double alpha, double gamma,
                          Reduction reduction) {
  if (auto c = autocast::to_float32(inputs, targets)) return sigmoid_focal_loss(c[0], c[1], alpha, gamma, reduction);
  // Composed of recorded ops, line for line as torchvision writes it, so that its gradient is
  // exactly theirs (including the (1 - p_t)^gamma factor's own derivative).
  Tensor p = sigmoid(inputs);
  Tensor ce = binary_cross_entropy_with_logits(inputs, targets, Tensor(), Reduction::None);
  Tensor p_t = add(mul(p, targets), mul(rsub(p, 1.0), rsub(targets, 1.0)));
  Tensor loss = mul(ce, pow(rsub(p_t, 1.0), gamma));
  if (alpha >= 0) {
    Tensor alpha_t = add(mul(targets, alpha), mul(rsub(targets, 1.0), 1.0 - alpha));
    loss = mul(alpha_t, loss);
  }
  return apply_reduction(loss, reduction);
}

void register_loss_ops(Registry& r) {
  for (const OpDef* op : {&kMseLossOp, &kL1LossOp, &kSmoothL1LossOp, &kBceWithLogitsOp, &kLog1pExpNegOp}) r.add(*op);
}

}  // namespace tg
