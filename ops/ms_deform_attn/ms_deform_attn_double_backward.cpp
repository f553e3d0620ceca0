// Multi-scale deformable attention, twice differentiable: the recorded first-order backward
// (the tape entry `ms_deform_attn_backward`, used when a backward runs with create_graph) and
// its own backward, the double backward. The maths is in ms_deform_attn_kernels_double_backward.cpp.
//
// Under create_graph, ms_deform_attn's backward (ms_deform_attn.cpp) computes its gradients with
// the same kernel as always, then records them as outputs of an ms_deform_attn_backward entry
// whose inputs are grad_output, value, sampling_locations and attention_weights. Differentiating
// those gradients runs that entry's backward, ms_deform_attn_backward_backward_fn below: the
// upstream gradients (gg_value, gg_loc, gg_attn) of the outputs it recorded give the gradients of
// its four inputs through tg::ms_deform_attn_double_backward. That one is not recorded in turn
// (third derivatives are not implemented: create_graph reaching the entry is a tg::Error).
#include <array>

#include "../../framework/grad_mode.h"
#include "../../framework/tape.h"
#include "../elementwise.h"
#include "ms_deform_attn.h"
#include "internal/ms_deform_attn_shared.h"
#include "ms_deform_attn_kernels.h"

namespace tg {

namespace {

struct MsdaBackwardAttrs {
  std::array<bool, 3> mask;  // which of grad_value, grad_loc, grad_attn are the entry's outputs, in that order
};

// Saved: the entry's inputs (with their history under create_graph), and the level tables.
enum MsDeformAttnBackwardSaved {
  kGradOutput,
  kValue,
  kSamplingLocations,
  kAttentionWeights,
  kSpatialShapes,
  kLevelStartIndex
};

std::vector<Tensor> ms_deform_attn_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<MsdaBackwardAttrs>();
  // The upstream gradients of the outputs the entry has, in order; the others are zero.
  Tensor gg_value, gg_loc, gg_attn;
  size_t k = 0;
  if (a.mask[0]) gg_value = gg[k++];
  if (a.mask[1]) gg_loc = gg[k++];
  if (a.mask[2]) gg_attn = gg[k++];
  MsDeformAttnDoubleGrads r = ms_deform_attn_double_backward(
      ctx.saved(kValue), ctx.saved(kSpatialShapes), ctx.saved(kLevelStartIndex), ctx.saved(kSamplingLocations),
      ctx.saved(kAttentionWeights), ctx.saved(kGradOutput), gg_value, gg_loc, gg_attn,
      {ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2), ctx.needs_grad(3)});
  return {r.grad_grad_output, r.grad_value, r.grad_sampling_locations, r.grad_attention_weights};
}

// Checks one upstream gradient: undefined (zero), or of the shape and dtype of its input.
void check_upstream(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  if (!t.defined()) return;
  TG_CHECK(t.shape() == like.shape(), op, ": expected ", name, " of shape ", format_shape(like.shape()), ", got ",
           format_shape(t.shape()));
  detail::ms_deform_attn_check_dtype(op, name, t, like);
}

}  // namespace

namespace detail {

// Not twice differentiable itself: its backward calls the double-backward kernel directly.
const OpDef kMsDeformAttnBackwardOp{"ms_deform_attn_backward", "ms_deform_attn_backward_backward",
                                    "grad_output, value, sampling_locations, attention_weights",
                                    ms_deform_attn_backward_backward_fn, nullptr, false};

MsDeformAttnGrads ms_deform_attn_recorded_backward(const Tensor& grad_output, const Tensor& value,
                                                   const Tensor& spatial_shapes, const Tensor& level_start_index,
                                                   const Tensor& sampling_locations,
                                                   const Tensor& attention_weights, std::array<bool, 3> output_mask) {
  MsDeformAttnGrads r =
      ms_deform_attn_backward(value.detach(), spatial_shapes, level_start_index, sampling_locations.detach(),
                              attention_weights.detach(), grad_output.detach(), output_mask);
  if (Recorder rec{kMsDeformAttnBackwardOp, {grad_output, value, sampling_locations, attention_weights}}) {
    rec.set_attrs(MsdaBackwardAttrs{output_mask});
    rec.save(kGradOutput, grad_output);
    rec.save(kValue, value);
    rec.save(kSamplingLocations, sampling_locations);
    rec.save(kAttentionWeights, attention_weights);
    rec.save(kSpatialShapes, spatial_shapes);
    rec.save(kLevelStartIndex, level_start_index);
    std::vector<Tensor> outputs;
    for (const Tensor* t : {&r.grad_value, &r.grad_sampling_locations, &r.grad_attention_weights})
      if (t->defined()) outputs.push_back(*t);
    rec.set_outputs(outputs);
  }
  return r;
}

}  // namespace detail

