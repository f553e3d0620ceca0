// DETR's set prediction loss (Carion et al. 2020, models/detr.py's HungarianMatcher and
// SetCriterion without the auxiliary heads): each image's queries are matched one to one to
// its objects by the Hungarian algorithm on a cost of class probability, L1 and GIoU; matched
// queries learn their object's class and box, every other query learns "no object".
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::detr {

// One image's objects: class ids in [0, num_classes) and boxes as normalised cxcywh in [0, 1].
struct Target {
  std::vector<int64_t> classes;
  std::vector<std::array<double, 4>> boxes;
};

// DETR's defaults: set_cost_class 1, set_cost_bbox 5, set_cost_giou 2; the same weights on the
// losses (loss_ce 1, loss_bbox 5, loss_giou 2), and eos_coef 0.1 on the no-object class.
struct DetrLossOptions {
  double cost_class = 1, cost_bbox = 5, cost_giou = 2;
  double weight_ce = 1, weight_bbox = 5, weight_giou = 2;
  double eos_coef = 0.1;
  // The normaliser of the box terms when > 0, instead of this batch's objects: data-parallel
  // training passes the objects of the whole global batch divided by the number of processes,
  // as DETR does, so that averaging the processes' gradients gives the global batch's. Below
  // 1 it counts as 1, as DETR clamps it.
  double num_boxes = 0;
};

// Per image, the (query, target) pairs the matcher chose, sorted by query.
using Matching = std::vector<std::vector<std::pair<int64_t, int64_t>>>;

// logits [B, Q, C + 1] (the last class is "no object"), boxes [B, Q, 4] normalised cxcywh.
// Not recorded: the matching is a discrete choice, as in DETR (torch.no_grad()).
Matching hungarian_match(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                         const DetrLossOptions& options = {});

struct DetrLoss {
  Tensor total;               // weight_ce ce + weight_bbox bbox + weight_giou giou (recorded)
  Tensor ce, bbox, giou;      // the unweighted terms (recorded)
  Matching matching;
  double num_boxes = 0;       // the normaliser: objects in the batch, at least 1
};

// ce: cross entropy over all B x Q queries with the class weight vector (1 for each class,
// eos_coef for no-object), mean weighted as torch's F.cross_entropy(weight=...).
// bbox: sum of |pred - target| over matched boxes / num_boxes; giou: sum of 1 - GIoU / num_boxes.
DetrLoss detr_loss(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                   const DetrLossOptions& options = {});

// The same with a given matching (what the tests and the golden comparison use).
DetrLoss detr_loss_with_matching(const Tensor& logits, const Tensor& boxes, const std::vector<Target>& targets,
                                 const Matching& matching, const DetrLossOptions& options = {});

}  // namespace tg::detr
