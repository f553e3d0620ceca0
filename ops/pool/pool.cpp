// Max and average pooling: argument checking, dtype dispatch and the tape (adaptive average
// pooling is in adaptive_avg_pool.cpp). The kernels are in pool_kernels.cpp.
// A bfloat16 or float16 tensor is pooled by the float32 kernels (widened) and rounded once.
//
//   max_pool2d:          dx = grad scattered to the argmax        (saves the int64 indices)
//   avg_pool2d:          dx = grad / divisor spread over the window  (saves nothing)
//
// Twice differentiable: each backward is linear in grad, and under create_graph it is
// recorded as an op of its own whose backward is its adjoint, itself recorded:
//   max_pool2d_with_indices_backward (scatter to the indices) <-> max_pool_double_backward
//   (gather at the indices); avg_pool2d_backward -> avg_pool2d. The
// second derivative in the input is zero (pooling is piecewise linear); the gradient of the
// gradient in grad_output is the forward pooling of the new direction, as in PyTorch.
#include "pool.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "pool_kernels.h"
#include "../internal/samples.h"
#include "../internal/reduced_float.h"

namespace tg {

namespace {

// One value for both dims or one per dim (H, W); `empty_means` stands in for an empty list
// when one is allowed (stride: the kernel size).
std::array<int64_t, 2> pair_of(const char* op, const char* what, const IntList& v,
                               const std::array<int64_t, 2>* empty_means = nullptr) {
  if (v.empty() && empty_means) return *empty_means;
  TG_CHECK(v.size() == 1 || v.size() == 2, op, ": expected ", what, " to have ", empty_means ? "0, " : "",
           "1 or 2 values, got ", v.size(), " values ", format_shape(v));
  return v.size() == 1 ? std::array<int64_t, 2>{v[0], v[0]} : std::array<int64_t, 2>{v[0], v[1]};
}

std::string pair_str(std::array<int64_t, 2> v) { return format_shape({v[0], v[1]}); }

// (N, C, H, W) or (C, H, W) with non-zero C, H, W (a zero batch is allowed, as in PyTorch).
void check_input_shape(const char* op, const Shape& s) {
  TG_CHECK(s.size() == 3 || s.size() == 4, op, ": expected input to have 3 (C, H, W) or 4 (N, C, H, W) dims, got ",
           format_shape(s));
  const size_t r = s.size();
  TG_CHECK(s[r - 3] > 0 && s[r - 2] > 0 && s[r - 1] > 0, op, ": expected input with non-zero C, H and W, got ",
           format_shape(s));
  checked_numel(s, op, "the input size");  // a backward's input_size comes from the user
}

// kernels::pool_output_size with its sums checked in its order of operations, so that the
// unchecked kernel formula cannot overflow (a kernel_size, dilation or stride of 2^62).
void check_pool_output_size(const char* op, int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                            int64_t dilation, bool ceil_mode) {
  const int64_t span = checked_mul(dilation, kernel - 1, op, "dilation * (kernel_size - 1)");
  const int64_t padded = checked_add(in, checked_mul(2, pad, op, "2 * padding"), op, "input size + 2 * padding");
  if (ceil_mode) checked_add(padded - span - 1, stride - 1, op, "the output size in ceil_mode (stride too large)");
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  TG_CHECK(t.defined(), op, ": expected a defined ", what);
  TG_CHECK(is_floating(t.dtype()), op, ": expected ", what, " to be floating, got ",
           dtype_name(t.dtype()));
}

int64_t planes_of(const Shape& s) { return s.size() == 4 ? s[0] * s[1] : s[0]; }

Shape with_spatial(const Shape& input, int64_t ho, int64_t wo) {
  Shape out(input.begin(), input.end() - 2);
  out.push_back(ho);
  out.push_back(wo);
  return out;
}

// The whole geometry of a max or average pooling from the input's shape and the user's lists.
kernels::Pool2dParams check_pool(const char* op, const Shape& input, const IntList& kernel_arg,
                                 const IntList& stride_arg, const IntList& padding_arg, const IntList& dilation_arg,
                                 bool ceil_mode) {
  check_input_shape(op, input);
  const auto k = pair_of(op, "kernel_size", kernel_arg);
  const auto s = pair_of(op, "stride", stride_arg, &k);
  const auto pad = pair_of(op, "padding", padding_arg);
  const auto d = pair_of(op, "dilation", dilation_arg);
  TG_CHECK(k[0] > 0 && k[1] > 0, op, ": expected kernel_size to be positive, got ", pair_str(k));
  TG_CHECK(s[0] > 0 && s[1] > 0, op, ": expected stride to be positive, got ", pair_str(s));
  TG_CHECK(d[0] > 0 && d[1] > 0, op, ": expected dilation to be positive, got ", pair_str(d));
  TG_CHECK(pad[0] >= 0 && pad[1] >= 0, op, ": expected padding to be non-negative, got ", pair_str(pad));
  TG_CHECK(pad[0] <= k[0] / 2 && pad[1] <= k[1] / 2, op,
           ": expected padding to be at most half the kernel size, got padding ", pair_str(pad), " with kernel_size ",
           pair_str(k));
  // PyTorch's limit (its arguments are int): a window of kH * kW then stays below 2^62, so the
  // average's divisor cannot overflow (a kernel of [2^32, 2^32] gave inf), and a window is at
  // most 2^31 steps per dim.
  constexpr int64_t kMaxArg = (int64_t(1) << 31) - 1;
  for (const auto& [v, name] : {std::pair<std::array<int64_t, 2>, const char*>{k, "kernel_size"}, {s, "stride"},
                                {pad, "padding"}, {d, "dilation"}}) {
    TG_CHECK(v[0] <= kMaxArg && v[1] <= kMaxArg, op, ": expected ", name, " below 2^31, got ", pair_str(v));
  }
  kernels::Pool2dParams p;
  p.NC = planes_of(input);
  p.H = input[input.size() - 2], p.W = input[input.size() - 1];
  p.kH = k[0], p.kW = k[1], p.sH = s[0], p.sW = s[1], p.padH = pad[0], p.padW = pad[1], p.dH = d[0], p.dW = d[1];
  check_pool_output_size(op, p.H, p.kH, p.padH, p.sH, p.dH, ceil_mode);
  check_pool_output_size(op, p.W, p.kW, p.padW, p.sW, p.dW, ceil_mode);
  p.Ho = kernels::pool_output_size(p.H, p.kH, p.padH, p.sH, p.dH, ceil_mode);
  p.Wo = kernels::pool_output_size(p.W, p.kW, p.padW, p.sW, p.dW, ceil_mode);
  TG_CHECK(p.Ho > 0 && p.Wo > 0, op, ": output size is too small: input ", format_shape(input), " with kernel_size ",
           pair_str(k), ", stride ", pair_str(s), ", padding ", pair_str(pad), ", dilation ", pair_str(d),
           ", ceil_mode ", ceil_mode ? "true" : "false", " gives [", p.Ho, ", ", p.Wo, "]");
  return p;
}

void check_divisor(const char* op, std::optional<int64_t> divisor_override) {
  TG_CHECK(!divisor_override || *divisor_override != 0, op, ": expected divisor_override to be non-zero, got 0");
}

void check_grad_output(const char* op, const Tensor& grad_output, const Shape& expected) {
  check_floating(op, "grad_output", grad_output);
  TG_CHECK(grad_output.shape() == expected, op, ": expected grad_output to have the output's shape ",
           format_shape(expected), ", got ", format_shape(grad_output.shape()));
}

// ---- the tape ---------------------------------------------------------------------------

// The saved slot of max_pool2d, its recorded backward and that backward's adjoint (one enum:
// the three save the argmax indices).
enum MaxPoolSaved { kIndices };

// Under create_graph g[0] carries history and the backward records itself (an op of its own,
// see below); otherwise it runs the kernel unrecorded.
std::vector<Tensor> max_pool2d_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {max_pool2d_with_indices_backward(ctx.create_graph() ? g[0] : g[0].detach(), ctx.input_shape(0),
                                           ctx.saved(kIndices))};
}

struct AvgPoolAttrs {
  IntList kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};

std::vector<Tensor> avg_pool2d_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<AvgPoolAttrs>();
  return {avg_pool2d_backward(ctx.create_graph() ? g[0] : g[0].detach(), ctx.input_shape(0), a.kernel_size, a.stride, a.padding, a.ceil_mode,
                              a.count_include_pad, a.divisor_override)};
}

