// DETR's loss against DETR's own formulation in PyTorch (tools/fixtures/detr_loss.py, with a
// brute-force matcher): the same matching, the same loss terms, the same gradients.
#include <gtest/gtest.h>

#include "detr/detr_loss.h"
#include "golden.h"

namespace tg::detr {
namespace {

using tg::testing::expect_close;

// float64 on both sides; the only differences are summation orders in log_softmax and the
// sums over a few dozen terms: 1e-12 relative is ~1e4 ulps of headroom.
constexpr double kRtol = 1e-12, kAtol = 1e-14;

TEST(DetrLossGolden, MatchesPyTorch) {
  auto cases = tg::testing::load_golden_cases("detr_loss");
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    Tensor logits = c.tensor("logits").requires_grad_();
    Tensor boxes = c.tensor("boxes").requires_grad_();
    std::vector<int64_t> labels = c.tensor("target_labels").to_vector<int64_t>();
    std::vector<double> tboxes = c.tensor("target_boxes").to_vector<double>();
    std::vector<Target> targets;
    size_t k = 0;
    for (int64_t count : c.json["counts"].get<std::vector<int64_t>>()) {
      Target t;
      for (int64_t i = 0; i < count; ++i, ++k) {
        t.classes.push_back(labels[k]);
        t.boxes.push_back({tboxes[4 * k], tboxes[4 * k + 1], tboxes[4 * k + 2], tboxes[4 * k + 3]});
      }
      targets.push_back(t);
    }
    DetrLoss l = detr_loss(logits, boxes, targets);
    // The matching: (image, query, target) triples, in the fixture's order.
    std::vector<int64_t> want = c.tensor("matching").to_vector<int64_t>(), got;
    for (size_t b = 0; b < l.matching.size(); ++b)
      for (auto [q, j] : l.matching[b]) got.insert(got.end(), {static_cast<int64_t>(b), q, j});
    EXPECT_EQ(got, want);
    for (const char* term : {"ce", "bbox", "giou", "total"}) {
      const Tensor& v = std::string(term) == "ce" ? l.ce : std::string(term) == "bbox" ? l.bbox
                      : std::string(term) == "giou" ? l.giou : l.total;
      const double e = c.json[term].get<double>();
      EXPECT_NEAR(v.item(), e, kAtol + kRtol * std::abs(e)) << term;
    }
    l.total.backward();
    expect_close(logits.grad(), c.tensor("grad_logits"), kRtol, kAtol, "grad logits");
    expect_close(boxes.grad(), c.tensor("grad_boxes"), kRtol, kAtol, "grad boxes");
  }
}

}  // namespace
}  // namespace tg::detr
