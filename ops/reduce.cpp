// Reductions. Shape legend: the reduced dims are moved last so that the input is an
// (outer, R) matrix; each output element is one row's reduction, summed in double.
//
//   sum:   out = sum_r x        dx = g broadcast over the reduced dims
//   mean:  out = sum_r x / R    dx = g / R broadcast
// An integer sum (int64 or int32, e.g. of a comparison's 0/1) is int64, as PyTorch's; integer
// mean is an error, as in PyTorch.
// The kernels (sum, var, min / max) are in reduce_kernels.h / .cpp (one copy per instruction set).
#include "reduce.h"

#include <algorithm>

#include "../framework/tape.h"
#include "elementwise.h"
#include "internal/samples.h"
#include "reduce_kernels.h"
#include "internal/reduced_float.h"

namespace tg {

std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, x.dim(), op));
  std::sort(out.begin(), out.end());
  TG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim appears more than once in ",
           format_shape(dims));
  if (x.dim() == 0) out.clear();
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor reduced_dims_last(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> order;
  int64_t reduced = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
  for (int64_t d : dims) {
    order.push_back(d);
    reduced *= x.size(d);
  }
  Tensor p = x.detach().permute(order).contiguous();
  return p.reshape({reduced == 0 ? 0 : x.numel() / std::max<int64_t>(reduced, 1), reduced});
}

namespace {

struct ReduceAttrs {
  std::vector<int64_t> dims;
  bool keepdim;
  double scale;  // 1 for sum, 1/R for mean
};

// The (outer, R) sizes of a reduction over dims: the elements kept, the elements each one sums.
// From the shape, not numel / R: an empty tensor still has its rows (a sum over a zero-size dim
// is a row of zeros for every kept element).
std::pair<int64_t, int64_t> rows_of(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t R = 1;
  for (int64_t d : dims) R *= x.size(d);
  return {shape_numel(reduced_shape(x.shape(), dims, false)), R};
}

// An integer sum, as PyTorch's: int64 whatever the integer input (int32 too), wrapping around on
// overflow (two's complement, no UB: the adds are unsigned), exact otherwise. Rows in order.
Tensor sum_rows_integer(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor m = reduced_dims_last(detail::convert(x, DType::Int64), dims);
  const auto [outer, R] = rows_of(x, dims);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), DType::Int64);
  const int64_t* in = m.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < outer; ++r) {
    uint64_t acc = 0;
    for (int64_t i = 0; i < R; ++i) acc += static_cast<uint64_t>(in[r * R + i]);
    o[r] = static_cast<int64_t>(acc);
  }
  return out;
}

Tensor sum_rows(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, double scale) {
  // 16 bits: summed (in double, as float32 is) from a float32 copy, rounded once.
  if (is_reduced_floating(x.dtype()))
    return round_result(sum_rows(detail::widen(x), dims, keepdim, scale), x.dtype());
  Tensor m = reduced_dims_last(x, dims);
  const std::pair<int64_t, int64_t> rows = rows_of(x, dims);  // (no structured binding: the lambda uses them)
  const int64_t outer = rows.first, R = rows.second;
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), x.dtype());
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::sum_rows<T>(m.data<T>(), out.data<T>(), outer, R, scale);
  });
  return out;
}

std::vector<Tensor> sum_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<ReduceAttrs>();
  const Shape& in_shape = ctx.input_shape(0);
  Tensor grad = g[0];
  if (a.scale != 1.0) grad = mul(grad, a.scale);
  // Put the reduced dims back as size-1 dims, then broadcast over them.
  grad = grad.reshape(reduced_shape(in_shape, a.dims, /*keepdim=*/true));
  return {grad.expand(in_shape).contiguous()};
}

Tensor reduce(const OpDef& op, const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim, bool is_mean) {
  TG_CHECK(x.defined(), op.name, ": the tensor is undefined");
  // mean of integers is an error in PyTorch too ("could not infer output dtype").
  TG_CHECK(is_floating(x.dtype()) || !is_mean, op.name, ": expected a floating tensor, got ", dtype_name(x.dtype()),
           " (convert it first: x.to(tg::DType::Float32))");
  std::vector<int64_t> dims = reduction_dims(x, dims_in, op.name);
  if (!is_floating(x.dtype())) return sum_rows_integer(x, dims, keepdim);  // never requires grad
  int64_t R = 1;
  for (int64_t d : dims) R *= x.size(d);
  double scale = is_mean ? 1.0 / static_cast<double>(R) : 1.0;  // mean of nothing is NaN, as in PyTorch
  Tensor out = sum_rows(x, dims, keepdim, scale);
  if (Recorder rec{op, {x}}) {
    rec.set_attrs(ReduceAttrs{dims, keepdim, scale});
    rec.set_outputs({out});
  }
  return out;
}

using Inputs = std::vector<Tensor>;

std::vector<SampleCase> reduce_samples(bool is_mean) {
  auto f = [is_mean](const Tensor& x, std::vector<int64_t> dims, bool keep) {
    return is_mean ? mean(x, dims, keep) : sum(x, dims, keep);
  };
  return {{"[3,4] all", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], {}, false)}; }},
          {"[2,3,4] dim 1 keepdim", [](DType dt) { return Inputs{sample_tensor({2, 3, 4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], {1}, true)}; }},
          {"[2,3,4] dims (0,2)", [](DType dt) { return Inputs{sample_tensor({2, 3, 4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], {0, -1}, false)}; }}};
}
std::vector<SampleCase> sum_samples() { return reduce_samples(false); }
std::vector<SampleCase> mean_samples() { return reduce_samples(true); }

}  // namespace

const OpDef kSumOp{"sum", "sum_backward", "self", sum_backward, sum_samples, true};
const OpDef kMeanOp{"mean", "mean_backward", "self", sum_backward, mean_samples, true};

Tensor sum(const Tensor& x) { return reduce(kSumOp, x, {}, false, false); }
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(kSumOp, x, dims, keepdim, false);
}
Tensor mean(const Tensor& x) { return reduce(kMeanOp, x, {}, false, true); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(kMeanOp, x, dims, keepdim, true);
}

void register_reduce_ops(Registry& r) {
  r.add(kSumOp);
  r.add(kMeanOp);
}

}  // namespace tg