// ---- the backward ops, recorded under create_graph ----------------------------------------

// y[o] = x[indices[o]] per plane: the adjoint of the max backward's scatter.
Tensor max_pool_double_backward(const Tensor& x, const Tensor& indices);

// max_pool2d_with_indices_backward(g) scatters g: its gradient in g gathers at the indices.
std::vector<Tensor> max_pool2d_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  return {max_pool_double_backward(gg[0], ctx.saved(kIndices))};
}

// max_pool_double_backward(x) gathers x: its gradient in x scatters to the indices.
std::vector<Tensor> max_pool_double_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {max_pool2d_with_indices_backward(g[0], ctx.input_shape(0), ctx.saved(kIndices))};
}

std::vector<Tensor> avg_pool2d_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<AvgPoolAttrs>();
  return {avg_pool2d(gg[0], a.kernel_size, a.stride, a.padding, a.ceil_mode, a.count_include_pad, a.divisor_override)};
}

// ---- sample cases -----------------------------------------------------------------------

using Inputs = std::vector<Tensor>;

// Distinct values 0.1 apart in random order: no ties (where max pooling has no derivative)
// that a finite-difference step could cross.
Tensor distinct_values(const Shape& shape, DType dt) {
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  std::vector<double> values;
  for (int64_t i : randperm(n).to_vector<int64_t>()) values.push_back(0.1 * static_cast<double>(i));
  Tensor t = from_vector(values, shape).to(dt);
  t.requires_grad_();
  return t;
}

