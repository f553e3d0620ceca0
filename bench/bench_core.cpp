// Core ops: matmul and linear, forward and backward, and one training step of an MLP.
// Case names say the shapes; tools/bench_vs_torch.py has the same cases in PyTorch.
#include "bench_common.h"

namespace tg::bench {
namespace {

// dtype: the operands'; math: the float32 math mode it runs under (framework/math_mode.h).
void matmul_fwd(benchmark::State& state, int64_t n, DType dtype = DType::Float32,
                Float32Math math = Float32Math::Float32) {
  use_threads(state);
  manual_seed(0);
  Tensor a = randn({n, n}).to(dtype), b = randn({n, n}).to(dtype);
  Float32MathGuard mode(math);
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void linear_fwd_bwd(benchmark::State& state, int64_t rows, int64_t in, int64_t out, DType dtype = DType::Float32) {
  use_threads(state);
  manual_seed(0);
  Tensor x = randn({rows, in}).to(dtype).requires_grad_();
  Tensor w = randn({out, in}).to(dtype).requires_grad_();
  Tensor b = randn({out}).to(dtype).requires_grad_();
  Tensor g = randn({rows, out}).to(dtype);
  for (auto _ : state) {
    Tensor y = linear(x, w, b);
    y.backward(g);
    x.zero_grad();  // as the PyTorch side (grad = None) and a training loop: each step's
    w.zero_grad();  // gradients are fresh tensors, not added into the last step's
    b.zero_grad();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// One step of a 784-256-256-10 MLP on a batch of 128: forward, mean squared error to a
// target, backward, and a plain SGD update.
void mlp_train_step(benchmark::State& state) {
  use_threads(state);
  manual_seed(0);
  const int64_t batch = 128;
  std::vector<int64_t> sizes = {784, 256, 256, 10};
  std::vector<Tensor> params;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    params.push_back(mul(randn({sizes[i + 1], sizes[i]}), 0.05).detach().requires_grad_());
    params.push_back(zeros({sizes[i + 1]}).requires_grad_());
  }
  Tensor x = randn({batch, 784}), target = randn({batch, 10});
  PeakMemory peak(state);
  for (auto _ : state) {
    Tensor h = x;
    for (size_t i = 0; i < params.size(); i += 2) {
      h = linear(h, params[i], params[i + 1]);
      if (i + 2 < params.size()) h = relu(h);
    }
    Tensor d = sub(h, target);
    Tensor loss = mean(mul(d, d));
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : params) {
      p.add_(p.grad(), -0.01);
      p.zero_grad();
    }
  }
}

const bool registered = [] {
  for (int64_t n : {256, 1024}) {
    std::string shape = "N" + std::to_string(n);
    add_case("matmul_fwd/" + shape, [n](benchmark::State& s) { matmul_fwd(s, n); });
  }
  add_case("linear_fwd_bwd/R2048_I512_O512", [](benchmark::State& s) { linear_fwd_bwd(s, 2048, 512, 512); });
  // Reduced precision (issue 23): bf16 tensors, and float32 under MathPrecision::Medium.
  add_case("matmul_fwd_bf16/N1024", [](benchmark::State& s) { matmul_fwd(s, 1024, DType::BFloat16); });
  add_case("matmul_fwd_f32_medium/N1024",
           [](benchmark::State& s) { matmul_fwd(s, 1024, DType::Float32, Float32Math::BFloat16); });
  add_case("linear_fwd_bwd_bf16/R2048_I512_O512",
           [](benchmark::State& s) { linear_fwd_bwd(s, 2048, 512, 512, DType::BFloat16); });
  add_case("mlp_train_step/B128_784_256_256_10", mlp_train_step);
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
