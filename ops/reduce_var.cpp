// var. Shape legend: the reduced dims moved last, x is an (outer, R) matrix; per row, in double:
//   mean = sum x / R,  var = sum (x - mean)^2 / max(R - correction, 0)   (as PyTorch: Inf, or
//                      NaN for no elements, where the correction leaves no degree of freedom)
//   dx   = g * 2 (x - mean) / (R - correction)          (saves x; the mean is recomputed)
// Under create_graph dx is the same formula in recorded ops (sub, mean, mul), from x itself
// (saved with its history), so var is twice differentiable.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "../framework/tape.h"
#include "elementwise.h"
#include "reduce.h"
#include "reduce_kernels.h"
#include "internal/samples.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct VarAttrs {
  std::vector<int64_t> dims;
  double correction;
};

enum VarSaved { kInput };

std::vector<Tensor> var_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<VarAttrs>();
  const Tensor x = ctx.saved(kInput);
  if (ctx.create_graph()) {
    int64_t R = 1;
    for (int64_t d : a.dims) R *= x.size(d);
    const double denom = static_cast<double>(R) - a.correction;
    const Tensor centered = x.dim() == 0 ? sub(x, x) : sub(x, mean(x, a.dims, /*keepdim=*/true));
    const Tensor gk = g[0].reshape(reduced_shape(x.shape(), a.dims, /*keepdim=*/true));
    return {mul(mul(centered, gk), 2.0 / denom)};
  }
  Tensor m = detail::widen(reduced_dims_last(x, a.dims));  // 16 bits: computed in float32
  const int64_t R = std::max<int64_t>(m.dim() == 2 ? m.size(1) : 1, 1);
  const int64_t outer = x.numel() / R;
  Tensor gc = detail::widen(g[0].contiguous());
  Tensor dm = Tensor::empty(m.shape(), m.dtype());
  dispatch_floating(m.dtype(), "var_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::var_backward<T>(gc.data<T>(), m.data<T>(), dm.data<T>(), outer, R, a.correction);
  });
  dm = round_result(dm, x.dtype());  // rounded once
  // Undo reduced_dims_last's permutation.
  std::vector<int64_t> order, permuted_shape;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(a.dims.begin(), a.dims.end(), d) == a.dims.end()) order.push_back(d);
  order.insert(order.end(), a.dims.begin(), a.dims.end());
  for (int64_t d : order) permuted_shape.push_back(x.size(d));
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return {dm.reshape(permuted_shape).permute(inverse).contiguous()};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> var_samples() {
  return {{"[3,4] all, unbiased", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{var(x[0])}; }},
          {"[2,3,4] dims (0,2) correction 0 keepdim", [](DType dt) { return Inputs{sample_tensor({2, 3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{var(x[0], {0, 2}, 0.0, true)}; }},
          {"[3,5] dim 1", [](DType dt) { return Inputs{sample_tensor({3, 5}, dt)}; },
           [](const Inputs& x) { return Inputs{var(x[0], {1})}; }},
          {"[4,3] transposed (strided), dim 1", [](DType dt) { return Inputs{sample_tensor({4, 3}, dt)}; },
           [](const Inputs& x) { return Inputs{var(x[0].transpose(0, 1), {1})}; }}};
}

}  // namespace

const OpDef kVarOp{"var", "var_backward", "self", var_backward, var_samples, true};

Tensor var(const Tensor& x, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  TG_CHECK(x.defined(), "var: the tensor is undefined");
  TG_CHECK(is_floating(x.dtype()), "var: expected a floating tensor, got ", dtype_name(x.dtype()));
  std::vector<int64_t> dims = reduction_dims(x, dims_in, "var");
  // 16 bits: the rows widened to float32 (statistics in double, as for float32), rounded once.
  Tensor m = detail::widen(x.dim() == 0 ? x.detach().reshape({1, 1}) : reduced_dims_last(x, dims));
  const int64_t R = std::max<int64_t>(m.size(1), 1);
  const int64_t outer = m.size(1) == 0 ? 0 : x.numel() / R;
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), m.dtype());
  if (m.size(1) == 0) detail::raw_fill_(out, std::nan(""));  // no elements: 0 / 0, as in PyTorch
  dispatch_floating(m.dtype(), "var", [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::var_rows<T>(m.data<T>(), out.data<T>(), outer, R, correction);
  });
  out = round_result(out, x.dtype());
  if (Recorder rec{kVarOp, {x}}) {
    rec.save(kInput, x);  // x itself, for its history under create_graph; backward reads any strides
    rec.set_attrs(VarAttrs{dims, correction});
    rec.set_outputs({out});
  }
  return out;
}

void register_var_ops(Registry& r) { r.add(kVarOp); }

}  // namespace tg
