// Deformable-DETR's transformer (fundamentalvision/Deformable-DETR,
// models/deformable_transformer.py) with its state_dict names: encoder and decoder layers,
// their stacks ("encoder.layers.0.self_attn.value_proj.weight", ...) and the single-stage
// DeformableTransformer (level_embed, reference_points). Dropout is applied while training,
// as PyTorch; eval() turns it off.
//
// Shape legend: N batch, Lin flattened keys over levels, Q queries, C d_model, L levels.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention.h"
#include "layers_norm_dropout_embedding.h"
#include "ms_deform_attn_layer.h"
#include "module_list.h"
#include "sequential.h"

namespace tg {

// Options shared by the layers; the defaults are Deformable-DETR's.
struct DeformableTransformerOptions {
  int64_t d_model = 256;
  int64_t n_heads = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 1024;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  int64_t n_levels = 4;
  int64_t enc_n_points = 4;
  int64_t dec_n_points = 4;
  bool return_intermediate_dec = false;
  DType dtype = DType::Float32;
};

class DeformableTransformerEncoderLayer : public Module {
 public:
  DeformableTransformerEncoderLayer(int64_t d_model = 256, int64_t d_ffn = 1024, double dropout = 0.1,
                                    const std::string& activation = "relu", int64_t n_levels = 4,
                                    int64_t n_heads = 8, int64_t n_points = 4, DType dtype = DType::Float32,
                                    Generator* gen = nullptr);
  std::string name() const override { return "DeformableTransformerEncoderLayer"; }

  // src, pos (N, Lin, C) (pos may be undefined); reference_points (N, Lin, L, 2);
  // padding_mask (N, Lin) or undefined. Post-norm: norm1(src + attn), norm2(src + ffn).
  Tensor forward(const Tensor& src, const Tensor& pos, const Tensor& reference_points, const Tensor& spatial_shapes,
                 const Tensor& level_start_index, const Tensor& padding_mask = Tensor());

  std::shared_ptr<MSDeformAttn> self_attn;
  std::shared_ptr<Dropout> dropout1;
  std::shared_ptr<LayerNorm> norm1;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout2;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<Dropout> dropout3;
  std::shared_ptr<LayerNorm> norm2;
  std::string activation;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

class DeformableTransformerDecoderLayer : public Module {
 public:
  DeformableTransformerDecoderLayer(int64_t d_model = 256, int64_t d_ffn = 1024, double dropout = 0.1,
                                    const std::string& activation = "relu", int64_t n_levels = 4,
                                    int64_t n_heads = 8, int64_t n_points = 4, DType dtype = DType::Float32,
                                    Generator* gen = nullptr);
  std::string name() const override { return "DeformableTransformerDecoderLayer"; }

  // tgt, query_pos (N, Q, C); reference_points (N, Q, L, 2 or 4); src (N, Lin, C);
  // src_padding_mask (N, Lin) or undefined. Self-attention over the queries (norm2), deformable
  // cross-attention into src (norm1), then the FFN (norm3), as the original orders them.
  Tensor forward(const Tensor& tgt, const Tensor& query_pos, const Tensor& reference_points, const Tensor& src,
                 const Tensor& spatial_shapes, const Tensor& level_start_index,
                 const Tensor& src_padding_mask = Tensor());

