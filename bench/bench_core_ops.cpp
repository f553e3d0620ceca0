// Forward + backward of the core ops a small transformer-style model leans on, at sizes where
// the OpenMP paths run. tools/bench_vs_torch.py has the same cases in PyTorch.
#include "bench_common.h"

namespace tg::bench {
namespace {

template <class Fn>
void fwd_bwd(benchmark::State& state, Tensor x, Fn fn) {
  use_threads(state);
  x.requires_grad_();
  Tensor y0 = fn(x);
  Tensor g = ones(y0.shape(), y0.dtype());
  for (auto _ : state) {
    Tensor y = fn(x);
    y.backward(g);
    x.zero_grad();
  }
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
  add_case("embedding_fwd_bwd/V10000_D256_T32768", [](benchmark::State& s) {
    Tensor idx = randint(0, 10000, {32768});
    fwd_bwd(s, randn({10000, 256}), [idx](const Tensor& w) { return embedding(w, idx); });
  });
  return true;
}();

}  // namespace
}  // namespace tg::bench

BENCHMARK_MAIN();
