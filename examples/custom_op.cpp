// A layer with its own backward: y = tanh(x W^T + b), fused, with a hand-written gradient.
//
// The first thing one does when writing a layer by hand is to check its gradient. Here the
// op is defined with tg::CustomOp (forward and backward as lambdas), checked with the same
// generic checks every built-in op passes (finite differences in float64, float32 against
// float64, repeatability, accumulation, each input alone), then trained, with a built-in
// linear layer on top, to fit a curve. Exits non-zero when a check fails or the loss does not
// fall.
//
//   ./build/examples/custom_op [--steps 300]
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <tapegrad/tapegrad.h>

#include "common/cli_checks.h"

using namespace tg;

// N = batch, I = input features, O = output features.
//   x [N, I], weight [O, I], bias [O] -> y [N, O]
// Backward, with dz = grad_y * (1 - y^2):
//   grad_x = dz W        [N, I]
//   grad_W = dz^T x      [O, I]
//   grad_b = sum_N dz    [O]
// It saves y (tanh's derivative needs only its output), and x or W only when the other's
// gradient is wanted. Backward is written with tapegrad's ops, so it could itself be recorded.
CustomOp make_linear_tanh() {
  CustomOp op(
      "linear_tanh", {"input", "weight", "bias"},
      [](FunctionContext& ctx, const std::vector<Tensor>& in) {
        const Tensor &x = in[0], &w = in[1], &b = in[2];
        Tensor y = tanh(add(matmul(x, w.transpose(0, 1)), b));
        ctx.save("y", y);
        ctx.save("x", ctx.needs_input_grad("weight") ? x : Tensor());
        ctx.save("weight", ctx.needs_input_grad("input") ? w : Tensor());
        return std::vector<Tensor>{y};
      },
      [](FunctionContext& ctx, const std::vector<Tensor>& grad_out) {
        const Tensor& y = ctx.saved("y");
        Tensor dz = mul(grad_out[0], rsub(mul(y, y), 1.0));
        return std::vector<Tensor>{
            ctx.needs_input_grad(0) ? matmul(dz, ctx.saved("weight")) : Tensor(),
            ctx.needs_input_grad(1) ? matmul(dz.transpose(0, 1), ctx.saved("x")) : Tensor(),
            ctx.needs_input_grad(2) ? sum(dz, {0}) : Tensor(),
        };
      });
  auto param = [](Shape shape, DType dt) { return mul(randn(shape, dt), 0.5).detach().requires_grad_(); };
  op.add_sample("all inputs", [param](DType dt) {
    return std::vector<Tensor>{param({4, 3}, dt), param({5, 3}, dt), param({5}, dt)};
  });
  op.add_sample("data without grad", [param](DType dt) {
    return std::vector<Tensor>{randn({6, 2}, dt), param({3, 2}, dt), param({3}, dt)};
  });
  return op;
}

static int run(int steps) {
  CustomOp linear_tanh = make_linear_tanh();

  std::cout << "== 1. Check the hand-written backward ==\n";
  OpCheckResult check = check_custom_op(linear_tanh);
  if (!check.ok) {
    std::cout << "check_custom_op FAILED:\n" << check.message;
    return 1;
  }
  std::cout << "check_custom_op passed on " << check.samples
            << " sample cases: float64 finite differences, float32 vs float64, repeatability,\n"
               "zero output gradient, accumulation into .grad(), each input alone.\n\n";

  std::cout << "== 2. Train it: fit y = sin(2x) on [-2, 2] with linear_tanh(1 -> 16) then linear(16 -> 1) ==\n";
  manual_seed(0);
  Tensor x = uniform({128, 1}, -2.0, 2.0);
  Tensor target;
  {
    NoGradGuard no_grad;
    Tensor t = x.to(DType::Float64);
    std::vector<double> v = t.to_vector<double>();
    for (double& e : v) e = std::sin(2 * e);
    target = from_vector(v, {128, 1}).to(DType::Float32);
  }
  Tensor w1 = randn({16, 1}).requires_grad_();
  Tensor b1 = zeros({16}).requires_grad_();
  Tensor w2 = mul(randn({1, 16}), 0.25).detach().requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  Adam opt({w1, b1, w2, b2}, {/*lr=*/0.02});

  double first = 0, last = 0;
  for (int step = 0; step <= steps; ++step) {
    Tensor pred = linear(linear_tanh(x, w1, b1), w2, b2);
    Tensor loss = mse_loss(pred, target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 50 == 0) std::cout << "step " << step << "  loss " << loss.item() << "\n";
  }
  const bool learned = last < 0.1 * first;
  std::cout << "\nloss " << first << " -> " << last << (learned ? " (learned)\n" : " (did NOT fall tenfold)\n");
  return learned ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Check a layer with a hand-written backward, then train it to fit a curve"};
  int steps = 300;
  // Each step is a fraction of a millisecond; a million is minutes, more is a typo.
  app.add_option("--steps", steps, "training steps after step 0")->check(examples::whole_number(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(steps);
  } catch (const std::exception& e) {  // a tg::Error (e.g. a bad TAPEGRAD_ISA): its message, not an abort
    std::cerr << "custom_op: " << e.what() << "\n";
    return 1;
  }
}
