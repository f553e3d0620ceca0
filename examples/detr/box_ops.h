// Box arithmetic for the detector, as recorded tensor ops (composed from existing ops) so that
// gradients flow through them: the L1 and generalised-IoU losses train the box head.
//
// Boxes live in the last dim (size 4): cxcywh = (centre x, centre y, width, height), xyxy =
// (x0, y0, x1, y1). The *_paired functions broadcast their two [..., 4] arguments against each
// other (DETR's matrices are paired(a.unsqueeze(1), b.unsqueeze(0))); box_iou and
// generalized_box_iou are the [N, M] matrices of torchvision.ops. As there, areas and IoUs of
// 16-bit boxes are computed and returned in float32; giou_loss rounds its result once to the
// boxes' dtype. Boxes are not checked for x1 >= x0 (DETR asserts it; an inverted box gives a
// negative area here, as in torchvision).
#pragma once

#include <tapegrad/tapegrad.h>

namespace tg::detr {

Tensor box_cxcywh_to_xyxy(const Tensor& boxes);
Tensor box_xyxy_to_cxcywh(const Tensor& boxes);
Tensor box_area(const Tensor& xyxy);  // [...]: (x1 - x0) (y1 - y0)

// IoU and generalised IoU (Rezatofighi et al. 2019) of a and b broadcast together: [..., 4] -> [...].
Tensor box_iou_paired(const Tensor& a, const Tensor& b);
Tensor generalized_box_iou_paired(const Tensor& a, const Tensor& b);

// [N, 4] x [M, 4] -> [N, M], xyxy boxes.
Tensor box_iou(const Tensor& a, const Tensor& b);
Tensor generalized_box_iou(const Tensor& a, const Tensor& b);

// 1 - GIoU of matched xyxy pairs, reduced (Sum, Mean or None).
Tensor giou_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Sum);

// The IoU of two xyxy boxes in plain doubles, for evaluation (no tape).
double box_iou_value(const double* a, const double* b);

}  // namespace tg::detr
