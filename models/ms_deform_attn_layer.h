// MSDeformAttn: Deformable-DETR's multi-scale deformable attention module
// (fundamentalvision/Deformable-DETR, models/ops/modules/ms_deform_attn.py), with its parameter
// names (sampling_offsets, attention_weights, value_proj, output_proj) and _reset_parameters,
// over the tg::ms_deform_attn op.
//
// Shape legend: N batch, Lq queries, Lin flattened keys (sum of H_l * W_l), C d_model,
// M heads, L levels, P points per head and level.
#pragma once

#include <memory>

#include "linear.h"
#include "module.h"

namespace tg {

class MSDeformAttn : public Module {
 public:
  MSDeformAttn(int64_t d_model = 256, int64_t n_levels = 4, int64_t n_heads = 8, int64_t n_points = 4,
               DType dtype = DType::Float32, Generator* gen = nullptr);
  std::string name() const override { return "MSDeformAttn"; }

  // Deformable-DETR's init: zero sampling_offsets.weight and a bias pointing head h at angle
  // 2 pi h / M (scaled so the larger coordinate is 1, times point index + 1), zero attention
  // weights (uniform softmax), xavier_uniform value/output projections with zero biases.
  void reset_parameters(Generator* gen = nullptr);

  // query (N, Lq, C); reference_points (N, Lq, L, 2) normalised (x, y) in [0, 1], or
  // (N, Lq, L, 4) boxes (cx, cy, w, h); input_flatten (N, Lin, C); spatial_shapes (L, 2) int64 or int32
  // rows (H, W); level_start_index (L) int64 or int32; input_padding_mask (N, Lin), non-zero marks padding
  // (its values are zeroed). Returns (N, Lq, C).
  Tensor forward(const Tensor& query, const Tensor& reference_points, const Tensor& input_flatten,
                 const Tensor& spatial_shapes, const Tensor& level_start_index,
                 const Tensor& input_padding_mask = Tensor());

  int64_t d_model, n_levels, n_heads, n_points;
  std::shared_ptr<Linear> sampling_offsets;   // C -> M * L * P * 2
  std::shared_ptr<Linear> attention_weights;  // C -> M * L * P
  std::shared_ptr<Linear> value_proj;         // C -> C
  std::shared_ptr<Linear> output_proj;        // C -> C

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

}  // namespace tg
