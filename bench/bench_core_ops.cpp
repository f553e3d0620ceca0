// Forward + backward of the core ops a small transformer-style model or a CNN leans on (pooling
// on ResNet-like shapes), at sizes where the OpenMP paths run. tools/bench_vs_torch.py has the same cases in PyTorch.
#include "bench_common.h"

namespace tg::bench {
namespace {

template <class Fn>
void fwd(benchmark::State& state, Fn fn) {
  use_threads(state);
  for (auto _ : state) benchmark::DoNotOptimize(fn());
}

const bool registered = [] {
  manual_seed(0);
  add_case("softmax_fwd_bwd/R64_C1000",
           [](benchmark::State& s) { fwd_bwd(s, randn({64, 1000}), [](const Tensor& x) { return softmax(x, 1); }); });
  add_case("cross_entropy_fwd_bwd/N512_C1000", [](benchmark::State& s) {
    Tensor t = randint(0, 1000, {512});
    fwd_bwd(s, randn({512, 1000}), [t](const Tensor& x) { return cross_entropy(x, t); });
  });
  add_case("layer_norm_fwd_bwd/R1024_C768", [](benchmark::State& s) {
    Tensor w = ones({768}), b = zeros({768});
    fwd_bwd(s, randn({1024, 768}), [w, b](const Tensor& x) { return layer_norm(x, {768}, w, b); });
  });
  add_case("gelu_fwd_bwd/N1048576",
           [](benchmark::State& s) { fwd_bwd(s, randn({1 << 20}), [](const Tensor& x) { return gelu(x); }); });
  add_case("relu_fwd_bwd/N1048576",
           [](benchmark::State& s) { fwd_bwd(s, randn({1 << 20}), [](const Tensor& x) { return relu(x); }); });
  add_case("sigmoid_fwd_bwd/N1048576",
           [](benchmark::State& s) { fwd_bwd(s, randn({1 << 20}), [](const Tensor& x) { return sigmoid(x); }); });
  add_case("add_bcast_fwd/R1024_C1024", [](benchmark::State& s) {
    Tensor a = randn({1024, 1024}), b = randn({1024});
    fwd(s, [a, b] { return add(a, b); });
  });
  add_case("mul_scalar_fwd/N1048576", [](benchmark::State& s) {
    Tensor a = randn({1 << 20});
    fwd(s, [a] { return mul(a, 0.5); });
  });
  add_case("embedding_fwd_bwd/V10000_D256_T32768", [](benchmark::State& s) {
    Tensor idx = randint(0, 10000, {32768});
    fwd_bwd(s, randn({10000, 256}), [idx](const Tensor& w) { return embedding(w, idx); });
  });
  add_case("max_pool2d_fwd_bwd/N8_C64_H112_W112_k3_s2_p1", [](benchmark::State& s) {
    fwd_bwd(s, randn({8, 64, 112, 112}), [](const Tensor& x) { return max_pool2d(x, {3}, {2}, {1}); });
  });
  add_case("avg_pool2d_fwd_bwd/N8_C256_H28_W28_k2_s2", [](benchmark::State& s) {
    fwd_bwd(s, randn({8, 256, 28, 28}), [](const Tensor& x) { return avg_pool2d(x, {2}, {2}); });
  });
  add_case("adaptive_avg_pool2d_fwd_bwd/N8_C512_H7_W7_to1", [](benchmark::State& s) {
    fwd_bwd(s, randn({8, 512, 7, 7}), [](const Tensor& x) { return adaptive_avg_pool2d(x, {1, 1}); });
  });
  // Reductions over the last dim (rows contiguous), as a LayerNorm-free model's statistics.
  add_case("sum_fwd_bwd/R4096_C1024_dim1",
           [](benchmark::State& s) { fwd_bwd(s, randn({4096, 1024}), [](const Tensor& x) { return sum(x, {1}); }); });
  add_case("var_fwd_bwd/R4096_C1024_dim1",
           [](benchmark::State& s) { fwd_bwd(s, randn({4096, 1024}), [](const Tensor& x) { return var(x, {1}); }); });
  add_case("max_fwd_bwd/R4096_C1024_dim1", [](benchmark::State& s) {
    fwd_bwd(s, randn({4096, 1024}), [](const Tensor& x) { return max(x, 1).values; });
  });
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
