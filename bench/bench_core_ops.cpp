// Forward + backward of the core ops a small transformer-style model leans on, at sizes where
// the OpenMP paths run. Compare with tools/bench_core_ops_torch.py (same shapes, PyTorch).
#include <benchmark/benchmark.h>

#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;

template <class Fn>
void run_fwd_bwd(benchmark::State& state, Tensor x, Fn fn) {
  x.requires_grad_();
  for (auto _ : state) {
    Tensor y = fn(x);
    Tensor g = tg::ones(y.shape(), y.dtype());
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().data<float>());
    x.zero_grad();
  }
}

void BM_softmax_64x1000(benchmark::State& s) {
  run_fwd_bwd(s, tg::randn({64, 1000}), [](const Tensor& x) { return tg::softmax(x, 1); });
}
void BM_cross_entropy_512x1000(benchmark::State& s) {
  Tensor t = tg::randint(0, 1000, {512});
  run_fwd_bwd(s, tg::randn({512, 1000}), [t](const Tensor& x) { return tg::cross_entropy(x, t); });
}
void BM_layer_norm_1024x768(benchmark::State& s) {
  Tensor w = tg::ones({768}), b = tg::zeros({768});
  run_fwd_bwd(s, tg::randn({1024, 768}), [w, b](const Tensor& x) { return tg::layer_norm(x, {768}, w, b); });
}
void BM_gelu_1M(benchmark::State& s) {
  run_fwd_bwd(s, tg::randn({1 << 20}), [](const Tensor& x) { return tg::gelu(x); });
}
void BM_embedding_32k_tokens_x256(benchmark::State& s) {
  Tensor idx = tg::randint(0, 10000, {32768});
  run_fwd_bwd(s, tg::randn({10000, 256}), [idx](const Tensor& w) { return tg::embedding(w, idx); });
}

}  // namespace

BENCHMARK(BM_softmax_64x1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cross_entropy_512x1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layer_norm_1024x768)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gelu_1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_embedding_32k_tokens_x256)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
