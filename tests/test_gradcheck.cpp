// gradcheck itself: it passes correct gradients and catches wrong ones, with a message that
// names the input, the worst element and both values.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

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

// y = x^2 whose backward puts NaN in element 0 whenever its gradient is not zero: a NaN
// difference compared false against the tolerance and passed silently (PyTorch's gradcheck,
// like torch.allclose, fails it).
std::vector<Tensor> nan_square_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  Tensor d = mul(mul(g[0], ctx.saved(0)), 2.0).contiguous();
  if (d.numel() > 0 && d.data<double>()[0] != 0) d.data<double>()[0] = NAN;
  return {d};
}
const OpDef kNanSquare{"nan_square", "nan_square_backward", "self", nan_square_backward, nullptr};

TEST(Gradcheck, ANanInTheGradientFailsInFullMode) {
  manual_seed(3);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor y;
        {
          NoGradGuard no_grad;
          y = mul(x[0], x[0]);
        }
        if (Recorder rec{kNanSquare, {x[0]}}) {
          rec.save({x[0]});
          rec.set_outputs({y});
        }
        return std::vector<Tensor>{y};
      },
      {input({4})});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("Jacobian mismatch for input 0 (shape [4]): worst at input element 0"), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("analytical nan"), std::string::npos) << r.message;
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

// y = 2 x whose backward is off by 1e-12 relative on every other call: right to finite
// differences' tolerance, but not the same bits twice, which only the repeatability check sees.
int g_flaky_calls = 0;
std::vector<Tensor> flaky_backward(const BackwardContext&, const std::vector<Tensor>& g) {
  return {mul(g[0], 2.0 * (1 + (g_flaky_calls++ % 2) * 1e-12))};
}
const OpDef kFlaky{"flaky_double", "flaky_double_backward", "self", flaky_backward, nullptr};

// y = 2 x whose backward also clears its input's .grad() (a user's hook or op writing .grad()
// instead of returning a gradient): right gradients, but an existing .grad() is lost.
Tensor g_clobbered;
std::vector<Tensor> clobbering_backward(const BackwardContext&, const std::vector<Tensor>& g) {
  if (g_clobbered.defined()) g_clobbered.zero_grad();
  return {mul(g[0], 2.0)};
}
const OpDef kClobbering{"clobbering_double", "clobbering_double_backward", "self", clobbering_backward, nullptr};

Tensor doubled_by(const OpDef& def, const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(x, 2.0);
  }
  if (Recorder rec{def, {x}}) rec.set_outputs({y});
  return y;
}

TEST(Gradcheck, RepeatabilityCheckCatchesABackwardThatChangesBits) {
  manual_seed(6);
  const GradcheckFn fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{doubled_by(kFlaky, x[0])}; };
  GradcheckResult r = gradcheck(fn, {input({3})});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("backward is not repeatable for input 0"), std::string::npos) << r.message;
  GradcheckOptions off;
  off.check_repeatable = false;
  EXPECT_TRUE(gradcheck(fn, {input({3})}, off).ok);  // the Jacobian itself passes
}

TEST(Gradcheck, AccumulationCheckCatchesABackwardThatLosesAnExistingGrad) {
  manual_seed(7);
  Tensor x = input({3});
  g_clobbered = x;
  const GradcheckFn fn = [](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{doubled_by(kClobbering, v[0])};
  };
  GradcheckResult r = gradcheck(fn, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("did not add into the existing .grad() of input 0"), std::string::npos) << r.message;
  GradcheckOptions off;
  off.check_accumulates = false;
  EXPECT_TRUE(gradcheck(fn, {x}, off).ok) << gradcheck(fn, {x}, off).message;
  g_clobbered = Tensor();
}

// gradcheck leaves every .grad() as it found it (the caller's, and a captured parameter's: the
// accumulation check's backward wrote both), passes an input given twice, and ignores outputs
// that do not require grad, as PyTorch's gradcheck.
TEST(Gradcheck, LeavesGradientsAloneTakesAnInputTwiceAndSkipsConstantOutputs) {
  manual_seed(8);
  Tensor x = input({3}), w = input({2, 3});
  x.set_grad(full({3}, 7.0, DType::Float64));
  const GradcheckFn through_w = [&w](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{linear(v[0], w, Tensor())};
  };
  EXPECT_TRUE(gradcheck(through_w, {x}).ok);
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(3, 7.0));
  EXPECT_FALSE(w.grad().defined());
  const GradcheckFn product = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{mul(v[0], v[1])}; };
  const GradcheckResult twice = gradcheck(product, {x, x});
  EXPECT_TRUE(twice.ok) << twice.message;
  Tensor unused = input({2});  // checked, but no output depends on it: its .grad() stays undefined
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return std::vector<Tensor>{mul(v[0], 2.0)}; }, {x, unused}).ok);
  EXPECT_FALSE(unused.grad().defined());
  const GradcheckFn with_constant = [](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{mul(v[0], 2.0), mul(v[0], 3.0).detach()};
  };
  const GradcheckResult constant = gradcheck(with_constant, {x});
  EXPECT_TRUE(constant.ok) << constant.message;
}

