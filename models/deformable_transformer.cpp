// Deformable-DETR's encoder/decoder layers and stacks. The layers are post-norm residual
// blocks; the only subtlety is where the positional embeddings enter: added to the queries
// of the attentions (and the keys of the decoder's self-attention), never to the values.
#include "deformable_transformer.h"

#include "../framework/grad_mode.h"
#include "../ops/activation.h"
#include "../ops/elementwise.h"
#include "../ops/shape.h"
#include "init.h"

namespace tg {

namespace {

Tensor with_pos_embed(const Tensor& x, const Tensor& pos) { return pos.defined() ? x + pos : x; }

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "gelu" ? gelu(x) : relu(x);
}

void check_activation(const std::string& activation, const char* who) {
  TG_CHECK(activation == "relu" || activation == "gelu", who, ": expected activation relu or gelu, got '",
           activation, "'");
}

}  // namespace

DeformableTransformerEncoderLayer::DeformableTransformerEncoderLayer(int64_t d_model, int64_t d_ffn, double dropout,
                                                                     const std::string& activation_, int64_t n_levels,
                                                                     int64_t n_heads, int64_t n_points, DType dtype,
                                                                     Generator* gen)
    : activation(activation_) {
  check_activation(activation, "DeformableTransformerEncoderLayer");
  self_attn = add_module("self_attn", std::make_shared<MSDeformAttn>(d_model, n_levels, n_heads, n_points, dtype, gen));
  dropout1 = add_module("dropout1", std::make_shared<Dropout>(dropout, gen));
  norm1 = add_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, 1e-5, true, dtype));
  linear1 = add_module("linear1", std::make_shared<Linear>(d_model, d_ffn, true, dtype, gen));
  dropout2 = add_module("dropout2", std::make_shared<Dropout>(dropout, gen));
  linear2 = add_module("linear2", std::make_shared<Linear>(d_ffn, d_model, true, dtype, gen));
  dropout3 = add_module("dropout3", std::make_shared<Dropout>(dropout, gen));
  norm2 = add_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, 1e-5, true, dtype));
}

Tensor DeformableTransformerEncoderLayer::forward(const Tensor& src, const Tensor& pos, const Tensor& reference_points,
                                                  const Tensor& spatial_shapes, const Tensor& level_start_index,
                                                  const Tensor& padding_mask) {
  Tensor attn = self_attn->forward(with_pos_embed(src, pos), reference_points, src, spatial_shapes,
                                   level_start_index, padding_mask);
  Tensor x = norm1->forward(src + dropout1->forward(attn));
  Tensor ffn = linear2->forward(dropout2->forward(activate(activation, linear1->forward(x))));
  return norm2->forward(x + dropout3->forward(ffn));
}

DeformableTransformerDecoderLayer::DeformableTransformerDecoderLayer(int64_t d_model, int64_t d_ffn, double dropout,
                                                                     const std::string& activation_, int64_t n_levels,
                                                                     int64_t n_heads, int64_t n_points, DType dtype,
                                                                     Generator* gen)
    : activation(activation_) {
  check_activation(activation, "DeformableTransformerDecoderLayer");
  cross_attn = add_module("cross_attn", std::make_shared<MSDeformAttn>(d_model, n_levels, n_heads, n_points, dtype, gen));
  dropout1 = add_module("dropout1", std::make_shared<Dropout>(dropout, gen));
  norm1 = add_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, 1e-5, true, dtype));
  // batch_first: the original transposes to (Q, N, C) and back around a batch-second module;
  // the parameters and the result are the same.
  self_attn = add_module("self_attn",
                         std::make_shared<MultiheadAttention>(d_model, n_heads, dropout, true, true, dtype, gen));
  dropout2 = add_module("dropout2", std::make_shared<Dropout>(dropout, gen));
  norm2 = add_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, 1e-5, true, dtype));
  linear1 = add_module("linear1", std::make_shared<Linear>(d_model, d_ffn, true, dtype, gen));
  dropout3 = add_module("dropout3", std::make_shared<Dropout>(dropout, gen));
  linear2 = add_module("linear2", std::make_shared<Linear>(d_ffn, d_model, true, dtype, gen));
  dropout4 = add_module("dropout4", std::make_shared<Dropout>(dropout, gen));
  norm3 = add_module("norm3", std::make_shared<LayerNorm>(Shape{d_model}, 1e-5, true, dtype));
}

