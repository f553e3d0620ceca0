// Deformable-DETR blocks beyond the PyTorch fixtures: finite differences through the whole
// MSDeformAttn module (both reference-point forms), the decoder's box-refinement hook and
// intermediate outputs, and dropout following train()/eval().
#include <gtest/gtest.h>

#include <cmath>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;

Tensor ss_small() { return from_vector(std::vector<int64_t>{3, 3, 2, 2}, {2, 2}); }
Tensor lsi_small() { return from_vector(std::vector<int64_t>{0, 9}, {2}); }

// Sampling is bilinear, so the output is piecewise linear in the locations: a difference step
// of 1e-6 crossing a pixel edge would break the check. Random locations miss the edges by far
// more than 1e-6 (the chance is ~1e-5 per sample); the seed is fixed, so this is deterministic.
void gradcheck_msda(int64_t ref_dim) {
  manual_seed(7);
  MSDeformAttn m(8, 2, 2, 2, DType::Float64);
  // Off the init: the zero attention/offset weights would make some paths vanish.
  {
    NoGradGuard g;
    for (Tensor p : m.parameters()) p.add_(randn(p.shape(), DType::Float64) * 0.3);
  }
  const int64_t N = 2, Q = 3, S = 13;
  Tensor query = randn({N, Q, 8}, DType::Float64).requires_grad_();
  Tensor input = randn({N, S, 8}, DType::Float64).requires_grad_();
  Tensor ref = ref_dim == 2 ? (0.2 + 0.6 * rand({N, Q, 2, 2}, DType::Float64))
                            : cat({0.3 + 0.4 * rand({N, Q, 2, 2}, DType::Float64),
                                   0.2 + 0.3 * rand({N, Q, 2, 2}, DType::Float64)}, -1);
  ref.requires_grad_();
  Tensor mask = zeros({N, S}, DType::Int64);
  mask.detach().narrow(0, 1, 1).narrow(1, 10, 3).fill_(1.0);
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{m.forward(x[0], x[2], x[1], ss_small(), lsi_small(), mask)};
      },
      {query, input, ref});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(DeformableDetrBehaviour, MSDeformAttnGradcheckWithPointReferences) { gradcheck_msda(2); }
TEST(DeformableDetrBehaviour, MSDeformAttnGradcheckWithBoxReferences) { gradcheck_msda(4); }

std::shared_ptr<DeformableTransformerDecoder> small_decoder(bool intermediate) {
  manual_seed(3);
  return std::make_shared<DeformableTransformerDecoder>(
      2, [] { return std::make_shared<DeformableTransformerDecoderLayer>(8, 16, 0.0, "relu", 2, 2, 2, DType::Float64); },
      intermediate);
}

