// PatchDetr: output shapes and ranges, PyTorch-style parameter names, every parameter reached
// by the loss's gradient, and patches cut whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "detr/detr_loss.h"
#include "detr/patch_detr.h"
#include "detector_checks.h"

namespace tg::detr {
namespace {

PatchDetrOptions small() {
  PatchDetrOptions o;
  o.canvas = 32;
  o.patch = 8;
  o.d_model = 16;
  o.heads = 2;
  o.ffn = 32;
  o.num_queries = 5;
  return o;
}

TEST(DetrPatchDetr, ShapesRangesAndNames) {
  Generator g(0);
  PatchDetr m(small(), &g);
  DetectorOutput out = detect_and_check_names(
      m, g, 3, 32, 5,
      {"patch_embed.weight", "pos_embed", "query_embed", "encoder.0.self_attn.in_proj_weight", "encoder.1.norm2.bias",
       "decoder.1.multihead_attn.out_proj.weight", "decoder.0.norm3.weight", "class_embed.bias", "bbox_embed.4.weight"});
  for (float v : out.boxes.to_vector<float>()) EXPECT_TRUE(v > 0 && v < 1);
  EXPECT_THROW(m.detect(zeros({1, 1, 24, 24})), Error);
  PatchDetrOptions bad = small();
  bad.canvas = 30;
  EXPECT_THROW(PatchDetr{bad}, Error);
}

TEST(DetrPatchDetr, EveryParameterGetsAGradient) {
  Generator g(1);
  PatchDetr m(small(), &g);
  DetectorOutput out = m.detect(rand({2, 1, 32, 32}, DType::Float32, &g));
  std::vector<Target> t = {Target{{3}, {{0.4, 0.5, 0.2, 0.3}}}, Target{{1, 7}, {{0.2, 0.2, 0.1, 0.1}, {0.7, 0.6, 0.3, 0.2}}}};
  detr_loss(out.logits, out.boxes, t).total.backward();
  // DETR's first decoder layer starts from tgt = 0: its self-attention sees zero values (no
  // gradient to its projections) and norm1 normalises the zero-initialised out_proj bias (no
  // gradient to its weight). PyTorch's DETR is the same at init; the biases break the symmetry.
  const std::set<std::string> inert = {"decoder.0.self_attn.in_proj_weight", "decoder.0.self_attn.out_proj.weight",
                                       "decoder.0.norm1.weight"};
  for (const auto& [n, p] : m.named_parameters()) {
    if (inert.count(n)) continue;
    ASSERT_TRUE(p.grad().defined()) << n;
    double norm = 0;
    for (float v : p.grad().to_vector<float>()) norm += double(v) * v;
    EXPECT_GT(norm, 0) << n;
  }
}

TEST(DetrPatchDetr, PatchesAreCutWhole) {
  // Without positional embeddings attention is blind to token order, so moving the content of
  // one whole patch to another patch slot only permutes the tokens: the outputs stay (up to
  // summation order). A wrong patch cut (rows of different patches mixed into a token) or a
  // shift that is not patch-aligned changes the tokens themselves, and the outputs.
  Generator g(2);
  PatchDetr m(small(), &g);
  NoGradGuard no_grad;
  for (auto& [n, p] : m.named_parameters())
    if (n == "pos_embed") p.zero_();
  Generator pix(3);
  std::vector<float> blob = rand({64}, DType::Float32, &pix).to_vector<float>();
  auto scene = [&](int64_t oy, int64_t ox) {
    Tensor t = zeros({1, 1, 32, 32});
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) t.data<float>()[(oy + y) * 32 + ox + x] = blob[y * 8 + x];
    return m.detect(t).logits.to_vector<float>();
  };
  const std::vector<float> a = scene(0, 8), b = scene(16, 24), shifted = scene(4, 8);
  double moved = 0, off = 0;
  for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, double(std::abs(a[i] - b[i]))),
                                        off = std::max(off, double(std::abs(a[i] - shifted[i])));
  EXPECT_LT(moved, 1e-5);  // float32 sums over 16 keys in another order
  EXPECT_GT(off, 1e-3);
}

}  // namespace
}  // namespace tg::detr
