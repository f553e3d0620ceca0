#include "box_ops.h"

#include <algorithm>

namespace tg::detr {
namespace {

void check_boxes(const Tensor& b, const char* op, const char* arg) {
  TG_CHECK(b.defined(), op, ": ", arg, " is undefined");
  TG_CHECK(b.dim() >= 1 && b.size(-1) == 4, op, ": expected ", arg, " to have a last dim of size 4, got shape ",
           format_shape(b.shape()));
  TG_CHECK(b.dtype() != DType::Int64, op, ": expected ", arg, " to be float32 or float64, got int64");
}

Tensor coord(const Tensor& b, int64_t i) { return b.select(-1, i); }

// 16-bit boxes are compared in float32 and the result is float32, as torchvision's _upcast:
// a bfloat16 IoU (8 bits) cannot tell 0.969 from 0.961.
Tensor upcast(const Tensor& b) { return is_reduced_floating(b.dtype()) ? b.to(DType::Float32) : b; }

struct InterUnion {
  Tensor inter, uni;
};

InterUnion inter_union(const Tensor& a, const Tensor& b) {
  Tensor w = clamp_min(minimum(coord(a, 2), coord(b, 2)) - maximum(coord(a, 0), coord(b, 0)), 0.0);
  Tensor h = clamp_min(minimum(coord(a, 3), coord(b, 3)) - maximum(coord(a, 1), coord(b, 1)), 0.0);
  Tensor inter = w * h;
  return {inter, box_area(a) + box_area(b) - inter};
}

}  // namespace

Tensor box_cxcywh_to_xyxy(const Tensor& boxes) {
  check_boxes(boxes, "box_cxcywh_to_xyxy", "boxes");
  Tensor cx = coord(boxes, 0), cy = coord(boxes, 1), hw = coord(boxes, 2) * 0.5, hh = coord(boxes, 3) * 0.5;
  return stack({cx - hw, cy - hh, cx + hw, cy + hh}, -1);
}

Tensor box_xyxy_to_cxcywh(const Tensor& boxes) {
  check_boxes(boxes, "box_xyxy_to_cxcywh", "boxes");
  Tensor x0 = coord(boxes, 0), y0 = coord(boxes, 1), x1 = coord(boxes, 2), y1 = coord(boxes, 3);
  return stack({(x0 + x1) * 0.5, (y0 + y1) * 0.5, x1 - x0, y1 - y0}, -1);
}

Tensor box_area(const Tensor& xyxy) {
  check_boxes(xyxy, "box_area", "boxes");
  const Tensor b = upcast(xyxy);
  return (coord(b, 2) - coord(b, 0)) * (coord(b, 3) - coord(b, 1));
}

Tensor box_iou_paired(const Tensor& a_in, const Tensor& b_in) {
  check_boxes(a_in, "box_iou", "a");
  check_boxes(b_in, "box_iou", "b");
  const Tensor a = upcast(a_in), b = upcast(b_in);
  InterUnion iu = inter_union(a, b);
  return iu.inter / iu.uni;
}

Tensor generalized_box_iou_paired(const Tensor& a_in, const Tensor& b_in) {
  check_boxes(a_in, "generalized_box_iou", "a");
  check_boxes(b_in, "generalized_box_iou", "b");
  const Tensor a = upcast(a_in), b = upcast(b_in);
  InterUnion iu = inter_union(a, b);
  // The smallest box enclosing both; GIoU = IoU - (enclosure - union) / enclosure.
  Tensor w = maximum(coord(a, 2), coord(b, 2)) - minimum(coord(a, 0), coord(b, 0));
  Tensor h = maximum(coord(a, 3), coord(b, 3)) - minimum(coord(a, 1), coord(b, 1));
  Tensor enclosure = clamp_min(w, 0.0) * clamp_min(h, 0.0);
  return iu.inter / iu.uni - (enclosure - iu.uni) / enclosure;
}

Tensor box_iou(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2, "box_iou: expected [N, 4] and [M, 4] boxes");
  return box_iou_paired(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor generalized_box_iou(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2,
           "generalized_box_iou: expected [N, 4] and [M, 4] boxes");
  return generalized_box_iou_paired(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor giou_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  // In float32 for 16-bit boxes, rounded once to their dtype (torchvision's loss keeps it).
  const Tensor loss = apply_reduction(rsub(generalized_box_iou_paired(a, b), 1.0), reduction);
  return is_reduced_floating(a.dtype()) ? loss.to(a.dtype()) : loss;
}

double box_iou_value(const double* a, const double* b) {
  const double w = std::max(0.0, std::min(a[2], b[2]) - std::max(a[0], b[0]));
  const double h = std::max(0.0, std::min(a[3], b[3]) - std::max(a[1], b[1]));
  const double inter = w * h;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0.0;
}

}  // namespace tg::detr
