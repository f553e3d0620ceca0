// DETR's loss: hand-computed terms, the matcher's choice, and the gradient by finite
// differences through the whole composite (log_softmax, gather, index_select, L1, GIoU).
#include <gtest/gtest.h>

#include <cmath>

#include <cmath>

#include "detr/detr_loss.h"

namespace tg::detr {
namespace {

using Pair = std::pair<int64_t, int64_t>;

constexpr double kExact = 1e-12;  // float64 on a handful of values

TEST(DetrLoss, HandComputedTerms) {
  // B 1, Q 2, C 1 (+ no-object). Query 0 is matched to the object (class 0), query 1 is not.
  Tensor logits = from_vector(std::vector<double>{2, 0, 0, 1}, {1, 2, 2});
  Tensor boxes = from_vector(std::vector<double>{0.5, 0.5, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1}, {1, 2, 4});
  Target t{{0}, {{0.55, 0.5, 0.2, 0.3}}};
  DetrLoss l = detr_loss(logits, boxes, {t});
  ASSERT_EQ(l.matching[0].size(), 1u);
  EXPECT_EQ(l.matching[0][0], Pair(0, 0));
  const double lp0 = 2 - std::log(std::exp(2.0) + 1), lp1 = 1 - std::log(1 + std::exp(1.0));
  const double ce = -(1.0 * lp0 + 0.1 * lp1) / 1.1;  // weights 1 (object) and eos_coef 0.1
  EXPECT_NEAR(l.ce.item(), ce, kExact);
  EXPECT_NEAR(l.bbox.item(), 0.05 + 0.1, kExact);  // |0.5-0.55| + |0.2-0.3|, one box
  // xyxy (0.4,0.4,0.6,0.6) vs (0.45,0.35,0.65,0.65): inter 0.15*0.2, union 0.04+0.06-0.03,
  // enclosure 0.25*0.3.
  const double inter = 0.15 * 0.2, uni = 0.04 + 0.06 - inter, enc = 0.25 * 0.3;
  EXPECT_NEAR(l.giou.item(), 1 - (inter / uni - (enc - uni) / enc), kExact);
  EXPECT_NEAR(l.total.item(), ce + 5 * 0.15 + 2 * l.giou.item(), kExact);
  EXPECT_EQ(l.num_boxes, 1.0);
}

TEST(DetrLoss, MatcherPairsEachObjectWithItsNearestQuery) {
  // Three queries; two objects sit exactly on queries 2 and 0 (in that order).
  Tensor logits = zeros({1, 3, 4}, DType::Float64);
  Tensor boxes = from_vector(std::vector<double>{0.2, 0.2, 0.1, 0.1, 0.5, 0.5, 0.3, 0.3, 0.8, 0.7, 0.2, 0.1}, {1, 3, 4});
  Target t{{1, 2}, {{0.8, 0.7, 0.2, 0.1}, {0.2, 0.2, 0.1, 0.1}}};
  Matching m = hungarian_match(logits, boxes, {t});
  ASSERT_EQ(m[0].size(), 2u);
  EXPECT_EQ(m[0][0], Pair(0, 1));
  EXPECT_EQ(m[0][1], Pair(2, 0));
  DetrLoss l = detr_loss(logits, boxes, {t});
  EXPECT_NEAR(l.bbox.item(), 0.0, kExact);
  EXPECT_NEAR(l.giou.item(), 0.0, kExact);
  EXPECT_EQ(l.num_boxes, 2.0);
}

TEST(DetrLoss, ImageWithoutObjectsLearnsNoObjectOnly) {
  Tensor logits = from_vector(std::vector<double>{0, 1, 3, 0}, {1, 2, 2});
  Tensor boxes = full({1, 2, 4}, 0.5, DType::Float64);
  DetrLoss l = detr_loss(logits, boxes, {Target{}});
  // Every query's target is no-object (weight 0.1 each: the weighted mean is the plain mean).
  const double lp0 = 1 - std::log(1 + std::exp(1.0)), lp1 = 0 - std::log(std::exp(3.0) + 1);
  EXPECT_NEAR(l.ce.item(), -(lp0 + lp1) / 2, kExact);
  EXPECT_EQ(l.bbox.item(), 0.0);
  EXPECT_EQ(l.num_boxes, 1.0);  // clamped, as DETR's
}

TEST(DetrLoss, GradcheckThroughTheWholeLoss) {
  Generator g(3);
  Tensor logits = randn({2, 3, 4}, DType::Float64, &g).requires_grad_();
  // Boxes well inside the image and distinct from the targets (no GIoU/L1 kinks).
  Tensor boxes = from_vector(std::vector<double>{0.31, 0.42, 0.2, 0.25, 0.6, 0.55, 0.3, 0.2, 0.7, 0.3, 0.15, 0.22,
                                                 0.45, 0.52, 0.33, 0.27, 0.2, 0.7, 0.12, 0.18, 0.66, 0.61, 0.21, 0.3},
                             {2, 3, 4});
  boxes.requires_grad_();
  std::vector<Target> targets = {Target{{0, 2}, {{0.35, 0.4, 0.22, 0.3}, {0.62, 0.5, 0.25, 0.24}}},
                                 Target{{1}, {{0.5, 0.5, 0.3, 0.3}}}};
  Matching fixed = hungarian_match(logits, boxes, targets);  // held fixed: a discrete choice
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{detr_loss_with_matching(in[0], in[1], targets, fixed).total};
      },
      {logits, boxes});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(DetrLoss, RejectsBadInput) {
  Tensor logits = zeros({1, 2, 3}), boxes = zeros({1, 2, 4});
  EXPECT_THROW(detr_loss(logits, zeros({1, 2, 3}), {Target{}}), Error);
  EXPECT_THROW(detr_loss(logits, boxes, {}), Error);
  EXPECT_THROW(detr_loss(logits, boxes, {Target{{2}, {{0.5, 0.5, 0.1, 0.1}}}}), Error);  // class 2 is no-object
  EXPECT_THROW(detr_loss(logits, boxes, {Target{{0}, {}}}), Error);
}

}  // namespace
}  // namespace tg::detr
