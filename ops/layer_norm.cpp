// layer_norm, after llm.c's layernorm_forward/backward. Shape legend: x viewed as (R, N), R rows
// (the leading dims), N = numel(normalized_shape) normalised together; w, b of N.
//
//   forward:  mean_r = sum x / N,  rstd_r = 1/sqrt(var_r + eps),  xhat = (x - mean) rstd,
//             y = xhat w + b              (saves x, w, mean, rstd: not xhat)
//   backward: dxhat = g w
//             dx    = rstd (dxhat - mean_N(dxhat) - xhat mean_N(dxhat xhat))
//             dw    = sum_r g xhat,  db = sum_r g
// Statistics are accumulated in double (also for float32), two passes for the variance. The
// kernels are in layer_norm_kernels.h / .cpp (one copy per instruction set).
#include "layer_norm.h"
#include "../framework/autocast.h"

#include <utility>
#include <vector>

#include "../framework/recompute.h"
#include "../framework/tape.h"
#include "elementwise.h"
#include "reduce.h"
#include "internal/samples.h"
#include "layer_norm_kernels.h"
#include "unary.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct LayerNormAttrs {
  int64_t N;
  bool has_weight;
  double eps;
};

// layer_norm in recorded ops, for double backward by recomputation (framework/recompute.h):
// the rows of N elements are normalised with their biased variance, then scaled and shifted.
std::vector<Tensor> layer_norm_composite(const std::vector<Tensor>& in, int64_t N, double eps) {
  const Tensor& x = in[0];
  const int64_t R = N == 0 ? 0 : x.numel() / N;
  Tensor rows = x.reshape({R, N});
  Tensor centred = sub(rows, mean(rows, {1}, true));
  Tensor xhat = mul(centred, rsqrt(add(mean(mul(centred, centred), {1}, true), eps))).reshape(x.shape());
  if (in[1].defined()) xhat = mul(xhat, in[1]);
  if (in[2].defined()) xhat = add(xhat, in[2]);
  return {xhat};
}

enum LayerNormSaved { kInput, kWeight, kMean, kRstd };  // kWeight only when there is one