TEST(DeformableDetrBehaviour, DecoderRefinementHookAndIntermediateOutputs) {
  NoGradGuard no_grad;
  auto plain = small_decoder(false), inter = small_decoder(true);
  inter->load_state_dict(plain->state_dict());
  const int64_t N = 2, Q = 4, S = 13;
  manual_seed(11);
  Tensor tgt = randn({N, Q, 8}, DType::Float64), pos = randn({N, Q, 8}, DType::Float64);
  Tensor src = randn({N, S, 8}, DType::Float64);
  Tensor ratios = 0.5 + 0.5 * rand({N, 2, 2}, DType::Float64);
  Tensor boxes = cat({0.3 + 0.4 * rand({N, Q, 2}, DType::Float64), 0.1 + 0.2 * rand({N, Q, 2}, DType::Float64)}, -1);

  DecoderOutput a = plain->forward(tgt, boxes, src, ss_small(), lsi_small(), ratios, pos);
  DecoderOutput b = inter->forward(tgt, boxes, src, ss_small(), lsi_small(), ratios, pos);
  ASSERT_EQ(b.output.shape(), (Shape{2, N, Q, 8}));
  ASSERT_EQ(b.reference_points.shape(), (Shape{2, N, Q, 4}));
  expect_close(b.output.select(0, 1), a.output, 0, 0, "last intermediate output == final output");
  expect_close(a.reference_points, boxes, 0, 0, "references unchanged without refinement");

  // A refinement that shifts the boxes: layer i's references are the hook applied i times,
  // and the second layer, seeing other references, gives another output.
  std::vector<int64_t> calls;
  inter->refine = [&](int64_t i, const Tensor& out, const Tensor& ref) {
    calls.push_back(i);
    EXPECT_EQ(out.shape(), (Shape{N, Q, 8}));
    return ref * 0.9 + 0.05;
  };
  DecoderOutput c = inter->forward(tgt, boxes, src, ss_small(), lsi_small(), ratios, pos);
  EXPECT_EQ(calls, (std::vector<int64_t>{0, 1}));
  expect_close(c.reference_points.select(0, 1), (boxes * 0.9 + 0.05) * 0.9 + 0.05, 1e-15, 1e-15, "refined twice");
  expect_close(c.output.select(0, 0), b.output.select(0, 0), 0, 0, "first layer unaffected");
  EXPECT_GT(max(abs(c.output.select(0, 1) - b.output.select(0, 1))).item<double>(), 1e-6);
}

TEST(DeformableDetrBehaviour, DropoutFollowsTrainAndEval) {
  manual_seed(5);
  DeformableTransformerEncoderLayer with(8, 16, 0.5, "relu", 2, 2, 2, DType::Float64);
  DeformableTransformerEncoderLayer without(8, 16, 0.0, "relu", 2, 2, 2, DType::Float64);
  without.load_state_dict(with.state_dict());
  NoGradGuard no_grad;
  Tensor src = randn({1, 13, 8}, DType::Float64);
  Tensor ref = get_reference_points(ss_small(), ones({1, 2, 2}, DType::Float64));
  auto run = [&](DeformableTransformerEncoderLayer& l) { return l.forward(src, Tensor(), ref, ss_small(), lsi_small()); };
  Tensor reference = run(without);
  EXPECT_GT(max(abs(run(with) - reference)).item<double>(), 1e-3);  // training: dropout active
  with.eval();
  expect_close(run(with), reference, 0, 0, "eval() output equals the dropout-free layer");
}

TEST(DeformableDetrBehaviour, ReferencePointsAreValidPixelCentres) {
  // One level of 2x4 with the right half padded (valid ratio w 0.5, h 1): key (i, j) sits at
  // ((j + 0.5) / 2, (i + 0.5) / 2) of the valid region, then times the ratios (0.5, 1).
  Tensor ss = from_vector(std::vector<int64_t>{2, 4}, {1, 2});
  Tensor mask = from_vector(std::vector<int64_t>{0, 0, 1, 1, 0, 0, 1, 1}, {1, 2, 4});
  Tensor ratios = get_valid_ratio(mask, DType::Float64);
  expect_close(ratios, from_vector(std::vector<double>{0.5, 1.0}, {1, 2}), 0, 0, "valid ratio (w, h)");
  Tensor ref = get_reference_points(ss, ratios.unsqueeze(1));
  ASSERT_EQ(ref.shape(), (Shape{1, 8, 1, 2}));
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) expected.insert(expected.end(), {(j + 0.5) / 2 * 0.5, (i + 0.5) / 2});
  expect_close(ref, from_vector(expected, {1, 8, 1, 2}), 1e-15, 0, "reference points");
  // A mask with no rows or columns has no first column to read (it read past the empty mask).
  for (const Shape& empty : {Shape{2, 0, 4}, Shape{2, 3, 0}}) {
    const std::string err = error_of([&] { get_valid_ratio(zeros(empty, DType::Int64), DType::Float32); });
    EXPECT_NE(err.find("get_valid_ratio: expected a mask with H > 0 and W > 0"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace tg