MsDeformAttnDoubleGrads ms_deform_attn_double_backward(const Tensor& value, const Tensor& spatial_shapes,
                                                       const Tensor& level_start_index,
                                                       const Tensor& sampling_locations,
                                                       const Tensor& attention_weights, const Tensor& grad_output,
                                                       const Tensor& grad_grad_value,
                                                       const Tensor& grad_grad_sampling_locations,
                                                       const Tensor& grad_grad_attention_weights,
                                                       std::array<bool, 4> output_mask) {
  const char* op = "ms_deform_attn_double_backward";
  const detail::MsdaSizes s = detail::ms_deform_attn_check_inputs(op, value, spatial_shapes, level_start_index,
                                                                   sampling_locations, attention_weights);
  detail::ms_deform_attn_check_grad_output(op, s, value, grad_output);
  check_upstream(op, "grad_grad_value", grad_grad_value, value);
  check_upstream(op, "grad_grad_sampling_locations", grad_grad_sampling_locations, sampling_locations);
  check_upstream(op, "grad_grad_attention_weights", grad_grad_attention_weights, attention_weights);
  MsDeformAttnDoubleGrads r;
  if (!output_mask[0] && !output_mask[1] && !output_mask[2] && !output_mask[3]) return r;
  // 16-bit: everything below (the kernel, the forward term and their sum) runs in float32 on
  // widened copies, and each result is rounded once at the end.
  using detail::widen_contiguous;
  Tensor v = widen_contiguous(value), loc = widen_contiguous(sampling_locations);
  Tensor attn = widen_contiguous(attention_weights);
  Tensor shapes = detail::index_as_int64(spatial_shapes), start = detail::index_as_int64(level_start_index);
  Tensor go = widen_contiguous(grad_output), ggv = widen_contiguous(grad_grad_value);
  Tensor ggl = widen_contiguous(grad_grad_sampling_locations), gga = widen_contiguous(grad_grad_attention_weights);
  const DType dt = v.dtype();
  // The part of d/dgrad_output the kernel computes (from gg_loc and gg_attn) ...
  Tensor go_rest = output_mask[0] ? Tensor::empty(grad_output.shape(), dt) : Tensor();
  if (output_mask[1]) r.grad_value = Tensor::empty(value.shape(), dt);
  if (output_mask[2]) r.grad_sampling_locations = Tensor::empty(sampling_locations.shape(), dt);
  if (output_mask[3]) r.grad_attention_weights = Tensor::empty(attention_weights.shape(), dt);
  dispatch_floating(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto in = [](const Tensor& t) -> const T* { return t.defined() ? t.data<T>() : nullptr; };
    auto out = [](Tensor& t) -> T* { return t.defined() ? t.data<T>() : nullptr; };
    kernels::ms_deform_attn_double_backward<T>(
        v.data<T>(), shapes.data<int64_t>(), start.data<int64_t>(), loc.data<T>(), attn.data<T>(), go.data<T>(),
        in(ggv), in(ggl), in(gga), out(go_rest), out(r.grad_value), out(r.grad_sampling_locations),
        out(r.grad_attention_weights), s.bs, s.num_keys, s.heads, s.channels, s.levels, s.queries, s.points);
  });
  // ... plus the term from gg_value, which is the forward itself on gg_value:
  // d/dgo <gg_value, scatter(a * w_k * go)> = ms_deform_attn(gg_value, loc, a). Not recorded,
  // like the rest of the result: a result with the history of this one term only would give
  // silently partial third derivatives.
  NoGradGuard no_grad;
  if (output_mask[0])
    r.grad_grad_output = ggv.defined() ? add(ms_deform_attn(ggv, shapes, start, loc, attn), go_rest) : go_rest;
  for (Tensor* t : {&r.grad_grad_output, &r.grad_value, &r.grad_sampling_locations, &r.grad_attention_weights})
    *t = round_result(*t, value.dtype());
  return r;
}

}  // namespace tg
