// max / min / argmax / argmin. Shape legend: the reduced dim moved last, x is an (outer, R)
// matrix; each row yields its extreme and the index of its first occurrence (a NaN is the
// extreme, as in PyTorch).
//
//   max over a dim:  dx = g scattered to the saved indices          (saves the indices)
//   max over all:    dx = g / k at each of the k elements equal to the max  (saves x and the max)
//
// Both are linear in g with weights that are constant almost everywhere in x, so they are twice
// differentiable: the scatter is a recorded op whose backward gathers at the same indices, and
// under create_graph max_all's gradient is g times a constant 0/(1/k) mask.

#include "../framework/tape.h"
#include "elementwise.h"
#include "index.h"
#include "reduce.h"
#include "reduce_kernels.h"
#include "internal/samples.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct DimAttrs {
  int64_t dim;
  bool keepdim;
};

struct Extremes {
  Tensor values, indices;  // shapes with the dim kept (size 1)
};

Extremes extremes(const Tensor& x, int64_t dim, bool is_max, bool want_values, const char* op) {
  TG_CHECK(x.dim() > 0, op, ": expected a tensor with at least one dimension (use the all-element form)");
  Tensor m = reduced_dims_last(x, {dim});
  const int64_t R = x.size(dim);
  TG_CHECK(R > 0, op, ": cannot reduce over a zero-size dimension ", dim, " of shape ", format_shape(x.shape()));
  const int64_t outer = x.numel() / R;
  Shape keep = reduced_shape(x.shape(), {dim}, true);
  // The kernels know float, double and int64: a 16-bit tensor is searched as float32 and an int32
  // one as int64 (both exact), the values converted back.
  if (is_reduced_floating(x.dtype()) || x.dtype() == DType::Int32) {
    const DType wide = x.dtype() == DType::Int32 ? DType::Int64 : DType::Float32;
    Extremes e = extremes(detail::convert(x, wide), dim, is_max, want_values, op);
    if (want_values) e.values = round_result(e.values, x.dtype());
    return e;
  }
  Extremes e;
  e.indices = Tensor::empty(keep, DType::Int64);
  if (want_values) e.values = Tensor::empty(keep, x.dtype());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::row_extremes<T>(m.data<T>(), outer, R, is_max, want_values ? e.values.data<T>() : nullptr,
                    e.indices.data<int64_t>());
  };
  if (x.dtype() == DType::Int64) run(TypeTag<int64_t>{});
  else dispatch_floating(x.dtype(), op, run);
  return e;
}

enum DimMinMaxSaved { kIndices };

std::vector<Tensor> dim_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto a = ctx.attrs<DimAttrs>();
  const Tensor& idx = ctx.saved(kIndices);  // keepdim shape
  return {scatter_add_along(ctx.input_shape(0), a.dim, idx, g[0].reshape(idx.shape()))};
}

// max_all's gradient: `total` shared equally by the k elements equal to the extreme (NaN
// counting as equal to a NaN extreme), 0 elsewhere; total undefined: 1, the weights alone.
Tensor spread_over_extremes(const Tensor& x, const Tensor& best, const Tensor& total) {
  if (is_reduced_floating(x.dtype()))  // float32 (exact copies), the shares rounded once
    return round_result(spread_over_extremes(detail::widen(x), detail::widen(best), detail::widen(total)),
                           x.dtype());
  Tensor w = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "max_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T t = total.defined() ? *total.contiguous().data<T>() : T(1);
    kernels::extreme_weights<T>(x.data<T>(), x.numel(), *best.data<T>(), t, w.data<T>());
  });
  return w;
}

enum AllMinMaxSaved { kInput, kOutput };

std::vector<Tensor> all_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor x = ctx.saved(kInput).detach();
  const Tensor best = ctx.saved(kOutput).detach();
  if (ctx.create_graph())  // g (a scalar) times constant weights: differentiable in g
    return {mul(g[0].expand(x.shape()), spread_over_extremes(x, best, Tensor()))};
  return {spread_over_extremes(x, best, g[0])};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> samples(bool is_max) {
  auto f = [is_max](const Tensor& x, int64_t dim, bool keep) {
    return is_max ? max(x, dim, keep).values : min(x, dim, keep).values;
  };
  // Distinct values: no finite-difference step moves the extreme to another element.
  return {{"[3,4] dim 1", [](DType dt) { return Inputs{sample_distinct({3, 4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], 1, false)}; }},
          {"[2,3,4] dim 0 keepdim", [](DType dt) { return Inputs{sample_distinct({2, 3, 4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], 0, true)}; }},
          {"[2,3,4] dim -1, transposed input", [](DType dt) { return Inputs{sample_distinct({2, 4, 3}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0].transpose(1, 2), -1, false)}; }}};
}
std::vector<SampleCase> all_samples(bool is_max) {
  auto all = [is_max](const Tensor& x) { return is_max ? max(x) : min(x); };
  return {{"[3,4] all", [](DType dt) { return Inputs{sample_distinct({3, 4}, dt)}; },
           [all](const Inputs& x) { return Inputs{all(x[0])}; }},
          // x (x + 2) = (x + 1)^2 - 1 keeps sample_distinct's values (all above -1) distinct.
          {"[2,3] all of x (x + 2) (the gradient depends on x)",
           [](DType dt) { return Inputs{sample_distinct({2, 3}, dt)}; },
           [all](const Inputs& x) { return Inputs{all(mul(x[0], add(x[0], 2.0)))}; }}};
}
std::vector<SampleCase> max_samples() { return samples(true); }
std::vector<SampleCase> min_samples() { return samples(false); }
std::vector<SampleCase> max_all_samples() { return all_samples(true); }
std::vector<SampleCase> min_all_samples() { return all_samples(false); }

}  // namespace

