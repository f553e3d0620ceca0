#include "detr_loss.h"

#include <cmath>

#include "box_ops.h"
#include "hungarian.h"

namespace tg::detr {
namespace {

void check_inputs(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets) {
  TG_CHECK(logits.defined() && logits.dim() == 3 && logits.size(2) >= 2, "detr_loss: expected logits [B, Q, C + 1], got ",
           describe_shape(logits));
  TG_CHECK(boxes.defined() && boxes.dim() == 3 && boxes.size(0) == logits.size(0) && boxes.size(1) == logits.size(1) &&
               boxes.size(2) == 4,
           "detr_loss: expected boxes [", logits.size(0), ", ", logits.size(1), ", 4], got ", describe_shape(boxes));
  TG_CHECK(static_cast<int64_t>(targets.size()) == logits.size(0), "detr_loss: expected ", logits.size(0),
           " targets (one per image), got ", targets.size());
  const int64_t num_classes = logits.size(2) - 1;
  for (size_t b = 0; b < targets.size(); ++b) {
    TG_CHECK(targets[b].classes.size() == targets[b].boxes.size(), "detr_loss: target ", b, " has ",
             targets[b].classes.size(), " classes but ", targets[b].boxes.size(), " boxes");
    for (int64_t c : targets[b].classes)
      TG_CHECK(c >= 0 && c < num_classes, "detr_loss: target ", b, " has class ", c, ", expected [0, ", num_classes, ")");
  }
}

Tensor target_boxes_tensor(const std::vector<std::array<double, 4>>& boxes, DType dtype) {
  std::vector<double> flat;
  for (const auto& b : boxes) flat.insert(flat.end(), b.begin(), b.end());
  return from_vector(flat, {static_cast<int64_t>(boxes.size()), 4}).to(dtype);
}

}  // namespace

Matching hungarian_match(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                         const DetrLossOptions& options) {
  check_inputs(logits, boxes, targets);
  NoGradGuard no_grad;
  const int64_t B = logits.size(0), Q = logits.size(1), C1 = logits.size(2);
  const std::vector<double> prob = softmax(logits.detach(), -1).to(DType::Float64).to_vector<double>();
  Tensor pred_xyxy = box_cxcywh_to_xyxy(boxes.detach().to(DType::Float64));
  const std::vector<double> pred = boxes.detach().to(DType::Float64).to_vector<double>();
  Matching matching(B);
  for (int64_t b = 0; b < B; ++b) {
    const Target& t = targets[b];
    const int64_t T = static_cast<int64_t>(t.classes.size());
    if (T == 0) continue;
    Tensor tgt = target_boxes_tensor(t.boxes, DType::Float64);
    const std::vector<double> giou =
        generalized_box_iou(pred_xyxy.select(0, b), box_cxcywh_to_xyxy(tgt)).to_vector<double>();  // [Q, T]
    std::vector<double> cost(Q * T);
    for (int64_t q = 0; q < Q; ++q) {
      const double* pb = pred.data() + (b * Q + q) * 4;
      for (int64_t j = 0; j < T; ++j) {
        double l1 = 0;
        for (int k = 0; k < 4; ++k) l1 += std::abs(pb[k] - t.boxes[j][k]);
        cost[q * T + j] = -options.cost_class * prob[(b * Q + q) * C1 + t.classes[j]] + options.cost_bbox * l1 -
                          options.cost_giou * giou[q * T + j];
      }
    }
    matching[b] = linear_sum_assignment(cost, Q, T);
  }
  return matching;
}

DetrLoss detr_loss_with_matching(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                                 const Matching& matching, const DetrLossOptions& options) {
  // Under autocast a loss computes in float32 (framework/autocast.h), the set loss too: its GIoU
  // of bf16 boxes would keep 8 significant bits.
  if (auto c = autocast::to_float32(logits, boxes))
    return detr_loss_with_matching(c[0], c[1], targets, matching, options);
  check_inputs(logits, boxes, targets);
  const int64_t B = logits.size(0), Q = logits.size(1), C = logits.size(2) - 1;
  TG_CHECK(static_cast<int64_t>(matching.size()) == B, "detr_loss: expected a matching per image");

  // Classes: no-object everywhere except at matched queries.
  std::vector<int64_t> target_classes(B * Q, C);
  std::vector<int64_t> matched_rows;  // b * Q + q of each matched query, in matching order
  std::vector<std::array<double, 4>> matched_boxes;
  for (int64_t b = 0; b < B; ++b) {
    for (auto [q, j] : matching[b]) {
      TG_CHECK(q >= 0 && q < Q && j >= 0 && j < static_cast<int64_t>(targets[b].classes.size()),
               "detr_loss: matching (", q, ", ", j, ") is out of range for image ", b);
      target_classes[b * Q + q] = targets[b].classes[j];
      matched_rows.push_back(b * Q + q);
      matched_boxes.push_back(targets[b].boxes[j]);
    }
  }
  int64_t total_objects = 0;
  for (const Target& t : targets) total_objects += static_cast<int64_t>(t.classes.size());

  DetrLoss out;
  out.matching = matching;
  // At least 1, a given normaliser too (DETR clamps the global count over processes at 1).
  out.num_boxes = std::max(1.0, options.num_boxes > 0 ? options.num_boxes : static_cast<double>(total_objects));

  // Weighted cross entropy: -sum_i w[y_i] log p_i[y_i] / sum_i w[y_i] (F.cross_entropy(weight=)).
  std::vector<double> w(B * Q);
  double w_sum = 0;
  for (int64_t i = 0; i < B * Q; ++i) w_sum += (w[i] = target_classes[i] == C ? options.eos_coef : 1.0);
  Tensor logp = log_softmax(logits.reshape({B * Q, C + 1}), -1);
  Tensor picked = gather(logp, 1, from_vector(target_classes, {B * Q, 1})).squeeze(1);
  Tensor weights = from_vector(w, {B * Q}).to(logits.dtype());
  out.ce = neg(sum(picked * weights)) / w_sum;

  if (matched_rows.empty()) {
    out.bbox = sum(boxes) * 0.0;  // keep the graph connected so backward reaches the box head
    out.giou = sum(boxes) * 0.0;
  } else {
    const int64_t N = static_cast<int64_t>(matched_rows.size());
    Tensor src = index_select(boxes.reshape({B * Q, 4}), 0, from_vector(matched_rows, {N}));
    Tensor tgt = target_boxes_tensor(matched_boxes, boxes.dtype());
    out.bbox = l1_loss(src, tgt, Reduction::Sum) / out.num_boxes;
    out.giou = giou_loss(box_cxcywh_to_xyxy(src), box_cxcywh_to_xyxy(tgt), Reduction::Sum) / out.num_boxes;
  }
  out.total = out.ce * options.weight_ce + out.bbox * options.weight_bbox + out.giou * options.weight_giou;
  return out;
}

DetrLoss detr_loss(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                   const DetrLossOptions& options) {
  return detr_loss_with_matching(logits, boxes, targets, hungarian_match(logits, boxes, targets, options), options);
}

}  // namespace tg::detr
