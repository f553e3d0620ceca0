// Adaptive average pooling in 1, 2 and 3 spatial dims: argument checking, dtype dispatch and
// the tape, one implementation for the three ranks (K = the number of spatial dims) over one
// kernel (kernels::adaptive_avg_pool3d_*, pool_kernels.h). interpolate(mode Area) is this op.
//
//   adaptive_avg_poolKd: dx = grad / window size over the window  (saves nothing)
//
// Twice differentiable: the backward is linear in grad and its adjoint is the forward pooling,
// so under create_graph adaptive_avg_poolKd_backward is recorded and its backward is
// adaptive_avg_poolKd of the new direction. A bfloat16 or float16 tensor is pooled by the
// float32 kernel (widened) and rounded once.
#include <algorithm>

#include "../../framework/autocast.h"
#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "../internal/reduced_float.h"
#include "../internal/samples.h"
#include "pool.h"
#include "pool_kernels.h"

namespace tg {

namespace {

// What the messages of rank K call its dims.
struct RankNames {
  const char* unbatched;  // "(C, H, W)"
  const char* batched;    // "(N, C, H, W)"
  const char* non_zero;   // "C, H and W"
  const char* counts;     // "1 or 2 values"
};

const RankNames& names_of(int K) {
  static const RankNames names[3] = {{"(C, L)", "(N, C, L)", "C and L", "1 value"},
                                     {"(C, H, W)", "(N, C, H, W)", "C, H and W", "1 or 2 values"},
                                     {"(C, D, H, W)", "(N, C, D, H, W)", "C, D, H and W", "1 or 3 values"}};
  return names[K - 1];
}

// (N, C, spatial...) or (C, spatial...) with non-zero C and spatial sizes (a zero batch is
// allowed, as in PyTorch).
void check_input_shape(const char* op, int K, const Shape& s) {
  const RankNames& n = names_of(K);
  TG_CHECK(s.size() == size_t(K + 1) || s.size() == size_t(K + 2), op, ": expected input to have ", K + 1, " ",
           n.unbatched, " or ", K + 2, " ", n.batched, " dims, got ", format_shape(s));
  TG_CHECK(std::all_of(s.end() - (K + 1), s.end(), [](int64_t v) { return v > 0; }), op,
           ": expected input with non-zero ", n.non_zero, ", got ", format_shape(s));
  checked_numel(s, op, "the input size");  // a backward's input_size comes from the user
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  TG_CHECK(t.defined(), op, ": expected a defined ", what);
  TG_CHECK(is_floating(t.dtype()), op, ": expected ", what, " to be floating, got ", dtype_name(t.dtype()));
}

// One value (every dim) or K, each >= 1.
IntList checked_output_size(const char* op, int K, const IntList& output_size) {
  TG_CHECK(output_size.size() == 1 || output_size.size() == size_t(K), op, ": expected output_size to have ",
           names_of(K).counts, ", got ", output_size.size(), " values ", format_shape(output_size));
  IntList out = output_size.size() == 1 ? IntList(K, output_size[0]) : output_size;
  TG_CHECK(std::all_of(out.begin(), out.end(), [](int64_t v) { return v > 0; }), op,
           ": expected output_size to be positive, got ", format_shape(out));
  return out;
}

Shape with_spatial(const Shape& input, int K, const IntList& spatial) {
  Shape out(input.begin(), input.end() - K);
  out.insert(out.end(), spatial.begin(), spatial.end());
  return out;
}

// The kernel's view: leading dims flattened into planes, the K spatial dims right-aligned in
// (D, H, W) with the missing ones 1.
kernels::AdaptivePoolParams params_of(const Shape& in, const Shape& out, int K) {
  kernels::AdaptivePoolParams p;
  p.NC = 1;
  for (size_t i = 0; i + K < in.size(); ++i) p.NC *= in[i];
  int64_t* in_dims[3] = {&p.D, &p.H, &p.W};
  int64_t* out_dims[3] = {&p.Do, &p.Ho, &p.Wo};
  for (int d = 0; d < K; ++d) {
    *in_dims[3 - K + d] = in[in.size() - K + d];
    *out_dims[3 - K + d] = out[out.size() - K + d];
  }
  return p;
}

const char* forward_name(int K) {
  static const char* names[3] = {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"};
  return names[K - 1];
}
const char* backward_name(int K) {
  static const char* names[3] = {"adaptive_avg_pool1d_backward", "adaptive_avg_pool2d_backward",
                                 "adaptive_avg_pool3d_backward"};
  return names[K - 1];
}

template <int K>
Tensor adaptive_avg_pool(const Tensor& input, const IntList& output_size);
template <int K>
Tensor adaptive_avg_pool_backward(const Tensor& grad_output, const Shape& input_size);

template <int K>
std::vector<Tensor> backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {adaptive_avg_pool_backward<K>(ctx.create_graph() ? g[0] : g[0].detach(), ctx.input_shape(0))};
}

// The backward's adjoint is the forward pooling to grad_output's (the forward output's) size.
template <int K>
std::vector<Tensor> backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const Shape pooled = ctx.input_shape(0);  // this backward's input, grad_output
  return {adaptive_avg_pool<K>(gg[0], IntList(pooled.end() - K, pooled.end()))};
}

using Inputs = std::vector<Tensor>;

SampleCase forward_case(std::string name, Shape in, IntList out, Tensor (*pool)(const Tensor&, const IntList&)) {
  return {name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
          [=](const Inputs& x) { return Inputs{pool(x[0], out)}; }};
}

SampleCase backward_case(std::string name, Shape grad, Shape in,
                         Tensor (*pool_backward)(const Tensor&, const Shape&)) {
  return {name, [grad](DType dt) { return Inputs{sample_tensor(grad, dt)}; },
          [=](const Inputs& x) { return Inputs{pool_backward(x[0], in)}; }};
}

std::vector<SampleCase> samples1d() {
  return {forward_case("[2,3,9] -> [4], overlapping windows", {2, 3, 9}, {4}, adaptive_avg_pool1d),
          forward_case("[3,4] (C,L) -> [7], more out than in", {3, 4}, {7}, adaptive_avg_pool1d),
          forward_case("[1,2,5] -> [1] (global)", {1, 2, 5}, {1}, adaptive_avg_pool1d)};
}
std::vector<SampleCase> samples2d() {
  return {forward_case("[2,2,7,9] -> [3,4], overlapping windows", {2, 2, 7, 9}, {3, 4}, adaptive_avg_pool2d),
          forward_case("[3,4,5] (C,H,W) -> [6,2], more rows out than in", {3, 4, 5}, {6, 2}, adaptive_avg_pool2d),
          forward_case("[1,2,5,5] -> [1] (global)", {1, 2, 5, 5}, {1}, adaptive_avg_pool2d)};
}
std::vector<SampleCase> samples3d() {
  return {forward_case("[1,2,5,4,6] -> [2,3,4], overlapping windows", {1, 2, 5, 4, 6}, {2, 3, 4}, adaptive_avg_pool3d),
          forward_case("[2,3,2,4] (C,D,H,W) -> [3,1,5]", {2, 3, 2, 4}, {3, 1, 5}, adaptive_avg_pool3d),
          forward_case("[1,1,3,3,3] -> [1] (global)", {1, 1, 3, 3, 3}, {1}, adaptive_avg_pool3d)};
}
std::vector<SampleCase> backward_samples1d() {
  return {backward_case("[2,3,4] grad -> [2,3,9]", {2, 3, 4}, {2, 3, 9}, adaptive_avg_pool1d_backward)};
}
std::vector<SampleCase> backward_samples2d() {
  return {backward_case("[2,3,4] grad -> [2,7,5]", {2, 3, 4}, {2, 7, 5}, adaptive_avg_pool2d_backward)};
}
std::vector<SampleCase> backward_samples3d() {
  return {backward_case("[1,2,2,3,2] grad -> [1,2,5,4,3]", {1, 2, 2, 3, 2}, {1, 2, 5, 4, 3},
                        adaptive_avg_pool3d_backward)};
}

}  // namespace

