// grid_sample forward and backward (the kernel API, both gradients) at these sizes:
// input (8, 32, 64, 64) with grid (8, 64, 64, 2) for bilinear + zeros, bilinear + reflection
// and nearest + zeros, and N = 1 with input (1, 64, 128, 128), grid (1, 128, 128, 2), where
// the parallel split is over positions and channels instead of samples. Grid points are
// uniform in [-1.1, 1.1] (some outside the image), align_corners = false. Volumes (issue 26):
// input (2, 16, 32, 32, 32) with grid (2, 32, 32, 32, 3), trilinear + zeros: forward, the kernel
// API's backward, and forward + backward through the tape (grid_sample3d_fwd_bwd).
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
  int64_t D = 0, Do = 0;  // a volume's input and output depth; 0 for 2-D
  bool volume() const { return D > 0; }
  Shape input() const { return volume() ? Shape{N, C, D, H, W} : Shape{N, C, H, W}; }
  Shape grid() const { return volume() ? Shape{N, Do, Ho, Wo, 3} : Shape{N, Ho, Wo, 2}; }
  Shape output() const { return volume() ? Shape{N, C, Do, Ho, Wo} : Shape{N, C, Ho, Wo}; }
};

std::string shape_name(const Case& c) {
  auto depth = [&](const char* name, int64_t d) { return c.volume() ? name + std::to_string(d) : std::string(); };
  return "N" + std::to_string(c.N) + "_C" + std::to_string(c.C) + depth("_D", c.D) + "_H" + std::to_string(c.H) +
         "_W" + std::to_string(c.W) + depth("_Do", c.Do) + "_Ho" + std::to_string(c.Ho) + "_Wo" +
         std::to_string(c.Wo) + "_" + c.mode_name + (c.dtype == DType::BFloat16 ? "_bf16" : "");
}

// Bytes a pass must touch at least: input, grid, output (forward); plus grad_output and the
// two gradients (backward). Data-dependent reads of the input make the real traffic larger.
double min_bytes(const Case& c, bool backward) {
  const double in = double(shape_numel(c.input())), grid = double(shape_numel(c.grid())),
               out = double(shape_numel(c.output()));
  return dtype_size(c.dtype) * (backward ? 2 * in + 2 * grid + out : in + grid + out);
}

void forward(benchmark::State& state, Case c) {
  use_threads(state);
  manual_seed(0);
  Tensor input = randn(c.input(), c.dtype), grid = uniform(c.grid(), -1.1, 1.1, c.dtype);
  for (auto _ : state) benchmark::DoNotOptimize(grid_sample(input, grid, c.mode, c.padding, false));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * min_bytes(c, false)));
}

void backward(benchmark::State& state, Case c) {
  use_threads(state);
  manual_seed(0);
  Tensor input = randn(c.input(), c.dtype), grid = uniform(c.grid(), -1.1, 1.1, c.dtype);
  Tensor g = randn(c.output(), c.dtype);
  const auto m = static_cast<int64_t>(c.mode), p = static_cast<int64_t>(c.padding);
  auto run = c.volume() ? grid_sampler_3d_backward : grid_sampler_2d_backward;
  for (auto _ : state) benchmark::DoNotOptimize(run(g, input, grid, m, p, false, {true, true}));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * min_bytes(c, true)));
}

// Forward and backward through the tape, both gradients (PyTorch: out.backward(g)).
void forward_backward(benchmark::State& state, Case c) {
  use_threads(state);
  manual_seed(0);
  Tensor input = randn(c.input(), c.dtype).requires_grad_();
  Tensor grid = uniform(c.grid(), -1.1, 1.1, c.dtype).requires_grad_();
  Tensor g = randn(c.output(), c.dtype);
  for (auto _ : state) {
    grid_sample(input, grid, c.mode, c.padding, false).backward(g);
    input.zero_grad();
    grid.zero_grad();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (min_bytes(c, false) + min_bytes(c, true))));
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
  const Case volume{2, 16, 32, 32, 32, 32, M::Bilinear, P::Zeros, "bilinear_zeros", DType::Float32, 32, 32};
  add_case("grid_sample_fwd/" + shape_name(volume), [volume](benchmark::State& s) { forward(s, volume); });
  add_case("grid_sample_bwd/" + shape_name(volume), [volume](benchmark::State& s) { backward(s, volume); });
  add_case("grid_sample3d_fwd_bwd/" + shape_name(volume),
           [volume](benchmark::State& s) { forward_backward(s, volume); });
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
