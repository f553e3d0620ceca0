// cross_entropy = log_softmax over the class dim + NLL (+ label smoothing), fused: forward
// saves the log-probabilities and the targets, backward is (p - onehot) per lane.
//
// Shape legend: logits (N, C, K) contiguous, K = product of the trailing dims d1... (1 for
// (N, C)); target (N, K); a "lane" is one (n, k). eps = label_smoothing, valid = target !=
// ignore_index, logp = log_softmax(logits) over C:
//   nll_i    = -logp[t_i]                 (0 when ignored)
//   smooth_i = -sum_c logp[c]             (0 when ignored)
//   loss_i   = (1 - eps) nll_i + eps / C smooth_i
// PyTorch's mean: both terms are divided by #valid, the number of targets that are not
// ignore_index (checked against torch 1.13 by the golden fixtures); all ignored: NaN.
// d loss_i / d logit_c = a_i (p_c - [c == t_i]) + b_i (C p_c - 1), with a_i, b_i the weights
// of the two terms times the incoming gradient.
//
// Double backward: with W[i, c] = a_i [c == t_i] + b_i (the weights above without the incoming
// gradient, 0 on ignored lanes), loss_i = -sum_c W[i, c] logp[i, c] and its gradient is
// g_i (p W_i - W) with W_i = sum_c W[i, c]. Under create_graph that is spelled in recorded ops
// from logp recorded as log_softmax of the logits (log_softmax_from_output: the logits'
// values are not needed, so they are not saved), twice differentiable through log_softmax.
// The loops over lanes are kernels in softmax_kernels.h / .cpp (one copy per instruction set).
#include <algorithm>

#include "../framework/tape.h"
#include "../framework/autocast.h"
#include "elementwise.h"
#include "loss.h"
#include "reduce.h"
#include "internal/samples.h"
#include "softmax.h"
#include "unary.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct CrossEntropyAttrs {
  Reduction reduction;
  int64_t ignore_index;
  double eps;
  double nll_denominator;     // #valid for mean, else 1
  double smooth_denominator;  // #valid for mean, else 1
};

// The recorded backward (create_graph): g (p sum_c W - W), see the top of the file.
std::vector<Tensor> recorded_backward(const BackwardContext& ctx, const Tensor& grad, const Tensor& logp_saved,
                                      const Tensor& target) {
  const auto a = ctx.attrs<CrossEntropyAttrs>();
  const Tensor logp = logp_saved.detach();
  const int64_t N = logp.size(0), C = logp.size(1), K = logp.numel() / std::max<int64_t>(N * C, 1);
  Tensor w = zeros(logp.shape(), logp.dtype());
  dispatch_all_floating(logp.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* t = target.data<int64_t>();
    T* pw = w.data<T>();
    for (int64_t l = 0; l < N * K; ++l) {
      if (t[l] == a.ignore_index) continue;
      const int64_t n = l / K, k = l % K;
      T* wl = pw + n * C * K + k;
      const double b = a.eps / static_cast<double>(C) / a.smooth_denominator;
      if (b != 0)
        for (int64_t c = 0; c < C; ++c) wl[c * K] = static_cast<T>(b);
      wl[t[l] * K] = static_cast<T>((1.0 - a.eps) / a.nll_denominator + b);
    }
  });
  // logp as log_softmax of the logits: the logits' history on logp's values (of its shape).
  const Tensor logits = ctx.input_history(0, logp.reshape(ctx.input_shape(0))).reshape(logp.shape());
  const Tensor lp = log_softmax_from_output(logits, logp, 1);
  const Tensor w_sum = sum(w, {1}, /*keepdim=*/true);
  Shape lane_shape = logp.shape();
  lane_shape[1] = 1;
  const Tensor g = a.reduction == Reduction::None ? grad.reshape(lane_shape) : grad;  // else 0-d
  const Tensor dx = mul(g, sub(mul(exp(lp), w_sum), w));
  return {dx.reshape(ctx.input_shape(0))};
}

enum CrossEntropySaved { kLogProbs, kTarget };

