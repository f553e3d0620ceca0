#include "deformable_detector.h"

namespace tg::detr {

namespace {

// GroupNorm's groups for a backbone width: 8 channels or fewer per group, as many groups as
// divide the width (Wu & He use 32 groups on widths of 64 and up; our widths are smaller).
int64_t backbone_groups(int64_t channels) {
  int64_t g = std::min<int64_t>(8, channels);
  while (channels % g != 0) --g;
  return g;
}

// 3x3 convolution (no bias: the GroupNorm after it has one), GroupNorm, ReLU.
void add_conv_norm_relu(Sequential& s, int64_t in, int64_t out, int64_t stride, Generator* gen) {
  s.push_back(std::make_shared<Conv2d>(in, out, IntList{3}, IntList{stride}, IntList{1}, IntList{1}, 1, /*bias=*/false,
                                       DType::Float32, gen));
  s.push_back(std::make_shared<GroupNorm>(backbone_groups(out), out));
  s.push_back(std::make_shared<ReLU>());
}

}  // namespace

ConvBackbone::ConvBackbone(const std::vector<int64_t>& channels, Generator* gen) {
  TG_CHECK(!channels.empty(), "ConvBackbone: expected at least one level");
  stem_ = add_module("stem", std::make_shared<Sequential>());
  add_conv_norm_relu(*stem_, 1, channels[0], 2, gen);
  stages_ = add_module("stages", std::make_shared<ModuleList<Sequential>>());
  int64_t in = channels[0];
  for (int64_t c : channels) {
    auto s = stages_->append(std::make_shared<Sequential>());
    add_conv_norm_relu(*s, in, c, 2, gen);  // halves the side
    add_conv_norm_relu(*s, c, c, 1, gen);
    in = c;
  }
}

std::vector<Tensor> ConvBackbone::levels(const Tensor& images) {
  Tensor x = stem_->forward(images);
  std::vector<Tensor> out;
  for (const auto& stage : *stages_) {
    x = stage->forward(x);
    out.push_back(x);
  }
  return out;
}

DeformableDetector::DeformableDetector(DeformableDetectorOptions options, Generator* gen) : o_(std::move(options)) {
  const int64_t L = static_cast<int64_t>(o_.channels.size()), d = o_.d_model;
  const int64_t stride = int64_t{4} << (L - 1);
  TG_CHECK(L >= 1 && o_.canvas % stride == 0, "DeformableDetector: the canvas (", o_.canvas,
           ") must be a multiple of the coarsest stride (", stride, ")");
  TG_CHECK(d % 2 == 0 && d % o_.heads == 0, "DeformableDetector: d_model (", d, ") must be even and a multiple of heads (",
           o_.heads, ")");
  TG_CHECK(o_.num_queries > 0 && o_.num_classes > 0, "DeformableDetector: expected queries and classes > 0");
  TG_CHECK(d % 32 == 0, "DeformableDetector: d_model (", d, ") must be a multiple of 32 for GroupNorm(32)");
  backbone_ = add_module("backbone", std::make_shared<ConvBackbone>(o_.channels, gen));
  lateral_ = add_module("fpn_lateral", std::make_shared<ModuleList<Conv2d>>());
  fpn_output_ = add_module("fpn_output", std::make_shared<ModuleList<Conv2d>>());
  input_proj_ = add_module("input_proj", std::make_shared<ModuleList<Sequential>>());
  for (int64_t c : o_.channels) {
    lateral_->append(
        std::make_shared<Conv2d>(c, d, IntList{1}, IntList{1}, IntList{0}, IntList{1}, 1, true, DType::Float32, gen));
    fpn_output_->append(
        std::make_shared<Conv2d>(d, d, IntList{3}, IntList{1}, IntList{1}, IntList{1}, 1, true, DType::Float32, gen));
    auto p = input_proj_->append(std::make_shared<Sequential>());
    p->push_back(std::make_shared<Conv2d>(d, d, IntList{1}, IntList{1}, IntList{0}, IntList{1}, 1, true, DType::Float32, gen));
    p->push_back(std::make_shared<GroupNorm>(32, d));
  }
  position_ = add_module("position", std::make_shared<PositionEmbeddingSine>(d / 2, 10000, /*normalize=*/true));
  DeformableTransformerOptions t;
  t.d_model = d;
  t.n_heads = o_.heads;
  t.num_encoder_layers = o_.encoder_layers;
  t.num_decoder_layers = o_.decoder_layers;
  t.dim_feedforward = o_.ffn;
  t.dropout = 0.0;
  t.n_levels = L;
  t.enc_n_points = t.dec_n_points = o_.points;
  transformer_ = add_module("transformer", std::make_shared<DeformableTransformer>(t, gen));
  query_embed_ = register_parameter("query_embed", normal({o_.num_queries, 2 * d}, 0.0, 1.0, DType::Float32, gen));
  DetrHeads heads = make_detr_heads(d, o_.num_classes, gen);
  class_embed_ = add_module("class_embed", heads.class_embed);
  bbox_embed_ = add_module("bbox_embed", heads.bbox_embed);
  // Deformable DETR's init: the box head starts at its reference point with small boxes
  // (sigmoid(-2) = 0.12 of the image), not at a random offset.
  NoGradGuard no_grad;
  heads.bbox_output->weight.zero_();
  heads.bbox_output->bias.zero_();
  heads.bbox_output->bias.narrow(0, 2, 2).fill_(-2.0);
}

DetectorOutput DeformableDetector::detect(const Tensor& images) {
  const int64_t S = o_.canvas;
  TG_CHECK(images.defined() && images.dim() == 4 && images.size(1) == 1 && images.size(2) == S && images.size(3) == S,
           "DeformableDetector: expected images [B, 1, ", S, ", ", S, "], got ", describe_shape(images));
  const int64_t N = images.size(0);
  std::vector<Tensor> feats = backbone_->levels(images), srcs(feats.size()), masks, pos;
  // FPN's top-down path: each level adds the coarser merged level, bilinearly upsampled to its
  // size, to its own 1x1 lateral projection; a 3x3 convolution smooths the sum, then the input
  // projection (1x1 + GroupNorm(32)) gives the transformer its d_model channels.
  Tensor merged;
  for (size_t l = feats.size(); l-- > 0;) {
    const int64_t H = feats[l].size(2), W = feats[l].size(3);
    Tensor lateral = (*lateral_)[l]->forward(feats[l]);  // (N, d, H, W)
    merged = merged.defined() ? lateral + upsample_bilinear2d(merged, {H, W}, /*align_corners=*/false) : lateral;
    srcs[l] = (*input_proj_)[l]->forward((*fpn_output_)[l]->forward(merged));
  }
  for (size_t l = 0; l < feats.size(); ++l) {
    masks.push_back(zeros({N, srcs[l].size(2), srcs[l].size(3)}, DType::Int64));  // no padding: equal canvases
    pos.push_back(position_->forward(masks.back(), DType::Float32));
  }
  DeformableTransformerOutput t = transformer_->forward(srcs, masks, pos, query_embed_);
  Tensor delta = bbox_embed_->forward(t.hs);  // (N, Q, 4)
  Tensor centre = delta.narrow(2, 0, 2) + inverse_sigmoid(t.init_reference);
  return {class_embed_->forward(t.hs), sigmoid(cat({centre, delta.narrow(2, 2, 2)}, 2))};
}

std::string DeformableDetector::config() const {
  std::string ch;
  for (int64_t c : o_.channels) ch += (ch.empty() ? "" : ",") + std::to_string(c);
  return "deformable canvas=" + std::to_string(o_.canvas) + " backbone=conv_gn:" + ch + " fpn" +
         " d=" + std::to_string(o_.d_model) + " heads=" + std::to_string(o_.heads) + " ffn=" + std::to_string(o_.ffn) +
         " points=" + std::to_string(o_.points) + " enc=" + std::to_string(o_.encoder_layers) +
         " dec=" + std::to_string(o_.decoder_layers) + " queries=" + std::to_string(o_.num_queries) +
         " classes=" + std::to_string(o_.num_classes);
}

}  // namespace tg::detr
