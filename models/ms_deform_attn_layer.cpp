// The module around tg::ms_deform_attn. The sampling locations are built from differentiable
// ops so that gradients reach the offsets and (for box refinement) the reference points:
//   2 coordinates: loc = ref + offset / (W_l, H_l)          (offsets in pixels of level l)
//   4 coordinates: loc = ref_xy + offset / P * ref_wh * 0.5 (offsets in fractions of the box)
#include "ms_deform_attn_layer.h"

#include <cmath>

#include "../ops/elementwise.h"
#include "../ops/ms_deform_attn/ms_deform_attn.h"
#include "../ops/softmax.h"
#include "../ops/where.h"
#include "../framework/grad_mode.h"
#include "init.h"

namespace tg {

MSDeformAttn::MSDeformAttn(int64_t d_model_, int64_t n_levels_, int64_t n_heads_, int64_t n_points_, DType dtype,
                           Generator* gen)
    : d_model(d_model_), n_levels(n_levels_), n_heads(n_heads_), n_points(n_points_) {
  TG_CHECK(d_model > 0 && n_heads > 0 && d_model % n_heads == 0, "MSDeformAttn: expected d_model (", d_model,
           ") to be a positive multiple of n_heads (", n_heads, ")");
  TG_CHECK(n_levels > 0 && n_points > 0, "MSDeformAttn: expected positive n_levels and n_points, got ", n_levels,
           " and ", n_points);
  const int64_t samples = n_heads * n_levels * n_points;
  sampling_offsets = add_module("sampling_offsets", std::make_shared<Linear>(d_model, samples * 2, true, dtype, gen));
  attention_weights = add_module("attention_weights", std::make_shared<Linear>(d_model, samples, true, dtype, gen));
  value_proj = add_module("value_proj", std::make_shared<Linear>(d_model, d_model, true, dtype, gen));
  output_proj = add_module("output_proj", std::make_shared<Linear>(d_model, d_model, true, dtype, gen));
  reset_parameters(gen);
}

void MSDeformAttn::reset_parameters(Generator* gen) {
  NoGradGuard no_grad;
  init::zeros_(sampling_offsets->weight);
  // Head h looks along direction (cos, sin)(2 pi h / M), normalised by its larger |coordinate|
  // so the first point sits on the unit square's border; point p goes p + 1 times as far. In
  // float32, step by step, as Deformable DETR's _reset_parameters computes it (so the bias is
  // its bits, up to an ulp of cos and sin: cos(pi / 2) is -4.4e-8 there, not 0).
  std::vector<float> bias(static_cast<size_t>(n_heads * n_levels * n_points * 2));
  const float step = static_cast<float>(2.0 * M_PI / static_cast<double>(n_heads));
  for (int64_t h = 0; h < n_heads; ++h) {
    const float theta = static_cast<float>(h) * step;
    float gx = std::cos(theta), gy = std::sin(theta);
    const float norm = std::max(std::abs(gx), std::abs(gy));
    gx /= norm;
    gy /= norm;
    for (int64_t l = 0; l < n_levels; ++l)
      for (int64_t p = 0; p < n_points; ++p) {
        const size_t i = static_cast<size_t>(((h * n_levels + l) * n_points + p) * 2);
        bias[i] = gx * static_cast<float>(p + 1);
        bias[i + 1] = gy * static_cast<float>(p + 1);
      }
  }
  sampling_offsets->bias.copy_(from_vector(bias, sampling_offsets->bias.shape()).to(sampling_offsets->bias.dtype()));
  init::zeros_(attention_weights->weight);
  init::zeros_(attention_weights->bias);
  init::xavier_uniform_(value_proj->weight, 1.0, gen);
  init::zeros_(value_proj->bias);
  init::xavier_uniform_(output_proj->weight, 1.0, gen);
  init::zeros_(output_proj->bias);
}

Tensor MSDeformAttn::forward(const Tensor& query, const Tensor& reference_points, const Tensor& input_flatten,
                             const Tensor& spatial_shapes, const Tensor& level_start_index,
                             const Tensor& input_padding_mask) {
  TG_CHECK(query.defined() && query.dim() == 3 && query.size(2) == d_model,
           "MSDeformAttn: expected query of shape (N, Lq, ", d_model, "), got ", describe_shape(query));
  TG_CHECK(input_flatten.defined() && input_flatten.dim() == 3 && input_flatten.size(0) == query.size(0) &&
               input_flatten.size(2) == d_model,
           "MSDeformAttn: expected input_flatten of shape (", query.size(0), ", Lin, ", d_model, "), got ",
           describe_shape(input_flatten));
  const int64_t N = query.size(0), Lq = query.size(1), Lin = input_flatten.size(1);
  const int64_t M = n_heads, L = n_levels, P = n_points;
  TG_CHECK(reference_points.defined() && reference_points.dim() == 4 && reference_points.size(0) == N &&
               reference_points.size(1) == Lq && reference_points.size(2) == L &&
               (reference_points.size(3) == 2 || reference_points.size(3) == 4),
           "MSDeformAttn: expected reference_points of shape (", N, ", ", Lq, ", ", L, ", 2 or 4), got ",
           describe_shape(reference_points));
  TG_CHECK(spatial_shapes.defined() &&
               (spatial_shapes.dtype() == DType::Int64 || spatial_shapes.dtype() == DType::Int32) &&
               spatial_shapes.dim() == 2 && spatial_shapes.size(0) == L && spatial_shapes.size(1) == 2,
           "MSDeformAttn: expected spatial_shapes int64 or int32 of shape (", L, ", 2), got ",
           describe_shape(spatial_shapes), spatial_shapes.defined() ? " " : "",
           spatial_shapes.defined() ? dtype_name(spatial_shapes.dtype()) : "");
  if (input_padding_mask.defined())
    TG_CHECK(input_padding_mask.shape() == Shape({N, Lin}), "MSDeformAttn: expected input_padding_mask of shape (",
             N, ", ", Lin, "), got ", format_shape(input_padding_mask.shape()));

  Tensor value = value_proj->forward(input_flatten);
  if (input_padding_mask.defined()) value = masked_fill(value, input_padding_mask.unsqueeze(2), 0.0);
  value = value.reshape({N, Lin, M, d_model / M});

  Tensor offsets = sampling_offsets->forward(query).reshape({N, Lq, M, L, P, 2});
  Tensor weights = softmax(attention_weights->forward(query).reshape({N, Lq, M, L * P}), -1).reshape({N, Lq, M, L, P});

  Tensor locations;
  if (reference_points.size(3) == 2) {
    // (W_l, H_l) per level, in the query's dtype: offsets are in pixels of their level.
    std::vector<int64_t> hw = spatial_shapes.to(DType::Int64).to_vector<int64_t>();
    std::vector<double> normalizer(static_cast<size_t>(L * 2));
    for (int64_t l = 0; l < L; ++l) {
      normalizer[static_cast<size_t>(2 * l)] = static_cast<double>(hw[static_cast<size_t>(2 * l + 1)]);
      normalizer[static_cast<size_t>(2 * l + 1)] = static_cast<double>(hw[static_cast<size_t>(2 * l)]);
    }
    Tensor norm = from_vector(normalizer, {1, 1, 1, L, 1, 2}).to(query.dtype());
    locations = reference_points.reshape({N, Lq, 1, L, 1, 2}) + offsets / norm;
  } else {
    Tensor xy = reference_points.narrow(3, 0, 2).reshape({N, Lq, 1, L, 1, 2});
    Tensor wh = reference_points.narrow(3, 2, 2).reshape({N, Lq, 1, L, 1, 2});
    locations = xy + offsets / static_cast<double>(P) * wh * 0.5;
  }
  Tensor out = ms_deform_attn(value, spatial_shapes, level_start_index, locations, weights);
  return output_proj->forward(out);
}

}  // namespace tg
