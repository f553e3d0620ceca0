// What the training loop needs of a detector: images in, per-query class logits (the last
// class is "no object") and normalised cxcywh boxes out, plus a config string that a
// checkpoint records so that resuming into a different model is refused.
//
// TinyDetector is an MLP stand-in (flattened pixels -> queries) that keeps the loop, the
// checkpoints and the tests independent of the convolutional model; the Deformable-DETR
// detector plugs into the same interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "coco_ap.h"

namespace tg::detr {

// Deformable DETR's inverse_sigmoid: log(x / (1 - x)) with both clamped to eps (recorded).
Tensor inverse_sigmoid(const Tensor& x, double eps = 1e-5);

struct DetectorOutput {
  Tensor logits;  // [B, Q, num_classes + 1]
  Tensor boxes;   // [B, Q, 4], cxcywh in (0, 1)
};

class Detector : public Module {
 public:
  virtual DetectorOutput detect(const Tensor& images) = 0;  // images float32 [B, 1, S, S]
  virtual std::string config() const = 0;                    // e.g. "tiny canvas=64 queries=8 ..."
};

struct TinyDetectorOptions {
  int64_t canvas = 64, num_queries = 8, num_classes = 10, hidden = 256;
};

class TinyDetector : public Detector {
 public:
  explicit TinyDetector(TinyDetectorOptions options, Generator* gen = nullptr);
  std::string name() const override { return "TinyDetector"; }
  DetectorOutput detect(const Tensor& images) override;
  std::string config() const override;

 private:
  TinyDetectorOptions o_;
  std::shared_ptr<Linear> fc1_, fc2_, class_head_, box_head_;
};

// DETR's prediction heads on d-wide decoder outputs, as DETR and Deformable DETR build them:
// class_embed, a Linear to num_classes + 1 logits (the last is "no object"), then bbox_embed, the
// box MLP d -> d -> d -> 4 with ReLUs between. The owner registers both under those names; the
// construction order fixes what a generator draws, so it must not change.
struct DetrHeads {
  std::shared_ptr<Linear> class_embed;
  std::shared_ptr<Sequential> bbox_embed;
  std::shared_ptr<Linear> bbox_output;  // bbox_embed's last layer
};
DetrHeads make_detr_heads(int64_t d, int64_t num_classes, Generator* gen);

// DETR's PostProcess: each query's score is its best real class's probability; boxes in canvas
// pixels (xyxy). Every query is kept (COCO keeps the top 100; we have fewer queries).
std::vector<DetectionBox> postprocess(const DetectorOutput& out, int64_t canvas, int64_t first_image);

}  // namespace tg::detr
