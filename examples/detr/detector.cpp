#include "detector.h"

#include <cmath>

namespace tg::detr {

TinyDetector::TinyDetector(TinyDetectorOptions options, Generator* gen) : o_(options) {
  TG_CHECK(o_.canvas > 0 && o_.num_queries > 0 && o_.num_classes > 0 && o_.hidden > 0,
           "TinyDetector: every size must be positive");
  fc1_ = add_module("fc1", std::make_shared<Linear>(o_.canvas * o_.canvas, o_.hidden, true, DType::Float32, gen));
  fc2_ = add_module("fc2", std::make_shared<Linear>(o_.hidden, o_.hidden, true, DType::Float32, gen));
  class_head_ = add_module("class_embed",
                           std::make_shared<Linear>(o_.hidden, o_.num_queries * (o_.num_classes + 1), true, DType::Float32, gen));
  box_head_ = add_module("bbox_embed", std::make_shared<Linear>(o_.hidden, o_.num_queries * 4, true, DType::Float32, gen));
}

DetectorOutput TinyDetector::detect(const Tensor& images) {
  TG_CHECK(images.defined() && images.dim() == 4 && images.size(1) == 1 && images.size(2) == o_.canvas &&
               images.size(3) == o_.canvas,
           "TinyDetector: expected images [B, 1, ", o_.canvas, ", ", o_.canvas, "], got ", describe_shape(images));
  const int64_t B = images.size(0);
  Tensor h = relu(fc2_->forward(relu(fc1_->forward(images.reshape({B, -1})))));
  return {class_head_->forward(h).reshape({B, o_.num_queries, o_.num_classes + 1}),
          sigmoid(box_head_->forward(h).reshape({B, o_.num_queries, 4}))};
}

std::string TinyDetector::config() const {
  return "tiny canvas=" + std::to_string(o_.canvas) + " queries=" + std::to_string(o_.num_queries) +
         " classes=" + std::to_string(o_.num_classes) + " hidden=" + std::to_string(o_.hidden);
}

DetrHeads make_detr_heads(int64_t d, int64_t num_classes, Generator* gen) {
  DetrHeads h;
  h.class_embed = std::make_shared<Linear>(d, num_classes + 1, true, DType::Float32, gen);
  h.bbox_embed = std::make_shared<Sequential>();
  h.bbox_embed->push_back(std::make_shared<Linear>(d, d, true, DType::Float32, gen));
  h.bbox_embed->push_back(std::make_shared<ReLU>());
  h.bbox_embed->push_back(std::make_shared<Linear>(d, d, true, DType::Float32, gen));
  h.bbox_embed->push_back(std::make_shared<ReLU>());
  h.bbox_output = h.bbox_embed->push_back(std::make_shared<Linear>(d, 4, true, DType::Float32, gen));
  return h;
}

Tensor inverse_sigmoid(const Tensor& x, double eps) {
  Tensor c = clamp(x, 0.0, 1.0);
  return log(clamp_min(c, eps)) - log(clamp_min(rsub(c, 1.0), eps));
}

std::vector<DetectionBox> postprocess(const DetectorOutput& out, int64_t canvas, int64_t first_image) {
  NoGradGuard no_grad;
  const int64_t B = out.logits.size(0), Q = out.logits.size(1), C1 = out.logits.size(2);
  const std::vector<double> prob = softmax(out.logits.detach(), -1).to(DType::Float64).to_vector<double>();
  const std::vector<double> box = out.boxes.detach().to(DType::Float64).to_vector<double>();
  std::vector<DetectionBox> dets;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t q = 0; q < Q; ++q) {
      const double* p = prob.data() + (b * Q + q) * C1;
      int64_t best = 0;
      for (int64_t c = 1; c < C1 - 1; ++c)
        if (p[c] > p[best]) best = c;
      const double* bx = box.data() + (b * Q + q) * 4;
      const double s = static_cast<double>(canvas);
      dets.push_back({first_image + b, best, p[best],
                      {(bx[0] - bx[2] / 2) * s, (bx[1] - bx[3] / 2) * s, (bx[0] + bx[2] / 2) * s, (bx[1] + bx[3] / 2) * s}});
    }
  return dets;
}

}  // namespace tg::detr