std::vector<Tensor> cross_entropy_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto a = ctx.attrs<CrossEntropyAttrs>();
  const Tensor& logp = ctx.saved(kLogProbs);
  const Tensor& target = ctx.saved(kTarget);
  if (ctx.create_graph()) return recorded_backward(ctx, g[0], logp, target);
  const int64_t N = logp.size(0), C = logp.size(1), K = logp.numel() / std::max<int64_t>(N * C, 1);
  // 16 bits: the saved (16-bit) logp and g widened, the gradient rounded once.
  const Tensor lp = detail::widen(logp), gc = detail::widen(g[0].contiguous());
  Tensor dx = Tensor::empty(logp.shape(), lp.dtype());
  dispatch_floating(lp.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cross_entropy_backward<T>(lp.data<T>(), target.data<int64_t>(), gc.data<T>(),
                                       a.reduction == Reduction::None, N, C, K, a.ignore_index,
                                       (1.0 - a.eps) / a.nll_denominator,
                                       a.eps / static_cast<double>(C) / a.smooth_denominator,
                                       dx.data<T>());
  });
  return {round_result(dx, logp.dtype()).reshape(ctx.input_shape(0))};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> cross_entropy_samples() {
  auto targets = [](std::vector<int64_t> v, Shape s) { return from_vector(v, s); };
  return {{"(4,5) mean",
           [](DType dt) { return Inputs{sample_tensor({4, 5}, dt)}; },
           [targets](const Inputs& x) { return Inputs{cross_entropy(x[0], targets({1, 0, 4, 2}, {4}))}; }},
          {"(2,3,2,2) none, ignore_index 1, smoothing 0.2",
           [](DType dt) { return Inputs{sample_tensor({2, 3, 2, 2}, dt)}; },
           [targets](const Inputs& x) {
             CrossEntropyOptions o{Reduction::None, 1, 0.2};
             return Inputs{cross_entropy(x[0], targets({0, 1, 2, 2, 1, 0, 0, 2}, {2, 2, 2}), o)};
           }},
          {"(3,4) mean, ignore_index 3, smoothing 0.1",
           [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [targets](const Inputs& x) {
             CrossEntropyOptions o{Reduction::Mean, 3, 0.1};
             return Inputs{cross_entropy(x[0], targets({3, 0, 2}, {3}), o)};
           }},
          {"(3,4) sum", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [targets](const Inputs& x) {
             CrossEntropyOptions o{Reduction::Sum, -100, 0.0};
             return Inputs{cross_entropy(x[0], targets({3, 0, 2}, {3}), o)};
           }},
          {"(5) unbatched, none, smoothing 0.3", [](DType dt) { return Inputs{sample_tensor({5}, dt)}; },
           [](const Inputs& x) {
             CrossEntropyOptions o{Reduction::None, -100, 0.3};
             return Inputs{cross_entropy(x[0], from_vector(std::vector<int64_t>{2}, {}), o)};
           }}};
}

}  // namespace

const OpDef kCrossEntropyOp{"cross_entropy", "cross_entropy_backward", "self", cross_entropy_backward,
                            cross_entropy_samples, true};

namespace {

// Class probabilities as the target (PyTorch's second form), from recorded ops: the loss of
// each lane is -sum_c t_c log_softmax(logits)_c, with t smoothed to t (1 - eps) + eps / C;
// Mean divides by the lanes (every one counts: there is no ignore_index here). Gradients flow
// to the logits and the target.
Tensor cross_entropy_probabilities(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  TG_CHECK(target.shape() == logits.shape(), op, ": expected target to hold int64 class indices, or class ",
           "probabilities of the logits' shape ", format_shape(logits.shape()), "; got a ", dtype_name(target.dtype()),
           " target of shape ", format_shape(target.shape()));
  TG_CHECK(target.dtype() == logits.dtype(), op, ": expected a target of class probabilities of the logits' dtype ",
           dtype_name(logits.dtype()), ", got ", dtype_name(target.dtype()));
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1, C = logits.size(class_dim);
  Tensor t = target;
  if (o.label_smoothing > 0) t = add(mul(target, 1.0 - o.label_smoothing), o.label_smoothing / double(C));
  Tensor lanes = neg(sum(mul(t, log_softmax(logits, class_dim)), {class_dim}));
  switch (o.reduction) {
    case Reduction::None: return lanes;
    case Reduction::Sum: return sum(lanes);
    case Reduction::Mean: return mean(lanes);
  }
  return lanes;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  // framework/autocast.h (a target of class probabilities too; int64 indices are left as they are)
  if (auto c = autocast::to_float32(logits, target)) return cross_entropy(c[0], c[1], o);
  const char* op = "cross_entropy";
  TG_CHECK(logits.defined() && target.defined(), op, ": expected defined logits and target");
  TG_CHECK(is_floating(logits.dtype()), op, ": expected floating logits, got ", dtype_name(logits.dtype()));
  TG_CHECK(logits.dim() >= 1, op, ": expected logits of shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor");
  TG_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op,
           ": expected label_smoothing in [0, 1], got ", o.label_smoothing);
  if (is_floating(target.dtype())) return cross_entropy_probabilities(logits, target, o);
  TG_CHECK(target.dtype() == DType::Int64, op, ": expected target to hold int64 class indices, got ",
           dtype_name(target.dtype()));
  // (C) with a 0-d target is one lane: (1, C) with target (1).
  const bool unbatched = logits.dim() == 1;
  Shape expected_target;
  if (unbatched) {
    expected_target = {};
  } else {
    expected_target.push_back(logits.size(0));
    for (int64_t d = 2; d < logits.dim(); ++d) expected_target.push_back(logits.size(d));
  }
  TG_CHECK(target.shape() == expected_target, op, ": expected target of shape ", format_shape(expected_target),
           " for logits of shape ", format_shape(logits.shape()), ", got ", format_shape(target.shape()));

