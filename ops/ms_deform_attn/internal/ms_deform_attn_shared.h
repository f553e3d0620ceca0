// What ms_deform_attn.cpp (the op, its first-order backward) and ms_deform_attn_double_backward.cpp
// (the recorded backward and its own backward) share. Not part of the public API.
#pragma once

#include <array>
#include <cstdint>

#include "../../../framework/registry.h"
#include "../../../framework/tensor.h"
#include "../../internal/reduced_float.h"
#include "../ms_deform_attn.h"

namespace tg::detail {

// The sizes every tensor must agree on, read from value and sampling_locations.
struct MsdaSizes {
  int64_t bs, num_keys, heads, channels, levels, queries, points;
};

// Validates value, spatial_shapes, level_start_index, sampling_locations and attention_weights
// together (shapes, dtypes, level sizes and offsets), naming `op` in every tg::Error.
MsdaSizes ms_deform_attn_check_inputs(const char* op, const Tensor& value, const Tensor& spatial_shapes,
                                      const Tensor& level_start_index, const Tensor& sampling_locations,
                                      const Tensor& attention_weights);

// A floating tensor (`name`) of another dtype than value's is an error naming it: the floating
// tensors of one call share value's dtype (no promotion).
void ms_deform_attn_check_dtype(const char* op, const char* name, const Tensor& t, const Tensor& value);

// spatial_shapes or level_start_index (int32 or int64) as a contiguous int64 tensor, which is
// what the kernels read: converted once here, exactly.
inline Tensor index_as_int64(const Tensor& t) { return convert(t, DType::Int64).contiguous(); }

// A contiguous, detached copy the kernels can read: float32 for a 16-bit tensor (the kernels
// compute 16-bit tensors in float32), the tensor itself otherwise; undefined stays undefined.
inline Tensor widen_contiguous(const Tensor& t) { return t.defined() ? widen(t.detach()).contiguous() : t; }

// Checks that grad_output is (bs, queries, heads * channels) in value's dtype.
void ms_deform_attn_check_grad_output(const char* op, const MsdaSizes& s, const Tensor& value,
                                      const Tensor& grad_output);

// The first-order backward as a recorded tape entry, `ms_deform_attn_backward` (inputs
// grad_output, value, sampling_locations, attention_weights), for a backward run with
// create_graph: its gradients can then be differentiated again. The tensors keep their history;
// output_mask as for tg::ms_deform_attn_backward.
MsDeformAttnGrads ms_deform_attn_recorded_backward(const Tensor& grad_output, const Tensor& value,
                                                   const Tensor& spatial_shapes, const Tensor& level_start_index,
                                                   const Tensor& sampling_locations,
                                                   const Tensor& attention_weights, std::array<bool, 3> output_mask);

// The tape entry of ms_deform_attn_recorded_backward (registered with ms_deform_attn).
extern const OpDef kMsDeformAttnBackwardOp;

}  // namespace tg::detail