  std::shared_ptr<MSDeformAttn> cross_attn;
  std::shared_ptr<Dropout> dropout1;
  std::shared_ptr<LayerNorm> norm1;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Dropout> dropout2;
  std::shared_ptr<LayerNorm> norm2;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout3;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<Dropout> dropout4;
  std::shared_ptr<LayerNorm> norm3;
  std::string activation;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

// The reference point of every flattened key: its pixel centre ((j + 0.5) / (W valid),
// (i + 0.5) / (H valid)) on its own level, then scaled by each level's valid ratio:
// spatial_shapes (L, 2) int64, valid_ratios (N, L, 2) as (w, h) -> (N, Lin, L, 2). No history.
Tensor get_reference_points(const Tensor& spatial_shapes, const Tensor& valid_ratios);

// The fraction of a padded image that is valid: mask (N, H, W), non-zero = padding
// -> (N, 2) as (valid W / W, valid H / H) in dtype, counted along the first row and column.
Tensor get_valid_ratio(const Tensor& mask, DType dtype);

class DeformableTransformerEncoder : public Module {
 public:
  // num_layers layers, each built by a call of make_layer(), registered as "layers.<i>".
  DeformableTransformerEncoder(int64_t num_layers,
                               const std::function<std::shared_ptr<DeformableTransformerEncoderLayer>()>& make_layer);
  std::string name() const override { return "DeformableTransformerEncoder"; }
  Tensor forward(const Tensor& src, const Tensor& spatial_shapes, const Tensor& level_start_index,
                 const Tensor& valid_ratios, const Tensor& pos = Tensor(), const Tensor& padding_mask = Tensor());

  std::shared_ptr<ModuleList<DeformableTransformerEncoderLayer>> layers;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

struct DecoderOutput {
  Tensor output;            // (N, Q, C), or (layers, N, Q, C) with return_intermediate
  Tensor reference_points;  // the last (N, Q, 2|4), or one per layer stacked with return_intermediate
};

class DeformableTransformerDecoder : public Module {
 public:
  DeformableTransformerDecoder(int64_t num_layers,
                               const std::function<std::shared_ptr<DeformableTransformerDecoderLayer>()>& make_layer,
                               bool return_intermediate = false);
  std::string name() const override { return "DeformableTransformerDecoder"; }

  // reference_points (N, Q, 2) points or (N, Q, 4) boxes, normalised to the valid region;
  // each layer sees them scaled by the valid ratios of every level.
  DecoderOutput forward(const Tensor& tgt, const Tensor& reference_points, const Tensor& src,
                        const Tensor& spatial_shapes, const Tensor& level_start_index, const Tensor& valid_ratios,
                        const Tensor& query_pos = Tensor(), const Tensor& src_padding_mask = Tensor());

  // Iterative box refinement (the original's bbox_embed hack), off when empty: after layer i,
  // reference_points = refine(i, output, reference_points), detached before the next layer.
  std::function<Tensor(int64_t, const Tensor&, const Tensor&)> refine;

  std::shared_ptr<ModuleList<DeformableTransformerDecoderLayer>> layers;
  bool return_intermediate;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

struct DeformableTransformerOutput {
  Tensor hs;                    // decoder output (N, Q, C) (stacked per layer with return_intermediate)
  Tensor init_reference;        // (N, Q, 2) sigmoid(reference_points(query_pos))
  Tensor inter_references;      // the decoder's reference points
  Tensor memory;                // encoder output (N, Lin, C)
  Tensor spatial_shapes, level_start_index, valid_ratios, mask_flatten;
};

// The single-stage transformer (no two-stage proposals).
class DeformableTransformer : public Module {
 public:
  explicit DeformableTransformer(const DeformableTransformerOptions& options = {}, Generator* gen = nullptr);
  std::string name() const override { return "DeformableTransformer"; }

  // The original's init: xavier_uniform on every parameter with 2+ dims, then each
  // MSDeformAttn's own reset, reference_points xavier with a zero bias, level_embed N(0, 1).
  void reset_parameters(Generator* gen = nullptr);

  // srcs[l] (N, C, H_l, W_l); masks[l] (N, H_l, W_l) non-zero = padding; pos_embeds[l] like
  // srcs[l]; query_embed (Q, 2C) = [query_pos | tgt].
  DeformableTransformerOutput forward(const std::vector<Tensor>& srcs, const std::vector<Tensor>& masks,
                                      const std::vector<Tensor>& pos_embeds, const Tensor& query_embed);

  DeformableTransformerOptions options;
  std::shared_ptr<DeformableTransformerEncoder> encoder;
  std::shared_ptr<DeformableTransformerDecoder> decoder;
  Tensor level_embed;  // (L, C)
  std::shared_ptr<Linear> reference_points;  // C -> 2

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

}  // namespace tg
