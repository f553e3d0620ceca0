// Finite-difference checks of every sample case of the ops of this family, in float64, until
// the registry-wide test covers them; plus a float32 smoke run of each case.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

namespace {

const char* const kOps[] = {"pow",     "exp",           "log",          "sqrt",      "rsqrt",   "abs",
                            "clamp",   "sigmoid",       "tanh",         "gelu",      "softmax", "log_softmax",
                            "cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss",
                            "binary_cross_entropy_with_logits", "layer_norm", "dropout", "embedding", "cat", "index_select", "gather", "max", "min", "var", "where"};

TEST(CoreOpsGradcheck, EverySampleCasePassesInFloat64) {
  for (const char* name : kOps) {
    const tg::OpDef* op = tg::registry().find(name);
    ASSERT_NE(op, nullptr) << name << " is not registered";
    ASSERT_NE(op->samples, nullptr) << name << " has no sample cases";
    for (const tg::SampleCase& c : op->samples()) {
      tg::manual_seed(1234);
      std::vector<tg::Tensor> inputs = c.make_inputs(tg::DType::Float64);
      tg::GradcheckResult r = tg::gradcheck(c.run, inputs);
      EXPECT_TRUE(r.ok) << name << " / " << c.name << ": " << r.message;
    }
  }
}

TEST(CoreOpsGradcheck, EverySampleCaseRunsInFloat32WithGradients) {
  for (const char* name : kOps) {
    const tg::OpDef* op = tg::registry().find(name);
    ASSERT_NE(op, nullptr) << name;
    for (const tg::SampleCase& c : op->samples()) {
      tg::manual_seed(1234);
      std::vector<tg::Tensor> inputs = c.make_inputs(tg::DType::Float32);
      std::vector<tg::Tensor> outs = c.run(inputs);
      tg::Tensor total = tg::sum(outs[0]);
      total.backward();
      for (const tg::Tensor& x : inputs) {
        if (!x.requires_grad()) continue;
        ASSERT_TRUE(x.grad().defined()) << name << " / " << c.name;
        EXPECT_EQ(x.grad().dtype(), tg::DType::Float32) << name << " / " << c.name;
        EXPECT_EQ(x.grad().shape(), x.shape()) << name << " / " << c.name;
      }
    }
  }
}

}  // namespace

namespace {

// sigmoid_focal_loss is composed of recorded ops (as torchvision writes it), so it has no
// OpDef of its own; its gradient is checked here directly.
TEST(CoreOpsGradcheck, SigmoidFocalLossComposite) {
  tg::manual_seed(7);
  tg::Tensor x = tg::randn({3, 4}, tg::DType::Float64);
  tg::Tensor t = tg::uniform({3, 4}, 0.0, 1.0, tg::DType::Float64);
  x.requires_grad_();
  t.requires_grad_();
  for (tg::Reduction r : {tg::Reduction::None, tg::Reduction::Mean, tg::Reduction::Sum}) {
    tg::GradcheckResult res = tg::gradcheck(
        [r](const std::vector<tg::Tensor>& in) {
          return std::vector<tg::Tensor>{tg::sigmoid_focal_loss(in[0], in[1], 0.25, 2.0, r)};
        },
        {x, t});
    EXPECT_TRUE(res.ok) << res.message;
  }
}

}  // namespace
