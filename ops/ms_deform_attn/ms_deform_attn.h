// Multi-scale deformable attention (Deformable DETR) on tensors and the tape.
// The maths and the coordinate convention are in ops/ms_deform_attn/ms_deform_attn_kernels.h: sampling
// locations are (x, y) normalised to [0, 1], as Deformable-DETR stores them (the spec page
// says (y, x); we follow the model users port).
#pragma once

#include <array>

#include "../../framework/tensor.h"

namespace tg {

// value (bs, num_keys, heads, channels); spatial_shapes (levels, 2) int64 or int32 rows (H, W);
// level_start_index (levels) int64 or int32; sampling_locations (bs, queries, heads, levels,
// points, 2); attention_weights (bs, queries, heads, levels, points) -> (bs, queries, heads * channels).
// Differentiable in value, sampling_locations and attention_weights, twice (create_graph).
// Dtypes (here and in the kernel API below): the floating tensors all float32, float64, bfloat16
// or float16, one dtype per call (another is a tg::Error naming the argument); bfloat16 and
// float16 are computed in float32 and each output rounded once, as PyTorch does on the CPU, and
// gradients come back in value's dtype. int32 and int64 tables give identical results.
Tensor ms_deform_attn(const Tensor& value, const Tensor& spatial_shapes, const Tensor& level_start_index,
                      const Tensor& sampling_locations, const Tensor& attention_weights);

struct MsDeformAttnGrads {
  Tensor grad_value, grad_sampling_locations, grad_attention_weights;  // undefined where not asked for
};

// The kernel API: the three gradients for grad_output (bs, queries, heads * channels),
// computing only those output_mask asks for (value, sampling_locations, attention_weights).
MsDeformAttnGrads ms_deform_attn_backward(const Tensor& value, const Tensor& spatial_shapes,
                                          const Tensor& level_start_index, const Tensor& sampling_locations,
                                          const Tensor& attention_weights, const Tensor& grad_output,
                                          std::array<bool, 3> output_mask = {true, true, true});

struct MsDeformAttnDoubleGrads {
  Tensor grad_grad_output, grad_value, grad_sampling_locations, grad_attention_weights;  // undefined where not asked
};

// The backward of ms_deform_attn_backward (second derivatives; the maths is in
// ms_deform_attn_kernels_double_backward.cpp): given the upstream gradients of its three outputs,
// grad_grad_value (bs, num_keys, heads, channels), grad_grad_sampling_locations and
// grad_grad_attention_weights (each undefined for zero), the gradients of
//   <grad_grad_value, grad_value> + <grad_grad_loc, grad_loc> + <grad_grad_attn, grad_attn>
// with respect to grad_output, value, sampling_locations and attention_weights, computing only
// those output_mask asks for (in that order). This is what create_graph differentiates through;
// like ms_deform_attn_backward, it records nothing itself (no third derivatives).
MsDeformAttnDoubleGrads ms_deform_attn_double_backward(
    const Tensor& value, const Tensor& spatial_shapes, const Tensor& level_start_index,
    const Tensor& sampling_locations, const Tensor& attention_weights, const Tensor& grad_output,
    const Tensor& grad_grad_value, const Tensor& grad_grad_sampling_locations,
    const Tensor& grad_grad_attention_weights, std::array<bool, 4> output_mask = {true, true, true, true});

}  // namespace tg