std::vector<SampleCase> max_pool2d_samples() {
  auto make = [](std::string name, Shape in, IntList k, IntList s, IntList p, IntList d, bool ceil) {
    return SampleCase{name, [in](DType dt) { return Inputs{distinct_values(in, dt)}; },
                      [=](const Inputs& x) { return Inputs{max_pool2d(x[0], k, s, p, d, ceil)}; }};
  };
  return {make("[2,2,6,6] k2", {2, 2, 6, 6}, {2}, {}, {0}, {1}, false),
          make("[1,2,7,6] k3 s2 p1, overlapping", {1, 2, 7, 6}, {3}, {2}, {1}, {1}, false),
          make("[1,1,7,8] k(3,2) s(1,2) p(1,0) dilation (2,1)", {1, 1, 7, 8}, {3, 2}, {1, 2}, {1, 0}, {2, 1}, false),
          make("[2,5,5] (C,H,W) k2 s2 p1 ceil_mode", {2, 5, 5}, {2}, {2}, {1}, {1}, true)};
}

std::vector<SampleCase> avg_pool2d_samples() {
  auto make = [](std::string name, Shape in, IntList k, IntList s, IntList p, bool ceil, bool include,
                 std::optional<int64_t> divisor) {
    return SampleCase{name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
                      [=](const Inputs& x) { return Inputs{avg_pool2d(x[0], k, s, p, ceil, include, divisor)}; }};
  };
  return {make("[2,2,6,6] k2", {2, 2, 6, 6}, {2}, {}, {0}, false, true, std::nullopt),
          make("[1,2,7,6] k3 s2 p1, count_include_pad false", {1, 2, 7, 6}, {3}, {2}, {1}, false, false, std::nullopt),
          make("[1,1,6,7] k(3,2) s(2,1) p(1,1) ceil_mode", {1, 1, 6, 7}, {3, 2}, {2, 1}, {1}, true, true, std::nullopt),
          make("[2,5,5] (C,H,W) k2 s2 p1 ceil_mode, divisor 3", {2, 5, 5}, {2}, {2}, {1}, true, false, 3)};
}

// The backward ops on their own: linear in grad_output, checked against their adjoints.
Tensor sample_max_indices() {  // of a [1,2,4,4] input pooled k2 s2: one position per window
  return from_vector(std::vector<int64_t>{0, 3, 9, 14, 5, 2, 13, 10}, {1, 2, 2, 2});
}