std::vector<Tensor> layer_norm_bw(const BackwardContext& ctx, const std::vector<Tensor>& grads) {
  const LayerNormAttrs a = ctx.attrs<LayerNormAttrs>();
  if (ctx.create_graph()) {
    // The bias is not saved (nothing reads it); y is affine in it, so zeros stand in.
    Tensor bias = ctx.needs_grad(2) ? zeros(ctx.input_shape(2), ctx.input_dtype(2)) : Tensor();
    return recomputed_backward(ctx, {ctx.saved(kInput), a.has_weight ? ctx.saved(kWeight) : Tensor(), bias}, grads,
                               [a](const std::vector<Tensor>& in) { return layer_norm_composite(in, a.N, a.eps); });
  }
  // 16 bits: x, w and g widened to float32, the gradients rounded once to their inputs' dtype.
  const DType dtype = ctx.input_dtype(0);
  const Tensor x = detail::widen(ctx.saved(kInput).contiguous());
  const Tensor w = a.has_weight ? detail::widen(ctx.saved(kWeight).contiguous()) : Tensor();
  const Tensor& mean = ctx.saved(kMean);
  const Tensor& rstd = ctx.saved(kRstd);
  const int64_t N = ctx.attrs<LayerNormAttrs>().N;
  const int64_t R = N == 0 ? 0 : x.numel() / N;
  Tensor g = detail::widen(grads[0].contiguous());
  Tensor dx, dw, db;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pdx = ctx.needs_grad(0) ? (dx = Tensor::empty(x.shape(), x.dtype())).template data<T>() : nullptr;
    T* pdw = ctx.needs_grad(1) ? (dw = Tensor::empty(ctx.input_shape(1), x.dtype())).template data<T>() : nullptr;
    T* pdb = ctx.needs_grad(2) ? (db = Tensor::empty(ctx.input_shape(2), x.dtype())).template data<T>() : nullptr;
    kernels::layer_norm_backward<T>(g.data<T>(), x.data<T>(), w.defined() ? w.data<T>() : nullptr, mean.data<double>(),
                           rstd.data<double>(), pdx, pdw, pdb, R, N);
  });
  for (Tensor* t : {&dx, &dw, &db})
    if (t->defined()) *t = round_result(*t, dtype);
  return {dx, dw, db};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> layer_norm_samples() {
  return {{"[3,5] with weight and bias",
           [](DType dt) { return Inputs{sample_tensor({3, 5}, dt), sample_tensor({5}, dt), sample_tensor({5}, dt)}; },
           [](const Inputs& x) { return Inputs{layer_norm(x[0], {5}, x[1], x[2])}; }},
          {"[2,3,4] over (3,4), no affine", [](DType dt) { return Inputs{sample_tensor({2, 3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{layer_norm(x[0], {3, 4})}; }}};
}

}  // namespace

const OpDef kLayerNormOp{"layer_norm", "layer_norm_backward", "input, weight, bias", layer_norm_bw,
                         layer_norm_samples, true};

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (auto c = autocast::to_float32(x, weight, bias)) return layer_norm(c[0], normalized_shape, c[1], c[2], eps);
  const char* op = "layer_norm";
  TG_CHECK(x.defined(), op, ": the input is undefined");
  TG_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TG_CHECK(k >= 1, op, ": expected a non-empty normalized_shape");
  const Shape tail = x.dim() >= k ? Shape(x.shape().end() - k, x.shape().end()) : Shape();
  TG_CHECK(x.dim() >= k && tail == normalized_shape, op, ": expected input with shape [*, ",
           format_shape(normalized_shape).substr(1), ", got input of shape ", format_shape(x.shape()));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{weight, "weight"}, {bias, "bias"}}) {
    if (!t.defined()) continue;
    TG_CHECK(t.shape() == normalized_shape, op, ": expected ", name, " of shape ", format_shape(normalized_shape),
             ", got ", format_shape(t.shape()));
    TG_CHECK(t.dtype() == x.dtype(), op, ": expected ", name, " to have dtype ", dtype_name(x.dtype()), ", got ",
             dtype_name(t.dtype()));
  }
  TG_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  const int64_t N = shape_numel(normalized_shape);
  const int64_t R = N == 0 ? 0 : x.numel() / N;
  // 16 bits: computed from float32 copies (statistics in double, as for float32), rounded once.
  Tensor xc = detail::widen(x.detach().contiguous());
  Tensor wc = weight.defined() ? detail::widen(weight.detach().contiguous()) : Tensor();
  Tensor bc = bias.defined() ? detail::widen(bias.detach().contiguous()) : Tensor();
  Tensor y = Tensor::empty(x.shape(), xc.dtype());
  Tensor mean = Tensor::empty({R}, DType::Float64), rstd = Tensor::empty({R}, DType::Float64);
  dispatch_floating(xc.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::layer_norm_forward<T>(xc.data<T>(), wc.defined() ? wc.data<T>() : nullptr, bc.defined() ? bc.data<T>() : nullptr,
                          y.data<T>(), mean.data<double>(), rstd.data<double>(), R, N, eps);
  });
  y = round_result(y, x.dtype());
  if (Recorder rec{kLayerNormOp, {x, weight, bias}}) {
    // x and weight themselves (not the contiguous copies) so that create_graph can follow their
    // history; backward makes them contiguous, which costs nothing when they are.
    rec.save(kInput, x);
    if (weight.defined()) rec.save(kWeight, weight);
    rec.save(kMean, mean);
    rec.save(kRstd, rstd);
    rec.set_attrs(LayerNormAttrs{N, wc.defined(), eps});
    rec.set_outputs({y});
  }
  return y;
}

void register_norm_ops(Registry& r) { r.add(kLayerNormOp); }

}  // namespace tg
