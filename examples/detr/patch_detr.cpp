#include "patch_detr.h"

namespace tg::detr {

// DETR's post-norm encoder layer: x = LN(x + SA(x + pos, x + pos, x)); x = LN(x + FFN(x)).
struct PatchDetr::EncoderLayer : Module {
  EncoderLayer(int64_t d, int64_t heads, int64_t ffn, Generator* gen)
      : self_attn(add_module("self_attn", std::make_shared<MultiheadAttention>(d, heads, 0.0, true, true,
                                                                               DType::Float32, gen))),
        linear1(add_module("linear1", std::make_shared<Linear>(d, ffn, true, DType::Float32, gen))),
        linear2(add_module("linear2", std::make_shared<Linear>(ffn, d, true, DType::Float32, gen))),
        norm1(add_module("norm1", std::make_shared<LayerNorm>(Shape{d}))),
        norm2(add_module("norm2", std::make_shared<LayerNorm>(Shape{d}))) {}
  Tensor run(const Tensor& x, const Tensor& pos) {
    Tensor qk = x + pos;
    Tensor y = norm1->forward(x + self_attn->forward(qk, qk, x, Tensor(), /*need_weights=*/false).output);
    return norm2->forward(y + linear2->forward(relu(linear1->forward(y))));
  }
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
};

// DETR's post-norm decoder layer: self-attention among queries, cross-attention to the memory,
// FFN; the query positions are added to queries and keys, never to values.
struct PatchDetr::DecoderLayer : Module {
  DecoderLayer(int64_t d, int64_t heads, int64_t ffn, Generator* gen)
      : self_attn(add_module("self_attn", std::make_shared<MultiheadAttention>(d, heads, 0.0, true, true,
                                                                               DType::Float32, gen))),
        cross_attn(add_module("multihead_attn", std::make_shared<MultiheadAttention>(d, heads, 0.0, true, true,
                                                                                     DType::Float32, gen))),
        linear1(add_module("linear1", std::make_shared<Linear>(d, ffn, true, DType::Float32, gen))),
        linear2(add_module("linear2", std::make_shared<Linear>(ffn, d, true, DType::Float32, gen))),
        norm1(add_module("norm1", std::make_shared<LayerNorm>(Shape{d}))),
        norm2(add_module("norm2", std::make_shared<LayerNorm>(Shape{d}))),
        norm3(add_module("norm3", std::make_shared<LayerNorm>(Shape{d}))) {}
  Tensor run(const Tensor& tgt, const Tensor& query_pos, const Tensor& memory, const Tensor& pos) {
    Tensor q = tgt + query_pos;
    Tensor t = norm1->forward(tgt + self_attn->forward(q, q, tgt, Tensor(), false).output);
    t = norm2->forward(t + cross_attn->forward(t + query_pos, memory + pos, memory, Tensor(), false).output);
    return norm3->forward(t + linear2->forward(relu(linear1->forward(t))));
  }
  std::shared_ptr<MultiheadAttention> self_attn, cross_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
};

PatchDetr::PatchDetr(PatchDetrOptions options, Generator* gen) : o_(options) {
  TG_CHECK(o_.patch > 0 && o_.canvas % o_.patch == 0, "PatchDetr: the canvas (", o_.canvas,
           ") must be a multiple of the patch size (", o_.patch, ")");
  TG_CHECK(o_.d_model > 0 && o_.heads > 0 && o_.d_model % o_.heads == 0, "PatchDetr: d_model (", o_.d_model,
           ") must be a positive multiple of heads (", o_.heads, ")");
  TG_CHECK(o_.num_queries > 0 && o_.num_classes > 0 && o_.encoder_layers >= 0 && o_.decoder_layers >= 1,
           "PatchDetr: expected queries, classes and decoder layers >= 1");
  const int64_t d = o_.d_model, tokens = (o_.canvas / o_.patch) * (o_.canvas / o_.patch);
  patch_embed_ = add_module("patch_embed", std::make_shared<Linear>(o_.patch * o_.patch, d, true, DType::Float32, gen));
  pos_embed_ = register_parameter("pos_embed", normal({tokens, d}, 0.0, 0.02, DType::Float32, gen));
  query_embed_ = register_parameter("query_embed", normal({o_.num_queries, d}, 0.0, 1.0, DType::Float32, gen));
  encoder_ = add_module("encoder", std::make_shared<ModuleList<EncoderLayer>>());
  for (int64_t i = 0; i < o_.encoder_layers; ++i) encoder_->append(std::make_shared<EncoderLayer>(d, o_.heads, o_.ffn, gen));
  decoder_ = add_module("decoder", std::make_shared<ModuleList<DecoderLayer>>());
  for (int64_t i = 0; i < o_.decoder_layers; ++i) decoder_->append(std::make_shared<DecoderLayer>(d, o_.heads, o_.ffn, gen));
  reference_points_ = add_module("reference_points", std::make_shared<Linear>(d, 2, true, DType::Float32, gen));
  DetrHeads heads = make_detr_heads(d, o_.num_classes, gen);
  class_embed_ = add_module("class_embed", heads.class_embed);
  bbox_embed_ = add_module("bbox_embed", heads.bbox_embed);
}

DetectorOutput PatchDetr::detect(const Tensor& images) {
  const int64_t S = o_.canvas, P = o_.patch, G = S / P;
  TG_CHECK(images.defined() && images.dim() == 4 && images.size(1) == 1 && images.size(2) == S && images.size(3) == S,
           "PatchDetr: expected images [B, 1, ", S, ", ", S, "], got ", describe_shape(images));
  const int64_t B = images.size(0);
  // [B, 1, S, S] -> [B, G, P, G, P] -> [B, G, G, P, P] -> tokens [B, G*G, P*P], row-major patches.
  Tensor patches = images.reshape({B, G, P, G, P}).permute({0, 1, 3, 2, 4}).reshape({B, G * G, P * P});
  Tensor pos = pos_embed_.unsqueeze(0);
  Tensor memory = patch_embed_->forward(patches);
  for (const auto& layer : *encoder_) memory = layer->run(memory, pos);
  Tensor query_pos = query_embed_.unsqueeze(0).expand({B, -1, -1});
  Tensor tgt = zeros({B, o_.num_queries, o_.d_model});
  for (const auto& layer : *decoder_) tgt = layer->run(tgt, query_pos, memory, pos);
  // Deformable DETR's reference points: each query owns a learned point (from its embedding) and
  // the box head predicts the centre relative to it, in logit space. Queries then start spread
  // over the image instead of all predicting the same box, which speeds up DETR's slow start.
  Tensor reference = reference_points_->forward(query_pos);  // [B, Q, 2], logits of the centre
  Tensor delta = bbox_embed_->forward(tgt);                   // [B, Q, 4]
  Tensor centre = delta.narrow(2, 0, 2) + reference, size = delta.narrow(2, 2, 2);
  return {class_embed_->forward(tgt), sigmoid(cat({centre, size}, 2))};
}

std::string PatchDetr::config() const {
  return "patch_detr canvas=" + std::to_string(o_.canvas) + " patch=" + std::to_string(o_.patch) +
         " d=" + std::to_string(o_.d_model) + " heads=" + std::to_string(o_.heads) + " ffn=" + std::to_string(o_.ffn) +
         " enc=" + std::to_string(o_.encoder_layers) + " dec=" + std::to_string(o_.decoder_layers) +
         " queries=" + std::to_string(o_.num_queries) + " classes=" + std::to_string(o_.num_classes);
}

}  // namespace tg::detr