// The failure names the output and its element (it gave the index into all outputs joined).
TEST(Gradcheck, AFailureNamesTheOutputAndItsElement) {
  manual_seed(9);
  const GradcheckFn two_outputs = [](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{mul(v[0], 2.0), wrong_square(v[0])};
  };
  const GradcheckResult r = gradcheck(two_outputs, {input({5})});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("and output 1 element "), std::string::npos) << r.message;
}

TEST(Gradcheck, RejectsFloat32Inputs) {
  Tensor x = randn({3});
  x.requires_grad_();
  EXPECT_THROW(gradcheck([](const std::vector<Tensor>& v) { return v; }, {x}), Error);
}

// An input whose elements share memory (expanded): finite differences cannot perturb one element
// alone, so gradcheck says so (it failed inside add_ with add_'s message).
TEST(Gradcheck, RejectsAnExpandedInputWithItsOwnMessage) {
  Tensor x = randn({1, 3}, DType::Float64).expand({2, 3});
  x.requires_grad_();
  EXPECT_EQ(tg::testing::error_of([&] { gradcheck([](const std::vector<Tensor>& v) { return v; }, {x}); }),
            "gradcheck: input 0 of shape [2, 3] and strides [0, 1] has elements that share memory (a stride of 0, "
            "as from expand()): finite differences need each element on its own; pass contiguous() of it");
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

// y = x^2 twice: once with a backward 2 g x that records (right second derivative 2 g), once
// with one that uses x as a constant (its second derivative in x is lost: 0 instead of 2 g).
std::vector<Tensor> square_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {mul(mul(g[0], ctx.saved(0)), 2.0)};
}
std::vector<Tensor> square_backward_constant_x(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {mul(mul(g[0], ctx.saved(0).detach()), 2.0)};
}
const OpDef kSquare{"square_test", "square_test_backward", "self", square_backward, nullptr, true};
const OpDef kSquareConstX{"square_const_x", "square_const_x_backward", "self", square_backward_constant_x, nullptr,
                          true};

Tensor square_with(const OpDef& op, const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = mul(x, x);
  }
  if (Recorder rec{op, {x}}) {
    rec.save({x});
    rec.set_outputs({y});
  }
  return y;
}

TEST(Gradgradcheck, PassesARightSecondDerivativeAndCatchesALostOne) {
  Tensor x = randn({4}, DType::Float64);
  x.requires_grad_();
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{square_with(kSquare, in[0])}; },
                            {x}));
  // First derivatives are right, so gradcheck passes; the second derivative is wrong.
  auto bad = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{square_with(kSquareConstX, in[0])}; };
  EXPECT_TRUE(gradcheck(bad, {x}));
  GradcheckResult r = gradgradcheck(bad, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("gradgradcheck"), std::string::npos) << r.message;
}

TEST(DoubleBackward, HessianVectorProductOfACubicIsExact) {
  // f(x) = sum(x^3): grad = 3 x^2, Hessian = diag(6 x), so H v = 6 x v.
  Tensor x = from_vector(std::vector<double>{1.0, -2.0, 0.5}, {3});
  x.requires_grad_();
  Tensor v = from_vector(std::vector<double>{0.25, 1.0, -4.0}, {3});
  Tensor f = sum(mul(mul(x, x), x));
  std::vector<Tensor> g = grad({f}, {x}, {}, false, true, /*create_graph=*/true);
  ASSERT_TRUE(g[0].requires_grad());
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3.0, 12.0, 0.75}));
  std::vector<Tensor> hv = grad({sum(mul(g[0], v))}, {x});
  EXPECT_EQ(hv[0].to_vector<double>(), (std::vector<double>{1.5, -12.0, -12.0}));
  // backward(create_graph) leaves a .grad() that is itself differentiable.
  Tensor y = from_vector(std::vector<double>{2.0}, {1});
  y.requires_grad_();
  sum(mul(mul(y, y), y)).backward(Tensor(), false, /*create_graph=*/true);
  ASSERT_TRUE(y.grad().requires_grad());
  Tensor gy = y.grad();
  y.zero_grad();
  sum(gy).backward();  // d/dy (3 y^2) = 6 y
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{12.0}));
}

}  // namespace
}  // namespace tg
