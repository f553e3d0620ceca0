// The demo's Deformable DETR (Zhu et al. 2021, models/deformable_detr.py, single stage, no
// auxiliary losses): a backbone giving three feature levels (strides 4, 8, 16), an FPN-style
// top-down path (1x1 laterals, upsample_bilinear2d), per-level input projections (1x1 +
// GroupNorm(32)) to d_model, sine positions, the deformable encoder and decoder of
// models/deformable_transformer.h, learned queries, and DETR's heads (class: a Linear over
// num_classes + no-object, trained with DETR's cross entropy; box: a 3-layer MLP predicting the
// centre relative to each query's reference point).
//
// The backbone is a small ResNet-like stack without shortcuts: a stride-2 stem, then one stage
// per level, each a stride-2 3x3 convolution and a 3x3 convolution, every convolution followed
// by GroupNorm and ReLU (GroupNorm rather than BatchNorm: it does not depend on the batch, so
// evaluation matches training and batch size 1 works). The FPN smooths each merged level with
// a 3x3 convolution, as Lin et al. do. Dropout is 0 so that a resumed run is bit-identical to
// an uninterrupted one.
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

// Feature levels (N, channels[l], S / 2^(l+2), S / 2^(l+2)): strides 4, 8, 16, ...
// Parameter names: "stem.0.weight", "stages.<l>.<i>.weight" (i = 0 and 3 convolutions, 1 and 4
// GroupNorms).
class ConvBackbone : public Module {
 public:
  ConvBackbone(const std::vector<int64_t>& channels, Generator* gen);
  std::string name() const override { return "ConvBackbone"; }
  std::vector<Tensor> levels(const Tensor& images);  // images (N, 1, S, S), S a multiple of the coarsest stride

 private:
  std::shared_ptr<Sequential> stem_;
  std::shared_ptr<ModuleList<Sequential>> stages_;
};

class DeformableDetector : public Detector {
 public:
  explicit DeformableDetector(DeformableDetectorOptions options, Generator* gen = nullptr);
  std::string name() const override { return "DeformableDetector"; }
  DetectorOutput detect(const Tensor& images) override;
  std::string config() const override;

 private:
  DeformableDetectorOptions o_;
  std::shared_ptr<ConvBackbone> backbone_;
  std::shared_ptr<ModuleList<Conv2d>> lateral_;         // "fpn_lateral.<l>": 1x1, channels[l] -> d_model
  std::shared_ptr<ModuleList<Conv2d>> fpn_output_;      // "fpn_output.<l>": 3x3 smoothing of the merged level
  std::shared_ptr<ModuleList<Sequential>> input_proj_;  // "input_proj.<l>.0" (1x1) and ".1" (GroupNorm(32))
  std::shared_ptr<PositionEmbeddingSine> position_;
  std::shared_ptr<DeformableTransformer> transformer_;
  Tensor query_embed_;  // (Q, 2 d_model): [query_pos | tgt], as nn.Embedding(Q, 2 d).weight
  std::shared_ptr<Linear> class_embed_;
  std::shared_ptr<Sequential> bbox_embed_;
};

}  // namespace tg::detr
