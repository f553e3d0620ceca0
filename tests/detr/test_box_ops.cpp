// Box conversions, IoU and GIoU against hand-computed values, and the GIoU loss's gradient by
// finite differences (it is a composite of recorded ops, so the registry-wide gradcheck does
// not reach it).
#include <gtest/gtest.h>

#include "detr/box_ops.h"

namespace tg::detr {
namespace {

Tensor boxes64(const std::vector<double>& v) { return from_vector(v, {static_cast<int64_t>(v.size() / 4), 4}); }

// Exact arithmetic on small dyadic/rational inputs: only rounding separates us from the value.
constexpr double kExact = 1e-12;

TEST(DetrBoxOps, ConversionsRoundTrip) {
  Tensor c = boxes64({0.5, 0.25, 0.2, 0.1, 10, 20, 4, 6});
  Tensor x = box_cxcywh_to_xyxy(c);
  std::vector<double> v = x.to_vector<double>();
  std::vector<double> want = {0.4, 0.2, 0.6, 0.3, 8, 17, 12, 23};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(v[i], want[i], kExact) << i;
  std::vector<double> back = box_xyxy_to_cxcywh(x).to_vector<double>();
  std::vector<double> orig = c.to_vector<double>();
  for (size_t i = 0; i < orig.size(); ++i) EXPECT_NEAR(back[i], orig[i], kExact) << i;
}

TEST(DetrBoxOps, IouAndGiouHandValues) {
  // Overlapping 2x2 squares: intersection 1, union 7, enclosure 9.
  Tensor a = boxes64({0, 0, 2, 2, 0, 0, 1, 1});
  Tensor b = boxes64({1, 1, 3, 3, 2, 0, 3, 1});
  std::vector<double> iou = box_iou(a, b).to_vector<double>();  // [2, 2]
  EXPECT_NEAR(iou[0], 1.0 / 7.0, kExact);
  EXPECT_NEAR(iou[1], 0.0, kExact);                           // (0,0,2,2) vs (2,0,3,1): touching
  EXPECT_NEAR(iou[2], 0.0, kExact);                           // (0,0,1,1) vs (1,1,3,3): corner
  EXPECT_NEAR(iou[3], 0.0, kExact);
  std::vector<double> giou = generalized_box_iou(a, b).to_vector<double>();
  EXPECT_NEAR(giou[0], 1.0 / 7.0 - 2.0 / 9.0, kExact);
  EXPECT_NEAR(giou[1], 0.0 - (3.0 * 2.0 - 5.0) / 6.0, kExact);  // enclosure 3x2, union 4 + 1
  EXPECT_NEAR(giou[3], -1.0 / 3.0, kExact);                      // disjoint unit squares 1 apart
  // Identical boxes: IoU = GIoU = 1 and the loss is 0.
  EXPECT_NEAR(giou_loss(a, a, Reduction::Sum).item(), 0.0, kExact);
  // The paired form is the diagonal of the matrix.
  std::vector<double> paired = generalized_box_iou_paired(a, b).to_vector<double>();
  EXPECT_NEAR(paired[0], giou[0], kExact);
  EXPECT_NEAR(paired[1], giou[3], kExact);
  EXPECT_NEAR(box_iou_value(a.data<double>(), b.data<double>()), 1.0 / 7.0, kExact);
}

TEST(DetrBoxOps, Float32MatchesFloat64) {
  Tensor a = boxes64({0.1, 0.2, 0.6, 0.7, 0.3, 0.3, 0.9, 0.5});
  Tensor b = boxes64({0.2, 0.1, 0.5, 0.8, 0.0, 0.4, 0.4, 0.9, 0.5, 0.5, 0.6, 0.6});
  Tensor g64 = generalized_box_iou(a, b), g32 = generalized_box_iou(a.to(DType::Float32), b.to(DType::Float32));
  EXPECT_EQ(g32.dtype(), DType::Float32);
  std::vector<double> x = g64.to_vector<double>();
  std::vector<float> y = g32.to_vector<float>();
  ASSERT_EQ(x.size(), 6u);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6) << i;  // float32 epsilon on O(1) values
}

// 16-bit boxes: IoU in float32 as torchvision's _upcast (in bfloat16 the two boxes below were
// 0.96875 apart from 1; torchvision: 0.9692308), the loss rounded once to the boxes' dtype.
TEST(DetrBoxOps, SixteenBitBoxesAreComparedInFloat32) {
  const Tensor a = boxes64({100, 100, 164, 164}), b = boxes64({101, 100, 165, 164});
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    const Tensor iou = box_iou(a.to(dt), b.to(dt)), giou = generalized_box_iou(a.to(dt), b.to(dt));
    EXPECT_EQ(iou.dtype(), DType::Float32);
    EXPECT_EQ(giou.dtype(), DType::Float32);
    EXPECT_EQ(box_area(a.to(dt)).dtype(), DType::Float32);
    EXPECT_FLOAT_EQ(iou.item<float>(), 63.0f * 64 / (2 * 64 * 64 - 63 * 64));
    const Tensor loss = giou_loss(a.to(dt), b.to(dt));
    EXPECT_EQ(loss.dtype(), dt);
    EXPECT_EQ(loss.to(DType::Float32).item<float>(), giou_loss(a, b).to(dt).to(DType::Float32).item<float>());
  }
}

TEST(DetrBoxOps, GiouLossGradcheck) {
  // Partly overlapping and disjoint pairs with distinct coordinates: away from the kinks of
  // max/min (ties) and of the clamp (zero-width intersection).
  Tensor a = from_vector(std::vector<double>{0.5, 0.5, 0.4, 0.3, 0.2, 0.3, 0.1, 0.2, 0.7, 0.6, 0.25, 0.35}, {3, 4});
  Tensor b = from_vector(std::vector<double>{0.56, 0.42, 0.3, 0.37, 0.71, 0.8, 0.15, 0.11, 0.66, 0.63, 0.3, 0.2}, {3, 4});
  a.requires_grad_();
  b.requires_grad_();
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            giou_loss(box_cxcywh_to_xyxy(in[0]), box_cxcywh_to_xyxy(in[1]), Reduction::None)};
      },
      {a, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(DetrBoxOps, RejectsBadShapes) {
  EXPECT_THROW(box_cxcywh_to_xyxy(zeros({3, 5})), Error);
  EXPECT_THROW(box_iou(zeros({3, 4}), zeros({4})), Error);
  try {
    box_area(zeros({2, 3}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("box_area"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tg::detr
