// Group norm: validation, dtype dispatch and the tape. The kernels are in group_norm_kernels.cpp.
// Forward saves the input, mean and rstd (not the normalised tensor), and the weight.
#include "group_norm.h"
#include "../../framework/autocast.h"

#include <tuple>

#include "../../framework/checked_math.h"
#include "../../framework/recompute.h"
#include "../../framework/tape.h"
#include "../elementwise.h"
#include "group_norm_kernels.h"
#include "../reduce.h"
#include "../internal/optional_ptr.h"
#include "../internal/samples.h"
#include "../unary.h"

namespace tg {

namespace {

void check_sizes(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t N, int64_t C,
                 int64_t HxW, int64_t group) {
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(is_floating(input.dtype()), op, ": expected a floating input, got ", dtype_name(input.dtype()));
  TG_CHECK(N >= 0 && C >= 0 && HxW >= 0, op, ": expected non-negative N, C and HxW, got ", N, ", ", C, ", ", HxW);
  TG_CHECK(group > 0, op, ": expected group to be positive, got ", group);
  TG_CHECK(C % group == 0, op, ": expected C (", C, ") to be divisible by group (", group, ")");
  // Checked: N = 2^62, C = 4 wraps N * C * HxW to 0, which an empty input would match. The
  // nonzero sizes must multiply within int64 even when one is 0, as for any shape: the kernels
  // index with C * HxW and N * C (found by fuzz_op_args: N = 0, HxW = 2^63 - 1).
  const int64_t NCHxW = checked_numel({N, C, HxW}, op, "(N, C, HxW)");
  TG_CHECK(input.numel() == NCHxW, op, ": expected input with N * C * HxW = ", NCHxW, " elements, got ",
           input.numel(), " (shape ", format_shape(input.shape()), ")");
  checked_mul(N, group, op, "N * group (the size of mean and rstd)");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{weight, "weight"}, {bias, "bias"}}) {
    if (!t.defined()) continue;
    TG_CHECK(t.numel() == C, op, ": expected ", name, " with C = ", C, " elements, got shape ", format_shape(t.shape()));
    TG_CHECK(t.dtype() == input.dtype(), op, ": expected ", name, " of dtype ", dtype_name(input.dtype()), ", got ",
             dtype_name(t.dtype()));
  }
}

// mean and rstd are float32 for a 16-bit input: its statistics are computed in float32, and
// the backward reads them at that precision (PyTorch 1.13 rounds them to the input's dtype).
DType stats_dtype(DType input) { return is_reduced_floating(input) ? DType::Float32 : input; }


struct GroupNormAttrs {
  int64_t N, C, HxW, group;
  bool has_weight;
  double eps;
};

// group_norm in recorded ops, for double backward by recomputation (framework/recompute.h):
// each (item, group) is normalised with its biased variance, then channels are scaled and
// shifted.
std::vector<Tensor> group_norm_composite(const std::vector<Tensor>& in, const GroupNormAttrs& a) {
  const Tensor& x = in[0];
  Tensor groups = x.reshape({a.N, a.group, -1});
  Tensor centred = sub(groups, mean(groups, {2}, true));
  Tensor xhat = mul(centred, rsqrt(add(mean(mul(centred, centred), {2}, true), a.eps)));
  Tensor y = xhat.reshape({a.N, a.C, a.HxW});
  if (in[1].defined()) y = mul(y, in[1].reshape({a.C, 1}));
  if (in[2].defined()) y = add(y, in[2].reshape({a.C, 1}));
  return {y.reshape(x.shape())};
}

enum GroupNormSaved { kInput, kMean, kRstd, kWeight };  // kWeight only when there is one

std::vector<Tensor> group_norm_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<GroupNormAttrs>();
  if (ctx.create_graph()) {
    // The bias is not saved (nothing reads it); y is affine in it, so zeros stand in.
    Tensor bias = ctx.needs_grad(2) ? zeros(ctx.input_shape(2), ctx.input_dtype(2)) : Tensor();
    return recomputed_backward(ctx, {ctx.saved(kInput), a.has_weight ? ctx.saved(kWeight) : Tensor(), bias}, g,
                               [a](const std::vector<Tensor>& in) { return group_norm_composite(in, a); });
  }
  Tensor weight = a.has_weight ? ctx.saved(kWeight) : Tensor();
  GroupNormGrads grads = native_group_norm_backward(g[0], ctx.saved(kInput), ctx.saved(kMean), ctx.saved(kRstd), weight, a.N, a.C,
                                                    a.HxW, a.group,
                                                    {ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2)});
  return {grads.grad_input, grads.grad_weight, grads.grad_bias};
}

std::vector<SampleCase> group_norm_samples() {
  using Inputs = std::vector<Tensor>;
  auto affine = [](Shape shape, int64_t groups) {
    return SampleCase{"input " + format_shape(shape) + ", " + std::to_string(groups) + " groups, affine",
                      [shape](DType dt) {
                        return Inputs{sample_tensor(shape, dt), sample_tensor({shape[1]}, dt),
                                      sample_tensor({shape[1]}, dt)};
                      },
                      [groups](const Inputs& x) { return Inputs{group_norm(x[0], groups, x[1], x[2])}; }};
  };
  return {affine({2, 6, 3}, 3), affine({2, 4, 2, 3}, 2), affine({3, 4}, 1), affine({1, 6, 2, 1, 2}, 6),
          {"input [2, 4, 5], 2 groups, no affine", [](DType dt) { return Inputs{sample_tensor({2, 4, 5}, dt)}; },
           [](const Inputs& x) { return Inputs{group_norm(x[0], 2)}; }}};
}

}  // namespace