  // 16 bits: log_softmax and the lane losses from a float32 copy; the loss is rounded once, and
  // logp is saved rounded to the logits' dtype (as PyTorch saves its 16-bit log_softmax).
  const DType dtype = logits.dtype();
  Tensor x = detail::widen(logits.detach().contiguous());
  if (unbatched) x = x.reshape({1, logits.size(0)});
  const int64_t N = x.size(0), C = x.size(1), K = x.numel() / std::max<int64_t>(N * C, 1);
  Tensor t = target.detach().contiguous();
  const int64_t* tp = t.data<int64_t>();
  const int64_t lanes = N * K;
  int64_t valid = 0;
  for (int64_t l = 0; l < lanes; ++l) {  // validated before any read indexed by a target
    if (tp[l] == o.ignore_index) continue;
    TG_CHECK(tp[l] >= 0 && tp[l] < C, op, ": target ", tp[l], " is out of bounds for ", C, " classes");
    ++valid;
  }

  Tensor logp = Tensor::empty(x.shape(), x.dtype());
  const double eps = o.label_smoothing;
  std::vector<double> nll(lanes), smooth(lanes);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward<T>(x.data<T>(), logp.data<T>(), N, C, K, /*log=*/true);
    kernels::cross_entropy_lane_losses<T>(logp.data<T>(), tp, N, C, K, o.ignore_index, eps > 0,
                                          nll.data(), smooth.data());
  });

  Tensor out;
  CrossEntropyAttrs attrs{o.reduction, o.ignore_index, eps, 1.0, 1.0};
  if (o.reduction == Reduction::None) {
    Tensor flat = Tensor::empty({lanes}, dtype);
    dispatch_all_floating(dtype, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using M = opmath_t<T>;
      T* p = flat.data<T>();
      for (int64_t l = 0; l < lanes; ++l)
        p[l] = static_cast<T>(static_cast<M>((1.0 - eps) * nll[l] + eps / C * smooth[l]));
    });
    out = flat.reshape(target.shape());
  } else {
    double nll_sum = 0, smooth_sum = 0;  // in lane order: deterministic
    for (int64_t l = 0; l < lanes; ++l) {
      nll_sum += nll[l];
      smooth_sum += smooth[l];
    }
    if (o.reduction == Reduction::Mean) {
      attrs.nll_denominator = static_cast<double>(valid);  // 0 valid: 0/0 = NaN, as PyTorch
      attrs.smooth_denominator = static_cast<double>(valid);
    }
    double value = (1.0 - eps) * nll_sum / attrs.nll_denominator;
    if (eps > 0) value += eps / C * smooth_sum / attrs.smooth_denominator;
    out = detail::full_unchecked({}, value, dtype);  // an overflowing 16-bit loss is inf
  }
  logp = round_result(logp, dtype);
  if (Recorder rec{kCrossEntropyOp, {logits}}) {
    rec.save(kLogProbs, logp);
    rec.save(kTarget, t);
    rec.set_attrs(attrs);
    rec.set_outputs({out});
  }
  return out;
}

void register_cross_entropy_ops(Registry& r) { r.add(kCrossEntropyOp); }

}  // namespace tg
