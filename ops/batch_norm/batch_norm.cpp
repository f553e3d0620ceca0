// Batch norm: validation, dtype dispatch, the running statistics and the tape. The kernels are in
// batch_norm_kernels.cpp. Forward saves the input, the per-channel mean and invstd (not the
// normalised tensor) and the weight.
#include "batch_norm.h"

#include <tuple>
#include <vector>

#include "../../framework/autocast.h"
#include "../../framework/grad_mode.h"
#include "../../framework/inplace.h"
#include "../../framework/recompute.h"
#include "../../framework/tape.h"
#include "../elementwise.h"
#include "../internal/optional_ptr.h"
#include "../internal/reduced_float.h"
#include "../internal/samples.h"
#include "../reduce.h"
#include "../unary.h"
#include "../where.h"
#include "batch_norm_kernels.h"

namespace tg {

namespace {

struct Dims {
  int64_t N, C, HxW;
};

Dims dims_of(const Tensor& input) {
  const int64_t N = input.size(0), C = input.size(1);
  return {N, C, N * C == 0 ? 0 : input.numel() / (N * C)};
}

// Each of the (C) tensors, when defined: C elements, the input's dtype.
void check_per_channel(const char* op, const Tensor& input, int64_t C,
                       std::initializer_list<std::pair<const Tensor&, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    if (!t.defined()) continue;
    TG_CHECK(t.numel() == C, op, ": expected ", name, " with ", C, " elements (one per channel of input ",
             format_shape(input.shape()), "), got shape ", format_shape(t.shape()));
    TG_CHECK(t.dtype() == input.dtype(), op, ": expected ", name, " of dtype ", dtype_name(input.dtype()), ", got ",
             dtype_name(t.dtype()));
  }
}

void check_input(const char* op, const Tensor& input) {
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(is_floating(input.dtype()), op, ": expected a floating input, got ", dtype_name(input.dtype()));
  TG_CHECK(input.dim() >= 2, op, ": expected input with at least 2 dims (N, C, *), got ",
           format_shape(input.shape()));
}

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); }

// running = (1 - momentum) * running + momentum * batch, in double, written in place (unrecorded,
// the version bumped), in PyTorch's order of operations.
void update_running(Tensor& running, const std::vector<double>& batch, double momentum) {
  if (!running.defined()) return;
  const int64_t C = static_cast<int64_t>(batch.size());
  Tensor old = running.detach().to(DType::Float64).contiguous();
  Tensor updated = Tensor::empty({C}, DType::Float64);
  const double* o = old.data<double>();
  double* u = updated.data<double>();
  for (int64_t c = 0; c < C; ++c) u[c] = momentum * batch[c] + (1.0 - momentum) * o[c];
  Tensor target = running.detach();  // any layout: a strided view of a larger buffer too
  detail::raw_copy_(target, updated.view(running.shape()));
}

// 16-bit calls: every tensor widened to float32, the float32 op, each result rounded once.
BatchNormResult native_batch_norm_16bit(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                        const Tensor& running_mean, const Tensor& running_var, bool training,
                                        double momentum, double eps) {
  Tensor rm = detail::widen(running_mean), rv = detail::widen(running_var);
  BatchNormResult r = native_batch_norm(detail::widen(input), detail::widen(weight), detail::widen(bias), rm, rv,
                                        training, momentum, eps);
  if (training) {
    for (auto [dst, src] : {std::pair<Tensor, Tensor>{running_mean, rm}, {running_var, rv}}) {
      if (!dst.defined()) continue;
      Tensor target = dst.detach();
      detail::raw_copy_(target, src.view(dst.shape()));
    }
  }
  r.output = round_result(r.output, input.dtype());
  return r;
}

struct BatchNormAttrs {
  Dims d;
  bool training, has_weight;
  double eps;
};

enum BatchNormSaved { kInput, kMean, kInvstd, kWeight };  // kWeight only when there is one

