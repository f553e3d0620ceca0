// The demo's Deformable DETR: shapes, Deformable-DETR-style parameter names, the original's box
// head init (boxes start at the reference points, sized sigmoid(-2)), gradients reaching the
// parameters, the convolutional backbone's geometry, and a few training steps that lower the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <unistd.h>
#include <filesystem>
#include <iostream>

#include "detr/deformable_detector.h"
#include "detr/detr_loss.h"
#include "detr/trainer.h"
#include "detector_checks.h"
#include "golden.h"
#include "test_util.h"
#include "tiny_run.h"

namespace tg::detr {
namespace {

DeformableDetectorOptions small() {
  DeformableDetectorOptions o;
  o.canvas = 32;
  o.channels = {8, 16, 16};
  o.d_model = 32;  // GroupNorm(32) needs a multiple of 32
  o.heads = 2;
  o.ffn = 32;
  o.num_queries = 6;
  return o;
}

TEST(DetrDeformable, ShapesNamesAndInitialBoxes) {
  Generator g(0);
  DeformableDetector m(small(), &g);
  DetectorOutput out = detect_and_check_names(
      m, g, 2, 32, 6,
      {"backbone.stem.0.weight", "backbone.stages.0.0.weight", "backbone.stages.2.4.bias", "fpn_output.0.weight",
       "input_proj.1.0.weight", "input_proj.2.1.weight", "fpn_lateral.0.bias", "transformer.level_embed",
       "transformer.encoder.layers.1.self_attn.sampling_offsets.weight",
       "transformer.decoder.layers.0.cross_attn.value_proj.weight", "transformer.reference_points.weight",
       "query_embed", "class_embed.weight", "bbox_embed.4.bias"});
  // At init the last box layer is zero with bias (0, 0, -2, -2): every box is centred on its
  // query's reference point, sigmoid(Linear(query_pos)), and sized sigmoid(-2) = 0.1192.
  std::vector<float> b = out.boxes.to_vector<float>();
  const float small_side = static_cast<float>(1.0 / (1.0 + std::exp(2.0)));
  for (size_t i = 0; i < b.size(); i += 4) {
    EXPECT_NEAR(b[i + 2], small_side, 1e-6);
    EXPECT_NEAR(b[i + 3], small_side, 1e-6);
  }
  // Same queries in both images: the same reference points, so the same initial centres.
  for (size_t i = 0; i < 6 * 4; ++i) EXPECT_NEAR(b[i], b[i + 24], 1e-6) << i;
  EXPECT_THROW(m.detect(zeros({1, 1, 16, 16})), Error);
  DeformableDetectorOptions bad = small();
  bad.canvas = 40;  // not a multiple of the coarsest stride, 16
  EXPECT_THROW(DeformableDetector{bad}, Error);
}

// The README's description of the demo's default model (train_detr's defaults): 0.68 M
// parameters, encoder and decoder of two layers.
TEST(DetrDeformable, TheDefaultModelHasTheReadmesSize) {
  const TrainOptions defaults;
  ASSERT_EQ(defaults.model, "deformable");
  const std::unique_ptr<Detector> model = make_detector(defaults);
  EXPECT_EQ(model->num_parameters(), 683633);
  const DeformableDetectorOptions d;
  EXPECT_EQ(d.channels, (std::vector<int64_t>{32, 64, 128}));
  EXPECT_EQ(d.encoder_layers, 2);
  EXPECT_EQ(d.decoder_layers, 2);
  EXPECT_EQ(d.d_model, 64);
  EXPECT_EQ(d.heads, 4);
  EXPECT_EQ(d.points, 4);
  EXPECT_EQ(defaults.num_queries, 16);
}

TEST(DetrDeformable, ConvBackboneGeometry) {
  Generator g(1);
  ConvBackbone p({4, 8, 8}, &g);
  std::vector<Tensor> levels = p.levels(rand({2, 1, 64, 64}, DType::Float32, &g));
  ASSERT_EQ(levels.size(), 3u);
  EXPECT_EQ(levels[0].shape(), (Shape{2, 4, 16, 16}));  // stride 4
  EXPECT_EQ(levels[1].shape(), (Shape{2, 8, 8, 8}));    // stride 8
  EXPECT_EQ(levels[2].shape(), (Shape{2, 8, 4, 4}));    // stride 16
  // Every level ends in a ReLU.
  for (const Tensor& l : levels)
    for (float v : l.to_vector<float>()) ASSERT_GE(v, 0.0f);
  // Images are independent: GroupNorm's statistics are per image, never per batch.
  NoGradGuard no_grad;
  Tensor two = rand({2, 1, 64, 64}, DType::Float32, &g);
  std::vector<Tensor> both = p.levels(two), first = p.levels(two.narrow(0, 0, 1).contiguous());
  EXPECT_TRUE(tg::testing::same_bits(both[2].narrow(0, 0, 1).contiguous(), first[2]));
}

TEST(DetrDeformable, GradientsReachTheModel) {
  Generator g(2);
  DeformableDetector m(small(), &g);
  DetectorOutput out = m.detect(rand({2, 1, 32, 32}, DType::Float32, &g));
  std::vector<Target> t = {Target{{3}, {{0.4, 0.5, 0.2, 0.3}}}, Target{{1, 7}, {{0.2, 0.2, 0.1, 0.1}, {0.7, 0.6, 0.3, 0.2}}}};
  detr_loss(out.logits, out.boxes, t).total.backward();
  int64_t with_grad = 0, total = 0;
  for (const auto& [n, p] : m.named_parameters()) {
    ++total;
    if (!p.grad().defined()) continue;
    double norm = 0;
    for (float v : p.grad().to_vector<float>()) norm += double(v) * v;
    with_grad += norm > 0;
  }
  // Nearly all: a few get exact zeros at init by construction (e.g. MSDeformAttn's sampling
  // offsets and attention weights are zero-initialised, which zeroes some products).
  EXPECT_GT(with_grad, total * 9 / 10) << with_grad << " of " << total;
  for (const char* n : {"backbone.stages.0.0.weight", "query_embed", "transformer.reference_points.weight",
                        "bbox_embed.4.weight", "class_embed.weight"}) {
    for (const auto& [name, p] : m.named_parameters())
      if (name == n) { EXPECT_TRUE(p.grad().defined()) << n; }
  }
}

TEST(DetrDeformable, TrainingStepsLowerTheLoss) {
  TrainOptions o = tiny_options(fresh_dir("deformable"));
  o.val_scenes = 8;
  o.sheet_scenes = 2;
  o.num_queries = TrainOptions{}.num_queries;
  std::ostringstream log;
  TrainResult r = run_training(o, log);
  ASSERT_EQ(r.history.size(), 3u);
  std::cout << "deformable smoke loss per epoch: " << r.history[0].train_loss << " " << r.history[1].train_loss << " "
            << r.history[2].train_loss << "\n";
  EXPECT_LT(r.history[2].train_loss, 0.95 * r.history[0].train_loss);
  std::filesystem::remove_all(o.out);
}

}  // namespace
}  // namespace tg::detr