Tensor DeformableTransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& query_pos,
                                                  const Tensor& reference_points, const Tensor& src,
                                                  const Tensor& spatial_shapes, const Tensor& level_start_index,
                                                  const Tensor& src_padding_mask) {
  Tensor qk = with_pos_embed(tgt, query_pos);
  Tensor x = norm2->forward(tgt + dropout2->forward(self_attn->forward(qk, qk, tgt, Tensor(), false).output));
  Tensor attn = cross_attn->forward(with_pos_embed(x, query_pos), reference_points, src, spatial_shapes,
                                    level_start_index, src_padding_mask);
  x = norm1->forward(x + dropout1->forward(attn));
  Tensor ffn = linear2->forward(dropout3->forward(activate(activation, linear1->forward(x))));
  return norm3->forward(x + dropout4->forward(ffn));
}

Tensor get_reference_points(const Tensor& spatial_shapes, const Tensor& valid_ratios) {
  TG_CHECK(spatial_shapes.defined() && spatial_shapes.dtype() == DType::Int64 && spatial_shapes.dim() == 2 &&
               spatial_shapes.size(1) == 2,
           "get_reference_points: expected spatial_shapes int64 of shape (L, 2)");
  const int64_t L = spatial_shapes.size(0);
  TG_CHECK(valid_ratios.defined() && valid_ratios.dim() == 3 && valid_ratios.size(1) == L && valid_ratios.size(2) == 2,
           "get_reference_points: expected valid_ratios of shape (N, ", L, ", 2), got ", describe_shape(valid_ratios));
  const int64_t N = valid_ratios.size(0);
  const std::vector<int64_t> hw = spatial_shapes.to_vector<int64_t>();
  const std::vector<double> vr = valid_ratios.to(DType::Float64).to_vector<double>();
  int64_t Lin = 0;
  for (int64_t l = 0; l < L; ++l) Lin += hw[static_cast<size_t>(2 * l)] * hw[static_cast<size_t>(2 * l + 1)];
  std::vector<double> out(static_cast<size_t>(N * Lin * L * 2));
  for (int64_t n = 0; n < N; ++n) {
    int64_t key = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t H = hw[static_cast<size_t>(2 * l)], W = hw[static_cast<size_t>(2 * l + 1)];
      const double vw = vr[static_cast<size_t>((n * L + l) * 2)], vh = vr[static_cast<size_t>((n * L + l) * 2 + 1)];
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j, ++key) {
          // The original's operations in its order (pixel centre / (ratio * size)), in double and
          // rounded once: float32 results can be an ulp from PyTorch's float32 arithmetic.
          const double ry = (static_cast<double>(i) + 0.5) / (vh * static_cast<double>(H));
          const double rx = (static_cast<double>(j) + 0.5) / (vw * static_cast<double>(W));
          for (int64_t l2 = 0; l2 < L; ++l2) {
            const size_t o = static_cast<size_t>(((n * Lin + key) * L + l2) * 2);
            out[o] = rx * vr[static_cast<size_t>((n * L + l2) * 2)];
            out[o + 1] = ry * vr[static_cast<size_t>((n * L + l2) * 2 + 1)];
          }
        }
    }
  }
  return from_vector(out, {N, Lin, L, 2}).to(valid_ratios.dtype());
}

Tensor get_valid_ratio(const Tensor& mask, DType dtype) {
  TG_CHECK(mask.defined() && mask.dim() == 3, "get_valid_ratio: expected mask of shape (N, H, W), got ",
           describe_shape(mask));
  const int64_t N = mask.size(0), H = mask.size(1), W = mask.size(2);
  // The ratios read the first column and row (Deformable DETR's mask[:, :, 0], mask[:, 0, :]).
  TG_CHECK(H > 0 && W > 0, "get_valid_ratio: expected a mask with H > 0 and W > 0, got ", describe_shape(mask));
  const std::vector<double> m = mask.to(DType::Float64).to_vector<double>();
  std::vector<double> out(static_cast<size_t>(N * 2));
  for (int64_t n = 0; n < N; ++n) {
    int64_t valid_h = 0, valid_w = 0;
    for (int64_t i = 0; i < H; ++i) valid_h += m[static_cast<size_t>((n * H + i) * W)] == 0;
    for (int64_t j = 0; j < W; ++j) valid_w += m[static_cast<size_t>(n * H * W + j)] == 0;
    out[static_cast<size_t>(2 * n)] = static_cast<double>(valid_w) / static_cast<double>(W);
    out[static_cast<size_t>(2 * n + 1)] = static_cast<double>(valid_h) / static_cast<double>(H);
  }
  return from_vector(out, {N, 2}).to(dtype);
}

