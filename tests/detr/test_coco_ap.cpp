// COCO-style AP on hand-made cases whose answers are worked out in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "detr/coco_ap.h"

namespace tg::detr {
namespace {

// Sums of at most 101 precisions that are small rationals: only rounding separates us.
constexpr double kTol = 1e-12;

GroundTruthBox gt(int64_t image, int64_t label, double x0, double y0, double x1, double y1) {
  return {image, label, {x0, y0, x1, y1}};
}
DetectionBox det(int64_t image, int64_t label, double score, double x0, double y0, double x1, double y1) {
  return {image, label, score, {x0, y0, x1, y1}};
}

TEST(DetrCocoAP, PerfectDetectionIsOne) {
  std::vector<GroundTruthBox> t = {gt(0, 3, 0, 0, 10, 10)};
  std::vector<DetectionBox> d = {det(0, 3, 0.9, 0, 0, 10, 10)};
  MeanAP m = mean_average_precision(t, d);
  EXPECT_NEAR(m.map50, 1.0, kTol);
  EXPECT_NEAR(m.map50_95, 1.0, kTol);
  EXPECT_EQ(m.classes, 1);
}

TEST(DetrCocoAP, IouBetweenThresholds) {
  // Detection (0,0,10,10) against truth (0,0,10,16.1): IoU 100/161 = 0.621, a match at
  // thresholds 0.50, 0.55, 0.60 and not above: mAP@0.5 = 1, mAP@0.5:0.95 = 3/10.
  std::vector<GroundTruthBox> t = {gt(0, 1, 0, 0, 10, 16.1)};
  std::vector<DetectionBox> d = {det(0, 1, 0.5, 0, 0, 10, 10)};
  MeanAP m = mean_average_precision(t, d);
  EXPECT_NEAR(m.map50, 1.0, kTol);
  EXPECT_NEAR(m.map50_95, 0.3, kTol);
}

TEST(DetrCocoAP, FalsePositiveRankedFirstHalvesPrecision) {
  // One truth; a wrong box scored 0.9, the right one 0.8: at recall 1 precision is 1/2, and
  // the envelope makes it 1/2 at every recall point: AP = 0.5. Swapped scores: AP = 1.
  std::vector<GroundTruthBox> t = {gt(0, 0, 0, 0, 10, 10)};
  std::vector<DetectionBox> d = {det(0, 0, 0.9, 50, 50, 60, 60), det(0, 0, 0.8, 0, 0, 10, 10)};
  EXPECT_NEAR(average_precision(t, d, 0, 0.5), 0.5, kTol);
  d[0].score = 0.7;
  EXPECT_NEAR(average_precision(t, d, 0, 0.5), 1.0, kTol);
}

TEST(DetrCocoAP, PartialRecallCountsRecallPointsReached) {
  // Two truths, one found: recall 0.5 at precision 1; recall points 0.00..0.50 (51 of 101).
  std::vector<GroundTruthBox> t = {gt(0, 2, 0, 0, 10, 10), gt(1, 2, 0, 0, 10, 10)};
  std::vector<DetectionBox> d = {det(0, 2, 0.9, 0, 0, 10, 10)};
  EXPECT_NEAR(average_precision(t, d, 2, 0.5), 51.0 / 101.0, kTol);
}

TEST(DetrCocoAP, ThreeDetectionsTwoTruths) {
  // Ranked FP, TP, TP: precision 0, 1/2, 2/3 at recall 0, 1/2, 1; envelope 2/3 everywhere.
  std::vector<GroundTruthBox> t = {gt(0, 0, 0, 0, 10, 10), gt(0, 0, 20, 20, 30, 30)};
  std::vector<DetectionBox> d = {det(0, 0, 0.9, 40, 40, 50, 50), det(0, 0, 0.8, 0, 0, 10, 10),
                                 det(0, 0, 0.7, 20, 20, 30, 30)};
  EXPECT_NEAR(average_precision(t, d, 0, 0.5), 2.0 / 3.0, kTol);
}

TEST(DetrCocoAP, DuplicateDetectionIsFalsePositiveAndImagesDoNotMix) {
  // The same box twice: the second finds its truth already matched (FP). A detection in the
  // wrong image matches nothing, however well it overlaps.
  std::vector<GroundTruthBox> t = {gt(0, 0, 0, 0, 10, 10)};
  std::vector<DetectionBox> d = {det(0, 0, 0.9, 0, 0, 10, 10), det(0, 0, 0.8, 0, 0, 10, 10),
                                 det(1, 0, 0.95, 0, 0, 10, 10)};
  // Ranked: image 1 (FP, 0.95), TP, FP -> precision at recall 1 is 1/2: AP 0.5.
  EXPECT_NEAR(average_precision(t, d, 0, 0.5), 0.5, kTol);
}

TEST(DetrCocoAP, AveragesOverClassesWithTruthOnly) {
  // Class 0 perfect (AP 1), class 1 missed (AP 0), class 7 has only a detection (ignored).
  std::vector<GroundTruthBox> t = {gt(0, 0, 0, 0, 10, 10), gt(0, 1, 20, 20, 30, 30)};
  std::vector<DetectionBox> d = {det(0, 0, 0.9, 0, 0, 10, 10), det(0, 7, 0.9, 20, 20, 30, 30)};
  MeanAP m = mean_average_precision(t, d);
  EXPECT_EQ(m.classes, 2);
  EXPECT_NEAR(m.map50, 0.5, kTol);
  EXPECT_NEAR(m.map50_95, 0.5, kTol);
  EXPECT_EQ(average_precision(t, d, 7, 0.5), -1.0);
  EXPECT_EQ(mean_average_precision({}, d).classes, 0);
}

// pycocotools' recall points are np.linspace(0, 1, 101), r * 0.01: at r = 35 that is an ulp
// above 35 / 100 = 7 / 20, so 7 perfect detections of 20 truths reach recall points 0..34
// only: AP = 35/101 (r / 100 gave 36/101).
TEST(DetrCocoAP, RecallPointsAreNumpysLinspace) {
  std::vector<GroundTruthBox> t;
  std::vector<DetectionBox> d;
  for (int i = 0; i < 20; ++i) {
    t.push_back(gt(i, 0, 0, 0, 10, 10));
    if (i < 7) d.push_back(det(i, 0, 0.9, 0, 0, 10, 10));
  }
  EXPECT_NEAR(mean_average_precision(t, d).map50, 35.0 / 101.0, kTol);
  // The IoU threshold at t = 7 is linspace's 0.85, not 0.8499999999999999: an IoU of exactly
  // that value misses there, so the detection matches at 7 of the 10 thresholds.
  const double just_below = 0.8499999999999999;
  EXPECT_NEAR(mean_average_precision({gt(0, 0, 0, 0, 1, 1)}, {det(0, 0, 0.9, 0, 0, 1, just_below)}).map50_95, 0.7,
              kTol);
}

// Equal scores are ordered by image id, and NaN scores come last, as pycocotools orders them.
TEST(DetrCocoAP, TiesFollowImageIdsAndNaNScoresComeLast) {
  // One truth per image; a miss in image 1 and a hit in image 0 share a score. COCO ranks the
  // hit first (image 0): recall 1/2 at precision 1, so the 51 recall points 0..0.5 read 1 and
  // AP = 51/101. In input order (the miss first) the hit had precision 1/2: AP = 25.5/101.
  std::vector<GroundTruthBox> t = {gt(0, 0, 0, 0, 10, 10), gt(1, 0, 0, 0, 10, 10)};
  std::vector<DetectionBox> miss_first = {det(1, 0, 0.5, 50, 50, 60, 60), det(0, 0, 0.5, 0, 0, 10, 10)};
  EXPECT_NEAR(mean_average_precision(t, miss_first).map50, 51.0 / 101.0, kTol);
  // A NaN-scored miss listed first ranks last: the hit alone decides, AP = 51/101 again.
  std::vector<DetectionBox> nan_first = {det(1, 0, std::nan(""), 50, 50, 60, 60), det(0, 0, 0.9, 0, 0, 10, 10)};
  EXPECT_NEAR(mean_average_precision(t, nan_first).map50, 51.0 / 101.0, kTol);
}

}  // namespace
}  // namespace tg::detr
