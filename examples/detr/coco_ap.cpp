#include "coco_ap.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "box_ops.h"

namespace tg::detr {

double average_precision(const std::vector<GroundTruthBox>& truth, const std::vector<DetectionBox>& detections,
                         int64_t label, double iou_threshold) {
  // Ground truth of this class, by image; matched flags beside them.
  std::map<int64_t, std::vector<const GroundTruthBox*>> gt_by_image;
  int64_t npos = 0;
  for (const auto& g : truth)
    if (g.label == label) {
      gt_by_image[g.image].push_back(&g);
      ++npos;
    }
  if (npos == 0) return -1.0;
  std::map<int64_t, std::vector<char>> matched;
  for (const auto& [image, boxes] : gt_by_image) matched[image].assign(boxes.size(), 0);

  std::vector<const DetectionBox*> dets;
  for (const auto& d : detections)
    if (d.label == label) dets.push_back(&d);
  // pycocotools' order: score descending, NaN last (numpy's argsort puts NaN at the end), ties
  // by image id (it concatenates the images' detections in id order before a stable sort),
  // then in input order.
  std::stable_sort(dets.begin(), dets.end(), [](const DetectionBox* a, const DetectionBox* b) {
    if (std::isnan(a->score) || std::isnan(b->score)) return !std::isnan(a->score) && std::isnan(b->score);
    return a->score != b->score ? a->score > b->score : a->image < b->image;
  });
  // COCO caps the threshold just below 1, so an IoU of 1 - 1e-11 still matches at 1.
  iou_threshold = std::min(iou_threshold, 1 - 1e-10);

  std::vector<double> precision, recall;
  int64_t tp = 0, fp = 0;
  for (const DetectionBox* d : dets) {
    int64_t best = -1;
    double best_iou = iou_threshold;
    auto it = gt_by_image.find(d->image);
    if (it != gt_by_image.end()) {
      for (size_t k = 0; k < it->second.size(); ++k) {
        if (matched[d->image][k]) continue;
        const double iou = box_iou_value(d->xyxy.data(), it->second[k]->xyxy.data());
        if (iou >= best_iou) {  // COCO: a match needs IoU >= threshold; the best one wins
          best_iou = iou;
          best = static_cast<int64_t>(k);
        }
      }
    }
    if (best >= 0) {
      matched[d->image][best] = 1;
      ++tp;
    } else {
      ++fp;
    }
    recall.push_back(static_cast<double>(tp) / static_cast<double>(npos));
    precision.push_back(static_cast<double>(tp) / static_cast<double>(tp + fp));
  }
  // The precision envelope: the best precision at this recall or any higher one.
  for (size_t i = precision.size(); i-- > 1;) precision[i - 1] = std::max(precision[i - 1], precision[i]);

  double sum = 0;
  for (int r = 0; r <= 100; ++r) {
    // np.linspace(0, 1, 101): r * 0.01 (not r / 100, an ulp lower at r = 35, 41, ...), 1 last.
    const double at = r == 100 ? 1.0 : r * 0.01;
    // The first detection whose recall reaches `at` (pycocotools: np.searchsorted(rc, at, 'left')).
    auto it = std::lower_bound(recall.begin(), recall.end(), at);
    if (it != recall.end()) sum += precision[it - recall.begin()];
  }
  return sum / 101.0;
}

MeanAP mean_average_precision(const std::vector<GroundTruthBox>& truth, const std::vector<DetectionBox>& detections) {
  std::set<int64_t> labels;
  for (const auto& g : truth) labels.insert(g.label);
  MeanAP out;
  out.classes = static_cast<int64_t>(labels.size());
  if (labels.empty()) return out;
  for (int t = 0; t < 10; ++t) {
    // 0.5 + 0.05 t, as pycocotools' np.linspace(.5, .95, 10) computes it: t * step + start,
    // the step rounded first, and the last point exactly the stop.
    const double threshold = t == 9 ? 0.95 : 0.5 + t * ((0.95 - 0.5) / 9.0);
    double m = 0;
    for (int64_t label : labels) m += average_precision(truth, detections, label, threshold);
    m /= static_cast<double>(labels.size());
    if (t == 0) out.map50 = m;
    out.map50_95 += m / 10.0;
  }
  return out;
}

}  // namespace tg::detr
