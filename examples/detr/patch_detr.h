// PatchDetr: a plain DETR (Carion et al. 2020) whose backbone is a ViT-style patch embedding,
// built only from layers tapegrad already has (Linear, LayerNorm, MultiheadAttention). It is the
// demo's convolution-free detector: non-overlapping P x P patches -> tokens (+ learned
// positions) -> post-norm transformer encoder -> decoder with learned object queries -> class
// and box heads (DETR's: a Linear, and a 3-layer MLP with a sigmoid; box centres relative to
// per-query reference points as in Deformable DETR). No dropout, so that a
// resumed run is bit-identical to an uninterrupted one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "detector.h"

namespace tg::detr {

struct PatchDetrOptions {
  int64_t canvas = 64, patch = 8;
  int64_t d_model = 96, heads = 4, ffn = 192;
  int64_t encoder_layers = 2, decoder_layers = 2;
  int64_t num_queries = 10, num_classes = 10;
};

class PatchDetr : public Detector {
 public:
  explicit PatchDetr(PatchDetrOptions options, Generator* gen = nullptr);
  std::string name() const override { return "PatchDetr"; }
  DetectorOutput detect(const Tensor& images) override;
  std::string config() const override;

  struct EncoderLayer;
  struct DecoderLayer;

 private:
  PatchDetrOptions o_;
  std::shared_ptr<Linear> patch_embed_;
  Tensor pos_embed_;    // [tokens, d] learned positions of the patches
  Tensor query_embed_;  // [queries, d] learned object queries (DETR's query_pos)
  std::shared_ptr<ModuleList<EncoderLayer>> encoder_;
  std::shared_ptr<ModuleList<DecoderLayer>> decoder_;
  std::shared_ptr<Linear> reference_points_;
  std::shared_ptr<Linear> class_embed_;
  std::shared_ptr<Sequential> bbox_embed_;
};

}  // namespace tg::detr