const OpDef kAdaptiveAvgPoolOps[3] = {
    {"adaptive_avg_pool1d", "adaptive_avg_pool1d_backward", "input", backward_fn<1>, samples1d, true},
    {"adaptive_avg_pool2d", "adaptive_avg_pool2d_backward", "input", backward_fn<2>, samples2d, true},
    {"adaptive_avg_pool3d", "adaptive_avg_pool3d_backward", "input", backward_fn<3>, samples3d, true}};
const OpDef kAdaptiveAvgPoolBackwardOps[3] = {
    {"adaptive_avg_pool1d_backward", "adaptive_avg_pool1d_backward_backward", "grad_output",
     backward_backward_fn<1>, backward_samples1d, true},
    {"adaptive_avg_pool2d_backward", "adaptive_avg_pool2d_backward_backward", "grad_output",
     backward_backward_fn<2>, backward_samples2d, true},
    {"adaptive_avg_pool3d_backward", "adaptive_avg_pool3d_backward_backward", "grad_output",
     backward_backward_fn<3>, backward_samples3d, true}};

namespace {

template <int K>
Tensor adaptive_avg_pool(const Tensor& input, const IntList& output_size) {
  const char* op = forward_name(K);
  check_floating(op, "input", input);
  check_input_shape(op, K, input.shape());
  const Shape out_shape = with_spatial(input.shape(), K, checked_output_size(op, K, output_size));
  checked_numel(out_shape, op, "the output shape");
  Tensor x = detail::widen(input.detach().contiguous());  // accepts any strides
  Tensor out = Tensor::empty(out_shape, x.dtype());
  const kernels::AdaptivePoolParams p = params_of(input.shape(), out_shape, K);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::adaptive_avg_pool3d_forward<T>(x.data<T>(), out.data<T>(), p);
  });
  out = round_result(out, input.dtype());
  if (Recorder rec{kAdaptiveAvgPoolOps[K - 1], {input}}) rec.set_outputs({out});
  return out;
}

