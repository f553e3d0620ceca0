// softmax / log_softmax. Shape legend: the input, contiguous, is (outer, D, inner) with D the
// softmax dim; each of the outer * inner lanes is normalised independently. Both save only
// their output y: softmax's derivative is y (g - <g, y>), log_softmax's is g - e^y sum(g).
// The kernels are in softmax_kernels.h / .cpp (one copy per instruction set).
#include "softmax.h"
#include "../framework/autocast.h"

#include "../framework/tape.h"
#include "internal/dim_layout.h"
#include "elementwise.h"
#include "reduce.h"
#include "internal/samples.h"
#include "unary.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct SoftmaxAttrs {
  int64_t dim;
};

// The saved slot of softmax and log_softmax (one enum: both save their output).
enum SoftmaxSaved { kOutput };

std::vector<Tensor> backward_impl(const BackwardContext& ctx, const std::vector<Tensor>& g, bool log) {
  const Tensor y = ctx.saved(kOutput);
  if (ctx.create_graph()) {  // the kernel's formulas in recorded ops
    if (y.dim() == 0) return {mul(g[0], 0.0)};  // one element: softmax 1, log_softmax 0
    const std::vector<int64_t> dim{ctx.attrs<SoftmaxAttrs>().dim};
    if (log) return {sub(g[0], mul(exp(y), sum(g[0], dim, true)))};      // g - e^y sum g
    return {mul(y, sub(g[0], sum(mul(g[0], y), dim, true)))};           // y (g - sum g y)
  }
  DimLayout l = dim_layout(y.shape(), ctx.attrs<SoftmaxAttrs>().dim);
  // 16 bits: g and the saved (16-bit) y widened, the gradient computed in float32, rounded once.
  Tensor gc = detail::widen(g[0].contiguous()), yc = detail::widen(y);
  Tensor dx = Tensor::empty(y.shape(), yc.dtype());
  dispatch_floating(yc.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward<T>(gc.data<T>(), yc.data<T>(), dx.data<T>(), l.outer, l.D, l.inner, log);
  });
  return {round_result(dx, y.dtype())};
}
std::vector<Tensor> softmax_bw(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return backward_impl(ctx, g, false);
}
std::vector<Tensor> log_softmax_bw(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return backward_impl(ctx, g, true);
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> samples(bool log) {
  auto f = [log](const Tensor& x, int64_t dim) { return log ? log_softmax(x, dim) : softmax(x, dim); };
  return {{"[3,5] dim -1", [](DType dt) { return Inputs{sample_tensor({3, 5}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], -1)}; }},
          {"[2,4,3] dim 1 (strided lanes)", [](DType dt) { return Inputs{sample_tensor({2, 4, 3}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], 1)}; }}};
}
std::vector<SampleCase> softmax_samples() { return samples(false); }
std::vector<SampleCase> log_softmax_samples() { return samples(true); }

}  // namespace

const OpDef kSoftmaxOp{"softmax", "softmax_backward", "self", softmax_bw, softmax_samples, true};
const OpDef kLogSoftmaxOp{"log_softmax", "log_softmax_backward", "self", log_softmax_bw, log_softmax_samples,
                            true};

namespace {
Tensor softmax_impl(const OpDef& op, const Tensor& x, int64_t dim_in, bool log) {
  if (auto c = autocast::to_float32(x)) return softmax_impl(op, c[0], dim_in, log);  // framework/autocast.h
  TG_CHECK(x.defined(), op.name, ": the tensor is undefined");
  const int64_t dim = x.dim() == 0 ? 0 : wrap_dim(dim_in, x.dim(), op.name);
  TG_CHECK(x.dim() > 0 || dim_in == 0 || dim_in == -1, op.name, ": dim ", dim_in, " is out of range for a 0-d tensor");
  DimLayout l = dim_layout(x.shape(), dim);
  Tensor xc = detail::widen(x.detach().contiguous());  // 16 bits: computed in float32
  Tensor y = Tensor::empty(x.shape(), xc.dtype());
  dispatch_floating(xc.dtype(), op.name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward<T>(xc.data<T>(), y.data<T>(), l.outer, l.D, l.inner, log);
  });
  y = round_result(y, x.dtype());  // rounded once; the 16-bit y is what backward reads
  if (Recorder rec{op, {x}}) {
    rec.save(kOutput, y);
    rec.set_attrs(SoftmaxAttrs{dim});
    rec.set_outputs({y});
  }
  return y;
}
}  // namespace

Tensor log_softmax_from_output(const Tensor& x, const Tensor& y, int64_t dim_in) {
  TG_CHECK(x.defined() && y.defined() && x.shape() == y.shape() && x.dtype() == y.dtype(),
           "log_softmax_from_output: expected x and y of one shape and dtype");
  const int64_t dim = x.dim() == 0 ? 0 : wrap_dim(dim_in, x.dim(), "log_softmax_from_output");
  Tensor out = y.detach().contiguous();
  if (Recorder rec{kLogSoftmaxOp, {x}}) {
    rec.save(kOutput, out);
    rec.set_attrs(SoftmaxAttrs{dim});
    rec.set_outputs({out});
  }
  return out;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(kSoftmaxOp, x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(kLogSoftmaxOp, x, dim, true); }

void register_softmax_ops(Registry& r) {
  r.add(kSoftmaxOp);
  r.add(kLogSoftmaxOp);
}

}  // namespace tg
