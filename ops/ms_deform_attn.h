// Multi-scale deformable attention (Deformable DETR) on tensors and the tape.
// The maths and the coordinate convention are in ops/ms_deform_attn_kernels.h: sampling
// locations are (x, y) normalised to [0, 1], as Deformable-DETR stores them (the spec page
// says (y, x); we follow the model users port).
#pragma once

#include <array>

#include "../framework/tensor.h"

namespace tg {

// value (bs, num_keys, heads, channels); spatial_shapes (levels, 2) int64 rows (H, W);
// level_start_index (levels) int64; sampling_locations (bs, queries, heads, levels, points, 2);
// attention_weights (bs, queries, heads, levels, points) -> (bs, queries, heads * channels).
// Differentiable in value, sampling_locations and attention_weights.
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

}  // namespace tg