std::vector<SampleCase> max_pool2d_backward_samples() {
  return {{"[1,2,2,2] grad -> [1,2,4,4], k2 windows",
           [](DType dt) { return Inputs{sample_tensor({1, 2, 2, 2}, dt)}; },
           [](const Inputs& x) { return Inputs{max_pool2d_with_indices_backward(x[0], {1, 2, 4, 4}, sample_max_indices())}; }},
          {"[1,1,2,2] grad, a shared argmax and a -1 (skipped)",
           [](DType dt) { return Inputs{sample_tensor({1, 1, 2, 2}, dt)}; },
           [](const Inputs& x) {
             Tensor idx = from_vector(std::vector<int64_t>{4, 4, -1, 7}, {1, 1, 2, 2});
             return Inputs{max_pool2d_with_indices_backward(x[0], {1, 1, 3, 3}, idx)};
           }}};
}

std::vector<SampleCase> max_pool_double_backward_samples() {
  return {{"[1,2,4,4] gathered at k2 argmaxes",
           [](DType dt) { return Inputs{sample_tensor({1, 2, 4, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{max_pool_double_backward(x[0], sample_max_indices())}; }}};
}

std::vector<SampleCase> avg_pool2d_backward_samples() {
  return {{"[1,2,4,3] grad -> [1,2,6,5], k3 s2 p1 ceil_mode, count_include_pad false",
           [](DType dt) { return Inputs{sample_tensor({1, 2, 4, 3}, dt)}; },
           [](const Inputs& x) {
             return Inputs{avg_pool2d_backward(x[0], {1, 2, 6, 5}, {3}, {2}, {1}, true, false, std::nullopt)};
           }}};
}

}  // namespace

const OpDef kMaxPool2dOp{"max_pool2d", "max_pool2d_with_indices_backward", "input", max_pool2d_backward_fn,
                         max_pool2d_samples, true};
const OpDef kAvgPool2dOp{"avg_pool2d", "avg_pool2d_backward", "input", avg_pool2d_backward_fn, avg_pool2d_samples,
                         true};
const OpDef kMaxPool2dBackwardOp{"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward_backward",
                                 "grad_output", max_pool2d_backward_backward_fn, max_pool2d_backward_samples, true};
const OpDef kMaxPoolDoubleBackwardOp{"max_pool_double_backward", "max_pool_double_backward_backward", "self",
                                     max_pool_double_backward_backward_fn, max_pool_double_backward_samples, true};
const OpDef kAvgPool2dBackwardOp{"avg_pool2d_backward", "avg_pool2d_backward_backward", "grad_output",
                                 avg_pool2d_backward_backward_fn, avg_pool2d_backward_samples, true};

// ---- max pooling ------------------------------------------------------------------------

ValuesIndices max_pool2d_with_indices(const Tensor& input, const IntList& kernel_size, const IntList& stride,
                                      const IntList& padding, const IntList& dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  check_floating(op, "input", input);
  const kernels::Pool2dParams p = check_pool(op, input.shape(), kernel_size, stride, padding, dilation, ceil_mode);
  const Shape out_shape = with_spatial(input.shape(), p.Ho, p.Wo);
  Tensor x = detail::widen(input.detach().contiguous());  // accepts any strides
  ValuesIndices r{Tensor::empty(out_shape, x.dtype()), Tensor::empty(out_shape, DType::Int64)};
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::max_pool2d_forward<T>(x.data<T>(), r.values.data<T>(), r.indices.data<int64_t>(), p);
  });
  r.values = round_result(r.values, input.dtype());
  if (Recorder rec{kMaxPool2dOp, {input}}) {
    rec.save(kIndices, r.indices);
    rec.set_outputs({r.values});
  }
  return r;
}

