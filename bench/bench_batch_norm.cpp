// Batch norm (issue 25): training forward + backward (input, weight and bias gradients, the
// running statistics updated) and the eval forward, on a ResNet stage's feature-map shapes.
// tools/bench_vs_torch.py runs the same cases in PyTorch (F.batch_norm, torch.autograd.grad).
#include "bench_common.h"

namespace tg::bench {
namespace {

void batch_norm_train_fwd_bwd(benchmark::State& state, Shape shape) {
  use_threads(state);
  const int64_t C = shape[1];
  Tensor x = randn(shape).requires_grad_(), w = randn({C}).requires_grad_(), b = randn({C}).requires_grad_();
  Tensor rm = zeros({C}), rv = ones({C}), g = randn(shape);
  for (auto _ : state) {
    Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/true);
    benchmark::DoNotOptimize(grad({y}, {x, w, b}, {g}));
  }
}

void batch_norm_train_fwd(benchmark::State& state, Shape shape) {
  use_threads(state);
  const int64_t C = shape[1];
  Tensor x = randn(shape), w = randn({C}), b = randn({C}), rm = zeros({C}), rv = ones({C});
  for (auto _ : state) benchmark::DoNotOptimize(batch_norm(x, rm, rv, w, b, /*training=*/true));
}

void batch_norm_eval_fwd(benchmark::State& state, Shape shape) {
  use_threads(state);
  const int64_t C = shape[1];
  Tensor x = randn(shape), w = randn({C}), b = randn({C}), rm = randn({C}), rv = uniform({C}, 0.5, 1.5);
  for (auto _ : state) benchmark::DoNotOptimize(batch_norm(x, rm, rv, w, b, /*training=*/false));
}

const bool registered = [] {
  manual_seed(0);
  for (Shape shape : {Shape{8, 64, 56, 56}, Shape{32, 256, 14, 14}}) {
    const std::string name = "N" + std::to_string(shape[0]) + "_C" + std::to_string(shape[1]) + "_H" +
                             std::to_string(shape[2]) + "_W" + std::to_string(shape[3]);
    add_case("batch_norm_train_fwd_bwd/" + name, [shape](benchmark::State& s) { batch_norm_train_fwd_bwd(s, shape); });
    add_case("batch_norm_train_fwd/" + name, [shape](benchmark::State& s) { batch_norm_train_fwd(s, shape); });
    add_case("batch_norm_eval_fwd/" + name, [shape](benchmark::State& s) { batch_norm_eval_fwd(s, shape); });
  }
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