DeformableTransformerEncoder::DeformableTransformerEncoder(
    int64_t num_layers, const std::function<std::shared_ptr<DeformableTransformerEncoderLayer>()>& make_layer) {
  layers = add_module("layers", std::make_shared<ModuleList<DeformableTransformerEncoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) layers->append(make_layer());
}

Tensor DeformableTransformerEncoder::forward(const Tensor& src, const Tensor& spatial_shapes,
                                             const Tensor& level_start_index, const Tensor& valid_ratios,
                                             const Tensor& pos, const Tensor& padding_mask) {
  Tensor reference_points = get_reference_points(spatial_shapes, valid_ratios);
  Tensor out = src;
  for (const auto& layer : *layers)
    out = layer->forward(out, pos, reference_points, spatial_shapes, level_start_index, padding_mask);
  return out;
}

DeformableTransformerDecoder::DeformableTransformerDecoder(
    int64_t num_layers, const std::function<std::shared_ptr<DeformableTransformerDecoderLayer>()>& make_layer,
    bool return_intermediate_)
    : return_intermediate(return_intermediate_) {
  layers = add_module("layers", std::make_shared<ModuleList<DeformableTransformerDecoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) layers->append(make_layer());
}

DecoderOutput DeformableTransformerDecoder::forward(const Tensor& tgt, const Tensor& reference_points_in,
                                                    const Tensor& src, const Tensor& spatial_shapes,
                                                    const Tensor& level_start_index, const Tensor& valid_ratios,
                                                    const Tensor& query_pos, const Tensor& src_padding_mask) {
  TG_CHECK(reference_points_in.defined() && reference_points_in.dim() == 3 &&
               (reference_points_in.size(2) == 2 || reference_points_in.size(2) == 4),
           "DeformableTransformerDecoder: expected reference_points of shape (N, Q, 2 or 4), got ",
           describe_shape(reference_points_in));
  Tensor reference_points = reference_points_in;
  Tensor out = tgt;
  std::vector<Tensor> intermediate, intermediate_refs;
  // (N, 1, L, 2|4): boxes scale their centre by the ratios and their size by the same ratios.
  Tensor ratios = valid_ratios.unsqueeze(1);
  if (reference_points.size(2) == 4) ratios = cat({ratios, ratios}, -1);
  for (size_t i = 0; i < layers->size(); ++i) {
    Tensor ref_input = reference_points.unsqueeze(2) * ratios;
    out = (*layers)[i]->forward(out, query_pos, ref_input, src, spatial_shapes, level_start_index, src_padding_mask);
    if (refine) reference_points = refine(static_cast<int64_t>(i), out, reference_points).detach();
    if (return_intermediate) {
      intermediate.push_back(out);
      intermediate_refs.push_back(reference_points);
    }
  }
  if (return_intermediate) return {stack(intermediate), stack(intermediate_refs)};
  return {out, reference_points};
}

DeformableTransformer::DeformableTransformer(const DeformableTransformerOptions& o, Generator* gen) : options(o) {
  TG_CHECK(o.n_levels > 0, "DeformableTransformer: expected n_levels > 0, got ", o.n_levels);
  level_embed = register_parameter("level_embed", zeros({o.n_levels, o.d_model}, o.dtype));
  encoder = add_module("encoder", std::make_shared<DeformableTransformerEncoder>(o.num_encoder_layers, [&] {
    return std::make_shared<DeformableTransformerEncoderLayer>(o.d_model, o.dim_feedforward, o.dropout, o.activation,
                                                               o.n_levels, o.n_heads, o.enc_n_points, o.dtype, gen);
  }));
  decoder = add_module("decoder", std::make_shared<DeformableTransformerDecoder>(
                                      o.num_decoder_layers,
                                      [&] {
                                        return std::make_shared<DeformableTransformerDecoderLayer>(
                                            o.d_model, o.dim_feedforward, o.dropout, o.activation, o.n_levels,
                                            o.n_heads, o.dec_n_points, o.dtype, gen);
                                      },
                                      o.return_intermediate_dec));
  reference_points = add_module("reference_points", std::make_shared<Linear>(o.d_model, 2, true, o.dtype, gen));
  reset_parameters(gen);
}