// batch_norm in recorded ops, for double backward by recomputation (framework/recompute.h).
// Training normalises with the batch's statistics (functions of x); eval with the saved mean
// and invstd, constants.
std::vector<Tensor> batch_norm_composite(const std::vector<Tensor>& in, const BatchNormAttrs& a, const Tensor& mean_c,
                                         const Tensor& invstd_c) {
  const Tensor& x = in[0];
  const Dims& d = a.d;
  Tensor xr = x.reshape({d.N, d.C, d.HxW}), xhat;
  if (a.training) {
    Tensor centred = sub(xr, mean(xr, {0, 2}, true));
    Tensor v = add(mean(mul(centred, centred), {0, 2}, true), a.eps);
    // the kernel's invstd 0 where var + eps is 0 (PyTorch's InvStd), masked twice so that
    // rsqrt's infinite slope at 0 stays out of the gradients
    const Tensor at_zero = eq(v.detach(), 0.0);
    const Tensor safe_v = where(at_zero, scalar_tensor(1.0, v.dtype()), v);
    xhat = mul(centred, where(at_zero, scalar_tensor(0.0, v.dtype()), rsqrt(safe_v)));
  } else {
    xhat = mul(sub(xr, mean_c.to(x.dtype()).reshape({d.C, 1})), invstd_c.to(x.dtype()).reshape({d.C, 1}));
  }
  if (in[1].defined()) xhat = mul(xhat, in[1].reshape({d.C, 1}));
  if (in[2].defined()) xhat = add(xhat, in[2].reshape({d.C, 1}));
  return {xhat.reshape(x.shape())};
}

std::vector<Tensor> batch_norm_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<BatchNormAttrs>();
  if (ctx.create_graph()) {
    // The bias is not saved (nothing reads it); y is affine in it, so zeros stand in.
    Tensor bias = ctx.needs_grad(2) ? zeros(ctx.input_shape(2), ctx.input_dtype(2)) : Tensor();
    Tensor m = ctx.saved(kMean).detach(), r = ctx.saved(kInvstd).detach();
    return recomputed_backward(ctx, {ctx.saved(kInput), a.has_weight ? ctx.saved(kWeight) : Tensor(), bias}, g,
                               [a, m, r](const std::vector<Tensor>& in) { return batch_norm_composite(in, a, m, r); });
  }
  Tensor weight = a.has_weight ? ctx.saved(kWeight) : Tensor();
  BatchNormGrads grads =
      native_batch_norm_backward(g[0], ctx.saved(kInput), weight, ctx.saved(kMean), ctx.saved(kInvstd), a.training,
                                 {ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2)});
  return {grads.grad_input, grads.grad_weight, grads.grad_bias};
}

std::vector<SampleCase> batch_norm_samples() {
  using Inputs = std::vector<Tensor>;
  // Training, affine, with running statistics (updated by each call; the output does not read them).
  auto train = [](Shape shape) {
    return SampleCase{"train " + format_shape(shape) + ", affine",
                      [shape](DType dt) {
                        const int64_t C = shape[1];
                        return Inputs{sample_tensor(shape, dt), sample_tensor({C}, dt), sample_tensor({C}, dt),
                                      zeros({C}, dt), ones({C}, dt)};
                      },
                      [](const Inputs& x) { return Inputs{batch_norm(x[0], x[3], x[4], x[1], x[2], true)}; }};
  };
  // Eval: the running statistics (variance kept positive) are constants.
  auto eval = [](Shape shape) {
    return SampleCase{"eval " + format_shape(shape) + ", affine",
                      [shape](DType dt) {
                        const int64_t C = shape[1];
                        return Inputs{sample_tensor(shape, dt), sample_tensor({C}, dt), sample_tensor({C}, dt),
                                      sample_tensor({C}, dt, false), sample_uniform({C}, dt, 0.5, 1.5, false)};
                      },
                      [](const Inputs& x) { return Inputs{batch_norm(x[0], x[3], x[4], x[1], x[2], false)}; }};
  };
  return {train({4, 3}),
          train({2, 3, 4}),
          train({2, 2, 3, 2}),
          eval({3, 2, 4}),
          eval({2, 3, 2, 2}),
          {"train [3, 2, 5], no affine, no running stats", [](DType dt) { return Inputs{sample_tensor({3, 2, 5}, dt)}; },
           [](const Inputs& x) { return Inputs{batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true)}; }}};
}

}  // namespace

