// gradcheck itself: it passes correct gradients and catches wrong ones, with a message that
// names the input, the worst element and both values.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

// An op whose registered backward is deliberately wrong: y = x^2 with "dy/dx = x".
std::vector<Tensor> wrong_square_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {mul(g[0], ctx.saved(0))};  // should be 2 * x * g
}
const OpDef kWrongSquare{"wrong_square", "wrong_square_backward", "self", wrong_square_backward, nullptr};

Tensor wrong_square(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(x, x);
  }
  if (Recorder rec{kWrongSquare, {x}}) {
    rec.save({x});
    rec.set_outputs({y});
  }
  return y;
}

// Overwrites instead of accumulating: its gradient is right, but a user-side bug pattern
// (assigning .grad) is what the accumulation check exists for; here we test the check with
// an op whose backward returns a gradient that ignores grad_output's scale.
std::vector<Tensor> ignores_grad_output_backward(const BackwardContext& ctx, const std::vector<Tensor>&) {
  return {full(ctx.input_shape(0), 2.0, ctx.input_dtype(0))};
}
const OpDef kIgnoresGrad{"ignores_grad", "ignores_grad_backward", "self", ignores_grad_output_backward, nullptr};

Tensor ignores_grad(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(x, 2.0);
  }
  if (Recorder rec{kIgnoresGrad, {x}}) rec.set_outputs({y});
  return y;
}

Tensor input(Shape shape) {
  Tensor t = randn(shape, DType::Float64);
  t.requires_grad_();
  return t;
}

TEST(Gradcheck, PassesACorrectGradient) {
  manual_seed(3);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], x[1])}; },
                                {input({3, 4}), input({4})});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Gradcheck, CatchesAWrongGradientInFullMode) {
  manual_seed(3);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return std::vector<Tensor>{wrong_square(x[0])}; },
                                {input({5})});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("Jacobian mismatch for input 0"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("numerical"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("analytical"), std::string::npos) << r.message;
}

TEST(Gradcheck, CatchesAWrongGradientInFastMode) {
  manual_seed(3);
  GradcheckOptions opt;
  opt.force_fast_mode = true;
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return std::vector<Tensor>{wrong_square(x[0])}; },
                                {input({300})}, opt);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("fast mode"), std::string::npos) << r.message;
}

TEST(Gradcheck, FastModeIsChosenForLargeInputsAndPassesCorrectOps) {
  manual_seed(4);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; },
      {input({40, 30}), input({30, 50})});  // 2700 inputs x 2000 outputs: fast mode
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Gradcheck, CatchesABackwardThatIgnoresTheOutputGradient) {
  manual_seed(5);
  GradcheckOptions opt;
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return std::vector<Tensor>{ignores_grad(x[0])}; },
                                {input({3})}, opt);
  ASSERT_FALSE(r.ok);  // the Jacobian is diagonal 2, but backward returns 2 everywhere per row
}

TEST(Gradcheck, ZeroOutputGradientCheckCatchesAConstantGradient) {
  manual_seed(5);
  // With a one-element input the Jacobian itself is right (d(2x)/dx = 2 and one-hot seeds give 2),
  // so only the zero-grad_output check can see the bug.
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return std::vector<Tensor>{ignores_grad(x[0])}; },
                                {input({1})});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("zero output gradient"), std::string::npos) << r.message;
}

TEST(Gradcheck, RejectsFloat32Inputs) {
  Tensor x = randn({3});
  x.requires_grad_();
  EXPECT_THROW(gradcheck([](const std::vector<Tensor>& v) { return v; }, {x}), Error);
}

}  // namespace
}  // namespace tg
