// The demo's Deformable DETR (Zhu et al. 2021, models/deformable_detr.py, single stage, no
// auxiliary losses): a backbone giving three feature levels (strides 4, 8, 16), an FPN-style
// top-down path (1x1 laterals, upsample_bilinear2d), per-level input projections (1x1 +
// GroupNorm(32)) to d_model, sine positions, the deformable encoder and decoder of
// models/deformable_transformer.h, learned queries, and DETR's heads (class: a Linear over
// num_classes + no-object, trained with DETR's cross entropy; box: a 3-layer MLP predicting the
// centre relative to each query's reference point).
//
// Until convolution lands, the backbone is a patch pyramid (level 0: 4x4 patches through a
// Linear, which is a stride-4 4x4 convolution; each next level merges 2x2 neighbours, a stride-2
// 2x2 convolution, Swin-style); 1x1 convolutions are Linears on channels-last tensors. Dropout is 0 so that a resumed
// run is bit-identical to an uninterrupted one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "detector.h"

namespace tg::detr {

struct DeformableDetectorOptions {
  int64_t canvas = 64;
  std::vector<int64_t> channels = {32, 64, 128};  // backbone widths of the three levels
  int64_t d_model = 64, heads = 4, ffn = 256, points = 4;
  int64_t encoder_layers = 2, decoder_layers = 2;
  int64_t num_queries = 16, num_classes = 10;
};

// Channels-last feature levels: level 0 (N, S/4, S/4, channels[0]), each next one half the side.
class PatchPyramid : public Module {
 public:
  PatchPyramid(const std::vector<int64_t>& channels, Generator* gen);
  std::string name() const override { return "PatchPyramid"; }
  std::vector<Tensor> levels(const Tensor& images);  // images (N, 1, S, S), S a multiple of 16

 private:
  std::vector<std::shared_ptr<Sequential>> stages_;
};

class DeformableDetector : public Detector {
 public:
  explicit DeformableDetector(DeformableDetectorOptions options, Generator* gen = nullptr);
  std::string name() const override { return "DeformableDetector"; }
  DetectorOutput detect(const Tensor& images) override;
  std::string config() const override;

 private:
  DeformableDetectorOptions o_;
  std::shared_ptr<PatchPyramid> backbone_;
  std::vector<std::shared_ptr<Linear>> lateral_;
  std::vector<std::shared_ptr<Sequential>> input_proj_;  // "input_proj.<l>.0" (1x1) and ".1" (GroupNorm(32))
  std::vector<std::shared_ptr<GroupNorm>> input_norm_;
  std::shared_ptr<PositionEmbeddingSine> position_;
  std::shared_ptr<DeformableTransformer> transformer_;
  Tensor query_embed_;  // (Q, 2 d_model): [query_pos | tgt], as nn.Embedding(Q, 2 d).weight
  std::shared_ptr<Linear> class_embed_;
  std::shared_ptr<Sequential> bbox_embed_;
};

}  // namespace tg::detr