const OpDef kGroupNormOp{"group_norm", "native_group_norm_backward", "input, weight, bias", group_norm_backward_fn,
                         group_norm_samples, true};

GroupNormResult native_group_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t N,
                                  int64_t C, int64_t HxW, int64_t group, double eps) {
  check_sizes("native_group_norm", input, weight, bias, N, C, HxW, group);
  Tensor x = input.detach().contiguous();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const DType stats = stats_dtype(input.dtype());
  GroupNormResult r{Tensor::empty(input.shape(), input.dtype()), Tensor::empty({N, group}, stats),
                    Tensor::empty({N, group}, stats)};
  dispatch_all_floating(input.dtype(), "native_group_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = opmath_t<T>;
    kernels::group_norm_forward<T>(x.data<T>(), ptr_or_null<T>(w), ptr_or_null<T>(b), N, C, HxW, group, eps,
                                   r.output.data<T>(), r.mean.data<S>(), r.rstd.data<S>());
  });
  return r;
}

GroupNormGrads native_group_norm_backward(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& weight, int64_t N, int64_t C,
                                          int64_t HxW, int64_t group, std::array<bool, 3> output_mask) {
  const char* op = "native_group_norm_backward";
  check_sizes(op, input, weight, Tensor(), N, C, HxW, group);
  const int64_t NCHxW = N * C * HxW, Ngroup = N * group;  // checked by check_sizes
  TG_CHECK(grad_out.defined() && grad_out.numel() == NCHxW, op, ": expected grad_out with N * C * HxW = ",
           NCHxW, " elements, got ", describe_shape(grad_out));
  const DType stats = stats_dtype(input.dtype());
  for (const auto& [t, name, dt] : {std::tuple<const Tensor&, const char*, DType>{grad_out, "grad_out", input.dtype()},
                                    {mean, "mean", stats},
                                    {rstd, "rstd", stats}}) {
    TG_CHECK(t.defined(), op, ": expected a defined ", name);
    TG_CHECK(t.dtype() == dt, op, ": expected ", name, " of dtype ", dtype_name(dt), ", got ", dtype_name(t.dtype()));
  }
  TG_CHECK(mean.numel() == Ngroup, op, ": expected mean with N * group = ", Ngroup, " elements, got shape ",
           format_shape(mean.shape()));
  TG_CHECK(rstd.numel() == Ngroup, op, ": expected rstd with N * group = ", Ngroup, " elements, got shape ",
           format_shape(rstd.shape()));
  GroupNormGrads grads;
  if (output_mask[0]) grads.grad_input = Tensor::empty({N, C, HxW}, input.dtype());
  if (output_mask[1]) grads.grad_weight = Tensor::empty({C}, input.dtype());
  if (output_mask[2]) grads.grad_bias = Tensor::empty({C}, input.dtype());
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return grads;
  Tensor g = grad_out.contiguous(), x = input.contiguous(), m = mean.contiguous(), r = rstd.contiguous();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  dispatch_all_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = opmath_t<T>;
    kernels::group_norm_backward<T>(g.data<T>(), x.data<T>(), m.data<S>(), r.data<S>(), ptr_or_null<T>(w), N, C, HxW,
                                    group, ptr_or_null<T>(grads.grad_input), ptr_or_null<T>(grads.grad_weight),
                                    ptr_or_null<T>(grads.grad_bias));
  });
  if (grads.grad_input.defined()) grads.grad_input = grads.grad_input.view(input.shape());
  return grads;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (auto c = autocast::to_float32(input, weight, bias)) return group_norm(c[0], num_groups, c[1], c[2], eps);
  TG_CHECK(input.defined(), "group_norm: expected a defined input");
  TG_CHECK(input.dim() >= 2, "group_norm: expected input with at least 2 dims (N, C, *), got ",
           format_shape(input.shape()));
  TG_CHECK(num_groups > 0, "group_norm: expected num_groups to be positive, got ", num_groups);
  const int64_t N = input.size(0), C = input.size(1);
  TG_CHECK(C % num_groups == 0, "group_norm: expected the number of channels (", C,
           ") to be divisible by num_groups (", num_groups, ")");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{weight, "weight"}, {bias, "bias"}})
    TG_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == C), "group_norm: expected ", name, " of shape [", C,
             "], got ", format_shape(t.shape()));
  const int64_t HxW = N * C == 0 ? 0 : input.numel() / (N * C);
  GroupNormResult r = native_group_norm(input, weight, bias, N, C, HxW, num_groups, eps);
  if (Recorder rec{kGroupNormOp, {input, weight, bias}}) {
    rec.set_attrs(GroupNormAttrs{N, C, HxW, num_groups, weight.defined(), eps});
    rec.save(kInput, input);
    rec.save(kMean, r.mean);
    rec.save(kRstd, r.rstd);
    if (weight.defined()) rec.save(kWeight, weight);
    rec.set_outputs({r.output});
  }
  return r.output;
}

void register_group_norm_ops(Registry& r) { r.add(kGroupNormOp); }

}  // namespace tg