const OpDef kMaxDimOp{"max", "max_backward", "self", dim_backward, max_samples, true};
const OpDef kMinDimOp{"min", "min_backward", "self", dim_backward, min_samples, true};
const OpDef kMaxAllOp{"max_all", "max_all_backward", "self", all_backward, max_all_samples, true};
const OpDef kMinAllOp{"min_all", "min_all_backward", "self", all_backward, min_all_samples, true};

namespace {
void check_input(const Tensor& x, const char* op) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
}

ValuesIndices extreme_dim(const OpDef& op, const Tensor& x, int64_t dim_in, bool keepdim, bool is_max) {
  check_input(x, op.name);
  TG_CHECK(is_floating(x.dtype()) || !x.requires_grad(), op.name, ": int64 tensors are not differentiable");
  if (x.dim() == 0) {  // as PyTorch: dim 0 or -1 of a 0-d tensor is its one element (a view of it)
    wrap_dim(dim_in, 1, op.name);
    return extreme_dim(op, x.reshape({1}), 0, false, is_max);
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), op.name);
  Extremes e = extremes(x, dim, is_max, true, op.name);
  Shape out = reduced_shape(x.shape(), {dim}, keepdim);
  ValuesIndices r{e.values.reshape(out), e.indices.reshape(out)};
  if (is_floating(x.dtype())) {
    if (Recorder rec{op, {x}}) {
      rec.save(kIndices, e.indices);
      rec.set_attrs(DimAttrs{dim, keepdim});
      rec.set_outputs({r.values});
    }
  }
  return r;
}

Tensor extreme_all(const OpDef& op, const Tensor& x, bool is_max) {
  const char* name = is_max ? "max" : "min";  // the user's call, not the tape's op name (max_all)
  check_input(x, name);
  // PyTorch: "max(): Expected reduction dim to be specified for input.numel() == 0."
  TG_CHECK(x.numel() > 0, name, ": expected a non-empty tensor, got shape ", format_shape(x.shape()),
           " (the reduction has no identity; give a dim to reduce over)");
  Tensor flat = x.detach().contiguous().reshape({x.numel()});
  Extremes e = extremes(flat, 0, is_max, true, op.name);
  Tensor value = e.values.reshape({});
  if (is_floating(x.dtype())) {
    if (Recorder rec{op, {x}}) {
      rec.save(kInput, x.detach().contiguous());
      rec.save(kOutput, value);
      rec.set_outputs({value});
    }
  }
  return value;
}

Tensor arg_extreme(const Tensor& x, int64_t dim_in, bool keepdim, bool is_max, const char* op) {
  check_input(x, op);
  if (x.dim() == 0) {
    wrap_dim(dim_in, 1, op);
    return arg_extreme(x.reshape({1}), 0, false, is_max, op);
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  return extremes(x.detach(), dim, is_max, false, op).indices.reshape(reduced_shape(x.shape(), {dim}, keepdim));
}
}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(kMaxDimOp, x, dim, keepdim, true); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(kMinDimOp, x, dim, keepdim, false); }
Tensor max(const Tensor& x) { return extreme_all(kMaxAllOp, x, true); }
Tensor min(const Tensor& x) { return extreme_all(kMinAllOp, x, false); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_extreme(x, dim, keepdim, true, "argmax"); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_extreme(x, dim, keepdim, false, "argmin"); }
Tensor argmax(const Tensor& x) {
  check_input(x, "argmax");
  return argmax(x.detach().contiguous().reshape({x.numel()}), 0);
}
Tensor argmin(const Tensor& x) {
  check_input(x, "argmin");
  return argmin(x.detach().contiguous().reshape({x.numel()}), 0);
}

void register_minmax_ops(Registry& r) {
  for (const OpDef* op : {&kMaxDimOp, &kMinDimOp, &kMaxAllOp, &kMinAllOp}) r.add(*op);
}

}  // namespace tg
