// Shared by the benchmark programs: the thread count is every case's argument, so the same
// case runs at 1 and 2 threads, as tools/bench_vs_torch.py compares them with PyTorch.
#pragma once

#include <benchmark/benchmark.h>

#include <tapegrad/tapegrad.h>

namespace tg::bench {

// Sets tapegrad's OpenMP thread count from the case's "threads" argument.
inline void use_threads(const benchmark::State& state) { set_num_threads(static_cast<int>(state.range(0))); }

// Registers fn under `name` for 1 and 2 threads, timed in milliseconds.
template <class Fn>
void add_case(const std::string& name, Fn fn) {
  benchmark::RegisterBenchmark(name.c_str(), fn)
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

// Forward + backward of fn(x) through the tape with a ones gradient (PyTorch's side:
// tools/bench_vs_torch.py's fwd_bwd).
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

// Records the peak of tapegrad's allocated bytes during the case as a counter (in MB).
struct PeakMemory {
  explicit PeakMemory(benchmark::State& s) : state(s) { reset_peak_memory(); }
  ~PeakMemory() { state.counters["peak_MB"] = static_cast<double>(memory_stats().peak_bytes) / 1e6; }
  benchmark::State& state;
};

}  // namespace tg::bench

// Every benchmark program's main: Google Benchmark's, with tapegrad's tg::info() (CPU, its
// vector features, the kernels' instruction-set path, threads) in the run's context, so that
// every result says what it was measured on (tools/bench_vs_torch.py prints it).
#define TAPEGRAD_BENCHMARK_MAIN()                                  \
  int main(int argc, char** argv) {                                \
    benchmark::AddCustomContext("tapegrad", tg::info());           \
    benchmark::Initialize(&argc, argv);                            \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    benchmark::RunSpecifiedBenchmarks();                           \
    benchmark::Shutdown();                                         \
    return 0;                                                      \
  }