const OpDef kBatchNormOp{"batch_norm", "native_batch_norm_backward", "input, weight, bias", batch_norm_backward_fn,
                         batch_norm_samples, true};

BatchNormResult native_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var, bool training,
                                  double momentum, double eps) {
  const char* op = "native_batch_norm";
  check_input(op, input);
  const Dims d = dims_of(input);
  check_per_channel(op, input, d.C,
                    {{weight, "weight"}, {bias, "bias"}, {running_mean, "running_mean"}, {running_var, "running_var"}});
  TG_CHECK(training || (running_mean.defined() && running_var.defined()), op,
           ": expected running_mean and running_var in evaluation mode (training = false), got ",
           running_mean.defined() ? "running_mean only" : running_var.defined() ? "running_var only" : "neither");
  TG_CHECK(!training || d.N * d.HxW != 1, op, ": expected more than 1 value per channel when training, got input ",
           format_shape(input.shape()));
  // Training writes the running statistics in place: checked before either is written.
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{running_mean, "running_mean"},
                                {running_var, "running_var"}})
    TG_CHECK(!training || !t.defined() || !detail::shares_elements(t), op, ": ", name, " of shape ",
             format_shape(t.shape()), " and strides ", format_shape(t.strides()), " shares memory between its "
             "elements (a stride of 0, as from expand()) and cannot be updated in place; clone() it first");
  if (d.N * d.HxW == 0) {
    // No values per channel (an empty batch or empty planes): an empty output, zero statistics
    // saved (the backward then gives zero weight and bias gradients) and the running statistics
    // left as they are, as in PyTorch; a mean of nothing (NaN) made them NaN, and every later
    // eval output with them.
    const DType stats = is_reduced_floating(input.dtype()) ? DType::Float32 : input.dtype();
    return {Tensor::empty(input.shape(), input.dtype()), zeros({d.C}, stats), zeros({d.C}, stats)};
  }
  if (is_reduced_floating(input.dtype()))
    return native_batch_norm_16bit(input, weight, bias, running_mean, running_var, training, momentum, eps);
  Tensor x = input.detach().contiguous(), w = contiguous_or_undefined(weight), b = contiguous_or_undefined(bias);
  BatchNormResult r{Tensor::empty(input.shape(), input.dtype()), Tensor::empty({d.C}, input.dtype()),
                    Tensor::empty({d.C}, input.dtype())};
  std::vector<double> var_unbiased(training ? d.C : 0);
  dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* mean = r.save_mean.data<T>();
    T* invstd = r.save_invstd.data<T>();
    if (training) {
      kernels::batch_norm_forward_train<T>(x.data<T>(), ptr_or_null<T>(w), ptr_or_null<T>(b), d.N, d.C, d.HxW, eps,
                                           r.output.data<T>(), mean, invstd, var_unbiased.data());
    } else {
      Tensor rm = running_mean.detach().to(DType::Float64).contiguous();
      Tensor rv = running_var.detach().to(DType::Float64).contiguous();
      for (int64_t c = 0; c < d.C; ++c) {
        mean[c] = static_cast<T>(rm.data<double>()[c]);
        invstd[c] = static_cast<T>(1.0 / std::sqrt(rv.data<double>()[c] + eps));
      }
      kernels::batch_norm_forward_eval<T>(x.data<T>(), mean, invstd, ptr_or_null<T>(w), ptr_or_null<T>(b), d.N, d.C,
                                          d.HxW, r.output.data<T>());
    }
  });
  if (training) {
    Tensor rm = running_mean, rv = running_var;
    const Tensor mean64 = r.save_mean.to(DType::Float64);
    update_running(rm, std::vector<double>(mean64.data<double>(), mean64.data<double>() + d.C), momentum);
    update_running(rv, var_unbiased, momentum);
  }
  return r;
}

