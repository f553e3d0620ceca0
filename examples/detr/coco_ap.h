// COCO-style average precision, our own (pycocotools' COCOeval semantics, reduced to what the
// demo needs: one area range, no crowd regions, every detection kept).
//
// For one class and one IoU threshold: detections of all images sorted by score (highest
// first, NaN scores last, ties by image id, then in input order: pycocotools' order); each is
// a true positive when some not-yet-matched ground truth of its image and class overlaps it
// with IoU >= threshold (the best such one is taken; a threshold above 1 - 1e-10 counts as
// that, as COCO's), else a false positive. Precision is made non-increasing from the right,
// then read at the 101 recall points of np.linspace(0, 1, 101) (0 beyond the highest recall
// reached); AP is their mean. mAP averages AP over the classes that have ground truth;
// mAP@0.5:0.95 averages mAP over the thresholds np.linspace(0.5, 0.95, 10). With no ground
// truth at all, MeanAP is all zeros with classes = 0 (COCO reports -1).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace tg::detr {

struct GroundTruthBox {
  int64_t image = 0;
  int64_t label = 0;
  std::array<double, 4> xyxy{};
};

struct DetectionBox {
  int64_t image = 0;
  int64_t label = 0;
  double score = 0;
  std::array<double, 4> xyxy{};
};

// AP of one class at one IoU threshold; -1 when the class has no ground truth (COCO's marker).
double average_precision(const std::vector<GroundTruthBox>& truth, const std::vector<DetectionBox>& detections,
                         int64_t label, double iou_threshold);

struct MeanAP {
  double map50 = 0;      // mAP at IoU 0.5
  double map50_95 = 0;   // mean over IoU 0.50:0.05:0.95
  int64_t classes = 0;   // classes with ground truth (what was averaged)
};

MeanAP mean_average_precision(const std::vector<GroundTruthBox>& truth, const std::vector<DetectionBox>& detections);

}  // namespace tg::detr