template <int K>
Tensor adaptive_avg_pool_backward(const Tensor& grad_output, const Shape& input_size) {
  const char* op = backward_name(K);
  check_input_shape(op, K, input_size);
  check_floating(op, "grad_output", grad_output);
  const Shape& gs = grad_output.shape();
  TG_CHECK(gs.size() == input_size.size() && std::equal(input_size.begin(), input_size.end() - K, gs.begin()) &&
               std::all_of(gs.end() - K, gs.end(), [](int64_t v) { return v > 0; }),
           op, ": expected grad_output with the leading dims of input_size ", format_shape(input_size),
           " and a non-empty output size, got ", format_shape(gs));
  Tensor g = detail::widen(grad_output.contiguous());
  Tensor grad_input = Tensor::empty(input_size, g.dtype());
  const kernels::AdaptivePoolParams p = params_of(input_size, gs, K);
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::adaptive_avg_pool3d_backward<T>(g.data<T>(), grad_input.data<T>(), p);
  });
  grad_input = round_result(grad_input, grad_output.dtype());
  if (Recorder rec{kAdaptiveAvgPoolBackwardOps[K - 1], {grad_output}}) rec.set_outputs({grad_input});
  return grad_input;
}

}  // namespace

Tensor adaptive_avg_pool1d(const Tensor& input, const IntList& output_size) {
  return adaptive_avg_pool<1>(input, output_size);
}
Tensor adaptive_avg_pool2d(const Tensor& input, const IntList& output_size) {
  return adaptive_avg_pool<2>(input, output_size);
}
Tensor adaptive_avg_pool3d(const Tensor& input, const IntList& output_size) {
  if (auto c = autocast::to_float32(input)) return adaptive_avg_pool3d(c[0], output_size);  // framework/autocast.h
  return adaptive_avg_pool<3>(input, output_size);
}
Tensor adaptive_avg_pool1d_backward(const Tensor& grad_output, const Shape& input_size) {
  return adaptive_avg_pool_backward<1>(grad_output, input_size);
}
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size) {
  return adaptive_avg_pool_backward<2>(grad_output, input_size);
}
Tensor adaptive_avg_pool3d_backward(const Tensor& grad_output, const Shape& input_size) {
  return adaptive_avg_pool_backward<3>(grad_output, input_size);
}

void register_adaptive_pool_ops(Registry& r) {
  for (const OpDef& op : kAdaptiveAvgPoolOps) r.add(op);
  for (const OpDef& op : kAdaptiveAvgPoolBackwardOps) r.add(op);
}

}  // namespace tg