BatchNormGrads native_batch_norm_backward(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                                          const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                          std::array<bool, 3> output_mask) {
  const char* op = "native_batch_norm_backward";
  check_input(op, input);
  const Dims d = dims_of(input);
  check_per_channel(op, input, d.C, {{weight, "weight"}});
  TG_CHECK(grad_out.defined() && grad_out.shape() == input.shape(), op, ": expected grad_out of the input's shape ",
           format_shape(input.shape()), ", got ", describe_shape(grad_out));
  TG_CHECK(grad_out.dtype() == input.dtype(), op, ": expected grad_out of dtype ", dtype_name(input.dtype()),
           ", got ", dtype_name(grad_out.dtype()));
  const DType stats = is_reduced_floating(input.dtype()) ? DType::Float32 : input.dtype();
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{save_mean, "save_mean"}, {save_invstd, "save_invstd"}}) {
    TG_CHECK(t.defined() && t.numel() == d.C, op, ": expected ", name, " with ", d.C, " elements, got ",
             describe_shape(t));
    TG_CHECK(t.dtype() == stats, op, ": expected ", name, " of dtype ", dtype_name(stats), ", got ",
             dtype_name(t.dtype()));
  }
  if (is_reduced_floating(input.dtype())) {
    BatchNormGrads g = native_batch_norm_backward(detail::widen(grad_out), detail::widen(input),
                                                  detail::widen(weight), save_mean, save_invstd, training, output_mask);
    for (Tensor* t : {&g.grad_input, &g.grad_weight, &g.grad_bias}) *t = round_result(*t, input.dtype());
    return g;
  }
  BatchNormGrads grads;
  if (output_mask[0]) grads.grad_input = Tensor::empty(input.shape(), input.dtype());
  if (output_mask[1]) grads.grad_weight = Tensor::empty({d.C}, input.dtype());
  if (output_mask[2]) grads.grad_bias = Tensor::empty({d.C}, input.dtype());
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return grads;
  Tensor g = grad_out.detach().contiguous(), x = input.detach().contiguous(), w = contiguous_or_undefined(weight);
  Tensor m = save_mean.detach().contiguous(), r = save_invstd.detach().contiguous();
  dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::batch_norm_backward<T>(g.data<T>(), x.data<T>(), m.data<T>(), r.data<T>(), ptr_or_null<T>(w), d.N, d.C,
                                    d.HxW, training, ptr_or_null<T>(grads.grad_input),
                                    ptr_or_null<T>(grads.grad_weight), ptr_or_null<T>(grads.grad_bias));
  });
  return grads;
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  if (auto c = autocast::to_float32(input, weight, bias))
    return batch_norm(c[0], running_mean, running_var, c[1], c[2], training, momentum, eps);
  check_input("batch_norm", input);
  BatchNormResult r = [&] {
    NoGradGuard no_grad;  // the running statistics' update is never recorded
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
  }();
  if (Recorder rec{kBatchNormOp, {input, weight, bias}}) {
    rec.set_attrs(BatchNormAttrs{dims_of(input), training, weight.defined(), eps});
    rec.save(kInput, input);
    rec.save(kMean, r.save_mean);
    rec.save(kInvstd, r.save_invstd);
    if (weight.defined()) rec.save(kWeight, weight);
    rec.set_outputs({r.output});
  }
  return r.output;
}

void register_batch_norm_ops(Registry& r) { r.add(kBatchNormOp); }

}  // namespace tg