Tensor max_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  const IntList& dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).values;
}

Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Shape& input_size, const Tensor& indices) {
  const char* op = "max_pool2d_with_indices_backward";
  check_input_shape(op, input_size);
  TG_CHECK(indices.defined() && indices.dtype() == DType::Int64, op, ": expected int64 indices, got ",
           indices.defined() ? dtype_name(indices.dtype()) : "undefined");
  TG_CHECK(indices.dim() == static_cast<int64_t>(input_size.size()) &&
               std::equal(input_size.begin(), input_size.end() - 2, indices.shape().begin()),
           op, ": expected indices with the leading dims of input_size ", format_shape(input_size), ", got ",
           format_shape(indices.shape()));
  check_grad_output(op, grad_output, indices.shape());
  Tensor idx = indices.contiguous(), g = detail::widen(grad_output.contiguous());
  kernels::Pool2dParams p;
  p.NC = planes_of(input_size);
  p.H = input_size[input_size.size() - 2], p.W = input_size[input_size.size() - 1];
  p.Ho = idx.size(-2), p.Wo = idx.size(-1);
  // Indices may come from the user: each must be a position in its plane (or -1, skipped).
  const int64_t* ip = idx.data<int64_t>();
  const int64_t count = idx.numel(), plane = p.H * p.W;
  for (int64_t i = 0; i < count; ++i)
    TG_CHECK(ip[i] >= -1 && ip[i] < plane, op, ": expected indices in [0, H * W) = [0, ", p.H * p.W,
             ") (or -1), got ", ip[i], " at element ", i);
  Tensor grad_input = Tensor::empty(input_size, g.dtype());
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::max_pool2d_backward<T>(g.data<T>(), ip, grad_input.data<T>(), p);
  });
  grad_input = round_result(grad_input, grad_output.dtype());
  if (Recorder rec{kMaxPool2dBackwardOp, {grad_output}}) {  // under create_graph, say
    rec.save(kIndices, idx);
    rec.set_outputs({grad_input});
  }
  return grad_input;
}

namespace {
// Internal: indices come from a max_pool2d_with_indices_backward that checked them.
Tensor max_pool_double_backward(const Tensor& x, const Tensor& indices) {
  const char* op = "max_pool_double_backward";
  check_floating(op, "self", x);
  Tensor xc = detail::widen(x.detach().contiguous()), idx = indices.contiguous();
  kernels::Pool2dParams p;
  p.NC = planes_of(x.shape());
  p.H = x.size(-2), p.W = x.size(-1);
  p.Ho = idx.size(-2), p.Wo = idx.size(-1);
  Tensor y = Tensor::empty(idx.shape(), xc.dtype());
  dispatch_floating(xc.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::max_pool2d_gather<T>(xc.data<T>(), idx.data<int64_t>(), y.data<T>(), p);
  });
  y = round_result(y, x.dtype());
  if (Recorder rec{kMaxPoolDoubleBackwardOp, {x}}) {
    rec.save(kIndices, idx);
    rec.set_outputs({y});
  }
  return y;
}
}  // namespace

// ---- average pooling --------------------------------------------------------------------

Tensor avg_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  check_floating(op, "input", input);
  const kernels::Pool2dParams p = check_pool(op, input.shape(), kernel_size, stride, padding, {1}, ceil_mode);
  check_divisor(op, divisor_override);
  Tensor x = detail::widen(input.detach().contiguous());
  Tensor out = Tensor::empty(with_spatial(input.shape(), p.Ho, p.Wo), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::avg_pool2d_forward<T>(x.data<T>(), out.data<T>(), p, count_include_pad, divisor_override.value_or(0));
  });
  out = round_result(out, input.dtype());
  if (Recorder rec{kAvgPool2dOp, {input}}) {
    rec.set_attrs(AvgPoolAttrs{kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override});
    rec.set_outputs({out});
  }
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size, const IntList& kernel_size,
                           const IntList& stride, const IntList& padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d_backward";
  const kernels::Pool2dParams p = check_pool(op, input_size, kernel_size, stride, padding, {1}, ceil_mode);
  check_divisor(op, divisor_override);
  check_grad_output(op, grad_output, with_spatial(input_size, p.Ho, p.Wo));
  Tensor g = detail::widen(grad_output.contiguous());
  Tensor grad_input = Tensor::empty(input_size, g.dtype());
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::avg_pool2d_backward<T>(g.data<T>(), grad_input.data<T>(), p, count_include_pad,
                                    divisor_override.value_or(0));
  });
  grad_input = round_result(grad_input, grad_output.dtype());
  if (Recorder rec{kAvgPool2dBackwardOp, {grad_output}}) {  // under create_graph, say
    rec.set_attrs(AvgPoolAttrs{kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override});
    rec.set_outputs({grad_input});
  }
  return grad_input;
}

void register_pool_ops(Registry& r) {
  for (const OpDef* op : {&kMaxPool2dOp, &kAvgPool2dOp, &kMaxPool2dBackwardOp, &kMaxPoolDoubleBackwardOp,
                          &kAvgPool2dBackwardOp})
    r.add(*op);
}

}  // namespace tg