namespace {
void reset_msda(Module& m, Generator* gen) {
  if (auto* msda = dynamic_cast<MSDeformAttn*>(&m)) msda->reset_parameters(gen);
  for (auto& [name, child] : m.named_children()) reset_msda(*child, gen);
}
}  // namespace

void DeformableTransformer::reset_parameters(Generator* gen) {
  NoGradGuard no_grad;
  for (Tensor p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p, 1.0, gen);
  reset_msda(*this, gen);
  init::xavier_uniform_(reference_points->weight, 1.0, gen);
  init::zeros_(reference_points->bias);
  init::normal_(level_embed, 0.0, 1.0, gen);
}

DeformableTransformerOutput DeformableTransformer::forward(const std::vector<Tensor>& srcs,
                                                           const std::vector<Tensor>& masks,
                                                           const std::vector<Tensor>& pos_embeds,
                                                           const Tensor& query_embed) {
  const int64_t L = options.n_levels, C = options.d_model;
  TG_CHECK(static_cast<int64_t>(srcs.size()) == L && masks.size() == srcs.size() && pos_embeds.size() == srcs.size(),
           "DeformableTransformer: expected ", L, " srcs, masks and pos_embeds, got ", srcs.size(), ", ",
           masks.size(), " and ", pos_embeds.size());
  std::vector<Tensor> src_flat, mask_flat, pos_flat, ratios;
  std::vector<int64_t> shapes, starts;
  int64_t start = 0;
  for (int64_t l = 0; l < L; ++l) {
    const Tensor& s = srcs[static_cast<size_t>(l)];
    TG_CHECK(s.defined() && s.dim() == 4 && s.size(1) == C, "DeformableTransformer: expected srcs[", l,
             "] of shape (N, ", C, ", H, W), got ", describe_shape(s));
    const int64_t N = s.size(0), H = s.size(2), W = s.size(3);
    const Tensor& m = masks[static_cast<size_t>(l)];
    TG_CHECK(m.defined() && m.shape() == Shape({N, H, W}), "DeformableTransformer: expected masks[", l,
             "] of shape ", format_shape({N, H, W}));
    TG_CHECK(pos_embeds[static_cast<size_t>(l)].defined() && pos_embeds[static_cast<size_t>(l)].shape() == s.shape(),
             "DeformableTransformer: expected pos_embeds[", l, "] of shape ", format_shape(s.shape()));
    shapes.insert(shapes.end(), {H, W});
    starts.push_back(start);
    start += H * W;
    src_flat.push_back(s.flatten(2).transpose(1, 2));
    mask_flat.push_back(m.flatten(1));
    pos_flat.push_back(pos_embeds[static_cast<size_t>(l)].flatten(2).transpose(1, 2) +
                       level_embed.select(0, l).reshape({1, 1, C}));
    ratios.push_back(get_valid_ratio(m, s.dtype()));
  }
  DeformableTransformerOutput r;
  Tensor src = cat(src_flat, 1), pos = cat(pos_flat, 1);
  r.mask_flatten = cat(mask_flat, 1);
  r.spatial_shapes = from_vector(shapes, {L, 2});
  r.level_start_index = from_vector(starts, {L});
  r.valid_ratios = stack(ratios, 1);
  r.memory = encoder->forward(src, r.spatial_shapes, r.level_start_index, r.valid_ratios, pos, r.mask_flatten);

  const int64_t N = src.size(0);
  TG_CHECK(query_embed.defined() && query_embed.dim() == 2 && query_embed.size(1) == 2 * C,
           "DeformableTransformer: expected query_embed of shape (Q, ", 2 * C, "), got ", describe_shape(query_embed));
  const int64_t Q = query_embed.size(0);
  Tensor query_pos = query_embed.narrow(1, 0, C).unsqueeze(0).expand({N, Q, C});
  Tensor tgt = query_embed.narrow(1, C, C).unsqueeze(0).expand({N, Q, C});
  r.init_reference = sigmoid(reference_points->forward(query_pos));
  DecoderOutput d = decoder->forward(tgt, r.init_reference, r.memory, r.spatial_shapes, r.level_start_index,
                                     r.valid_ratios, query_pos, r.mask_flatten);
  r.hs = d.output;
  r.inter_references = d.reference_points;
  return r;
}

}  // namespace tg
