// sigmoid_focal_loss has no OpDef (it is composed of registered ops, as torchvision writes it),
// so the registry-wide gradcheck (test_registry_gradcheck.cpp) does not reach it: checked here.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

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
