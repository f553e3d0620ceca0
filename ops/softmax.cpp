// softmax / log_softmax. Shape legend: the input, contiguous, is (outer, D, inner) with D the
// softmax dim; each of the outer * inner lanes is normalised independently. Both save only
// their output y: softmax's derivative is y (g - <g, y>), log_softmax's is g - e^y sum(g).
#include "softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../framework/parallel.h"
#include "../framework/tape.h"
#include "internal/dim_layout.h"
#include "elementwise.h"
#include "reduce.h"
#include "internal/samples.h"
#include "unary.h"
#include "internal/vec_math.h"

namespace tg {

namespace {

// One lane: D elements `stride` apart. The kernels call these with a literal stride of 1 for
// the common softmax over the last dim (inner = 1): inlined, the loops are then contiguous and
// vectorise; GCC's own stride-1 versioning of the general loops did not vectorise the
// reductions.
template <class T>
[[gnu::always_inline]] inline void softmax_lane(const T* xl, T* yl, int64_t D, int64_t stride, bool log) {
  T m = max_of(D, [xl, stride](int64_t d) { return xl[d * stride]; });
  if (std::isinf(m) && m < 0) m = 0;  // all -inf: avoid (-inf) - (-inf)
  // exp in T (one call per element, kept in y), the sum in double.
  for (int64_t d = 0; d < D; ++d) yl[d * stride] = vec_exp(xl[d * stride] - m);
  const double s = sum_in_double(D, [yl, stride](int64_t d) { return static_cast<double>(yl[d * stride]); });
  if (log) {
    // (x - m) - log(s), not x - (m + log s): with large logits m + log s would round away
    // the small log-probabilities (catastrophic cancellation in float32).
    const T log_s = static_cast<T>(std::log(s));
    for (int64_t d = 0; d < D; ++d) yl[d * stride] = (xl[d * stride] - m) - log_s;
  } else {
    const T inv = static_cast<T>(1.0 / s);
    for (int64_t d = 0; d < D; ++d) yl[d * stride] *= inv;
  }
}

template <class T>
[[gnu::always_inline]] inline void softmax_lane_backward(const T* gl, const T* yl, T* dl, int64_t D, int64_t stride,
                                                         bool log) {
  if (log) {
    const double s = sum_in_double(D, [gl, stride](int64_t d) { return static_cast<double>(gl[d * stride]); });
    // e^y into dx first: a loop that mixes the float exp with double arithmetic does not vectorise.
    for (int64_t d = 0; d < D; ++d) dl[d * stride] = vec_exp(yl[d * stride]);
    for (int64_t d = 0; d < D; ++d) dl[d * stride] = static_cast<T>(gl[d * stride] - dl[d * stride] * s);
  } else {
    const double s = sum_in_double(
        D, [gl, yl, stride](int64_t d) { return static_cast<double>(gl[d * stride]) * yl[d * stride]; });
    for (int64_t d = 0; d < D; ++d) dl[d * stride] = static_cast<T>(yl[d * stride] * (gl[d * stride] - s));
  }
}

}  // namespace

template <class T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  const int64_t lanes = outer * inner;
#pragma omp parallel for schedule(static) if (lanes > 1 && lanes * D >= kParallelGrain)
  for (int64_t l = 0; l < lanes; ++l) {
    const int64_t o = l / inner, i = l % inner;
    const T* xl = x + o * D * inner + i;
    T* yl = y + o * D * inner + i;
    if (inner == 1) softmax_lane(xl, yl, D, 1, log);
    else softmax_lane(xl, yl, D, inner, log);
  }
}

template <class T>
void softmax_backward(const T* g, const T* y, T* dx, int64_t outer, int64_t D, int64_t inner, bool log) {
  const int64_t lanes = outer * inner;
#pragma omp parallel for schedule(static) if (lanes > 1 && lanes * D >= kParallelGrain)
  for (int64_t l = 0; l < lanes; ++l) {
    const int64_t o = l / inner, i = l % inner;
    const int64_t base = o * D * inner + i;
    if (inner == 1) softmax_lane_backward(g + base, y + base, dx + base, D, 1, log);
    else softmax_lane_backward(g + base, y + base, dx + base, D, inner, log);
  }
}

template void softmax_forward<float>(const float*, float*, int64_t, int64_t, int64_t, bool);
template void softmax_forward<double>(const double*, double*, int64_t, int64_t, int64_t, bool);
template void softmax_backward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool);
template void softmax_backward<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, bool);

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
  Tensor gc = g[0].contiguous();
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward<T>(gc.data<T>(), y.data<T>(), dx.data<T>(), l.outer, l.D, l.inner, log);
  });
  return {dx};
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
  TG_CHECK(x.defined(), op.name, ": the tensor is undefined");
  const int64_t dim = x.dim() == 0 ? 0 : wrap_dim(dim_in, x.dim(), op.name);
  TG_CHECK(x.dim() > 0 || dim_in == 0 || dim_in == -1, op.name, ": dim ", dim_in, " is out of range for a 0-d tensor");
  DimLayout l = dim_layout(x.shape(), dim);
  Tensor xc = x.detach().contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op.name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward<T>(xc.data<T>(), y.data<T>(), l.outer, l.D, l.inner, log);
  });
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
