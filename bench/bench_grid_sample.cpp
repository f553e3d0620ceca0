// grid_sample forward and backward (the kernel API, both gradients) at these sizes:
// input (8, 32, 64, 64) with grid (8, 64, 64, 2) for bilinear + zeros, bilinear + reflection
// and nearest + zeros, and N = 1 with input (1, 64, 128, 128), grid (1, 128, 128, 2), where
// the parallel split is over positions and channels instead of samples. Grid points are
// uniform in [-1.1, 1.1] (some outside the image), align_corners = false.
// tools/bench_vs_torch.py has the same cases in PyTorch.
#include "bench_common.h"

namespace tg::bench {
namespace {

struct Case {
  int64_t N, C, H, W, Ho, Wo;
  GridSampleMode mode;
  GridSamplePadding padding;
  const char* mode_name;
  DType dtype = DType::Float32;
};

std::string shape_name(const Case& c) {
  return "N" + std::to_string(c.N) + "_C" + std::to_string(c.C) + "_H" + std::to_string(c.H) + "_W" +
         std::to_string(c.W) + "_Ho" + std::to_string(c.Ho) + "_Wo" + std::to_string(c.Wo) + "_" + c.mode_name +
         (c.dtype == DType::BFloat16 ? "_bf16" : "");
}

// Bytes a pass must touch at least: input, grid, output (forward); plus grad_output and the
// two gradients (backward). Data-dependent reads of the input make the real traffic larger.
double min_bytes(const Case& c, bool backward) {
  const double in = c.N * c.C * c.H * c.W, grid = c.N * c.Ho * c.Wo * 2, out = c.N * c.C * c.Ho * c.Wo;
  return dtype_size(c.dtype) * (backward ? 2 * in + 2 * grid + out : in + grid + out);
}

void forward(benchmark::State& state, Case c) {
  use_threads(state);
  manual_seed(0);
  Tensor input = randn({c.N, c.C, c.H, c.W}, c.dtype), grid = uniform({c.N, c.Ho, c.Wo, 2}, -1.1, 1.1, c.dtype);
  for (auto _ : state) benchmark::DoNotOptimize(grid_sample(input, grid, c.mode, c.padding, false));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * min_bytes(c, false)));
}

void backward(benchmark::State& state, Case c) {
  use_threads(state);
  manual_seed(0);
  Tensor input = randn({c.N, c.C, c.H, c.W}, c.dtype), grid = uniform({c.N, c.Ho, c.Wo, 2}, -1.1, 1.1, c.dtype);
  Tensor g = randn({c.N, c.C, c.Ho, c.Wo}, c.dtype);
  const auto m = static_cast<int64_t>(c.mode), p = static_cast<int64_t>(c.padding);
  for (auto _ : state) benchmark::DoNotOptimize(grid_sampler_2d_backward(g, input, grid, m, p, false, {true, true}));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * min_bytes(c, true)));
}

const bool registered = [] {
  using M = GridSampleMode;
  using P = GridSamplePadding;
  const Case cases[] = {
      {8, 32, 64, 64, 64, 64, M::Bilinear, P::Zeros, "bilinear_zeros"},
      {8, 32, 64, 64, 64, 64, M::Bilinear, P::Reflection, "bilinear_reflection"},
      {8, 32, 64, 64, 64, 64, M::Nearest, P::Zeros, "nearest_zeros"},
      {1, 64, 128, 128, 128, 128, M::Bilinear, P::Zeros, "bilinear_zeros"},
      {8, 32, 64, 64, 64, 64, M::Bilinear, P::Zeros, "bilinear_zeros", DType::BFloat16},
  };
  for (const Case& c : cases) {
    add_case("grid_sample_fwd/" + shape_name(c), [c](benchmark::State& s) { forward(s, c); });
    add_case("grid_sample_bwd/" + shape_name(c), [c](benchmark::State& s) { backward(s, c); });
  }
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
