// Convolutions, forward and forward + backward (through the tape, gradients for input, weight
// and bias), for the shapes of bench/README.md's table, and the machine's GEMM throughput in the same program so
// the 3x3 forward's GFLOP/s can be read against it. tools/bench_vs_torch.py has the same cases
// in PyTorch under the same names.
#include "bench_common.h"

namespace tg::bench {
namespace {

struct ConvCase {
  const char* name;  // <case>_{fwd,fwd_bwd}/<shape> is built from it
  Shape input, weight;
  IntList stride, padding;
  int64_t groups;
  bool transposed;
};

// Multiply-adds of the forward (x2 = flops); grad_input and grad_weight cost the same again each.
double forward_flops(const ConvCase& c, const Tensor& y) {
  int64_t k = 1;
  for (size_t d = 2; d < c.weight.size(); ++d) k *= c.weight[d];
  // normal: out positions * C_out * (C_in / G) * k; transposed: in positions * C_in * (C_out / G) * k;
  // both are positions * weight.size(0) * weight.size(1) * k.
  int64_t pos = 1;
  const Shape& s = c.transposed ? c.input : y.shape();
  for (size_t d = 2; d < s.size(); ++d) pos *= s[d];
  return 2.0 * double(s[0]) * double(pos) * double(c.weight[0]) * double(c.weight[1]) * double(k);
}

Tensor run(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  return convolution(x, w, b, c.stride, c.padding, {1}, c.transposed, {0}, c.groups);
}

void forward(benchmark::State& state, const ConvCase& c) {
  use_threads(state);
  manual_seed(0);
  Tensor x = randn(c.input), w = randn(c.weight) * 0.05,
         b = randn({c.transposed ? c.weight[1] * c.groups : c.weight[0]});
  const Tensor y = run(c, x, w, b);
  for (auto _ : state) {
    // the output is freed before the next call, as in PyTorch's loop (holding it would make
    // every call map and fault in fresh pages)
    Tensor out = run(c, x, w, b);
    benchmark::DoNotOptimize(out.data<float>());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(forward_flops(c, y) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// dt: the tensors' dtype (bf16 rows: the same values rounded); math: the float32 math mode
// (framework/math_mode.h) the step runs under.
void forward_backward(benchmark::State& state, const ConvCase& c, DType dt = DType::Float32,
                      Float32Math math = Float32Math::Float32) {
  use_threads(state);
  Float32MathGuard mode(math);
  manual_seed(0);
  Tensor x = randn(c.input).to(dt).requires_grad_(), w = (randn(c.weight) * 0.05).to(dt).detach().requires_grad_();
  Tensor b = randn({c.transposed ? c.weight[1] * c.groups : c.weight[0]}).to(dt).requires_grad_();
  Tensor y0 = run(c, x, w, b);
  Tensor g = ones(y0.shape(), dt);
  const double flops = 3 * forward_flops(c, y0);
  for (auto _ : state) {
    Tensor y = run(c, x, w, b);
    y.backward(g);
    x.zero_grad();
    w.zero_grad();
    b.zero_grad();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One piece of a training step through the kernel API, as aten::convolution_backward with a
// one-gradient mask: "fwd" (no bias), "gin", "gw", "gb". Run by tools/conv_parts_vs_torch.py to
// see which piece loses against PyTorch.
void piece(benchmark::State& state, const ConvCase& c, int which) {
  use_threads(state);
  manual_seed(0);
  Tensor x = randn(c.input), w = randn(c.weight) * 0.05;
  const int64_t C_out = c.transposed ? c.weight[1] * c.groups : c.weight[0];
  Tensor y = run(c, x, w, Tensor());
  Tensor g = ones(y.shape());
  const std::array<bool, 3> mask{which == 1, which == 2, which == 3};
  y = Tensor();
  for (auto _ : state) {
    if (which == 0) {
      Tensor out = run(c, x, w, Tensor());
      benchmark::DoNotOptimize(out.data<float>());
    } else {
      ConvolutionGrads r = convolution_backward(g, x, w, {C_out}, c.stride, c.padding, {1}, c.transposed, {0},
                                                c.groups, mask);
      benchmark::DoNotOptimize(r.grad_input.defined());
    }
  }
}

// Issue 26: nn.Conv2d(64, 64, 3, padding=1, padding_mode="reflect") on (8, 64, 56, 56), i.e.
// tg::pad in reflect mode and a convolution without padding (what the Conv2d layer runs), and
// the reflect pad alone, forward or forward + backward (a ones gradient).
void reflect_conv(benchmark::State& state, bool backward, bool conv) {
  use_threads(state);
  manual_seed(0);
  Tensor x = randn({8, 64, 56, 56}).requires_grad_(backward);
  Tensor w = (randn({64, 64, 3, 3}) * 0.05).detach().requires_grad_(backward);
  Tensor b = randn({64}).requires_grad_(backward);
  auto run = [&] {
    Tensor p = pad(x, {1, 1, 1, 1}, PadMode::Reflect);
    return conv ? conv2d(p, w, b) : p;
  };
  const Tensor g = ones(run().shape());
  for (auto _ : state) {
    Tensor y = run();
    if (backward) {
      y.backward(g);
      x.zero_grad();
      w.zero_grad();
      b.zero_grad();
    }
    benchmark::DoNotOptimize(y.data<float>());
  }
}

// C (M, N) = A (M, K) B (K, N) in float32: the GEMM the 3x3 case's forward is made of.
void gemm_case(benchmark::State& state, int64_t M, int64_t K, int64_t N) {
  use_threads(state);
  Tensor a = randn({M, K}), b = randn({K, N}), c = Tensor::empty({M, N});
  for (auto _ : state) {
    gemm<float>(a.data<float>(), b.data<float>(), c.data<float>(), M, K, N, false, false);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * K * N * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> all = {
      {"conv2d_3x3/N8_C64_H56_W56_O64_p1", {8, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, false},
      {"conv2d_3x3_s2/N8_C128_H28_W28_O128_p1", {8, 128, 28, 28}, {128, 128, 3, 3}, {2}, {1}, 1, false},
      {"conv2d_1x1/N8_C256_H28_W28_O64", {8, 256, 28, 28}, {64, 256, 1, 1}, {1}, {0}, 1, false},
      {"conv2d_depthwise_3x3/N8_C128_H56_W56_p1", {8, 128, 56, 56}, {128, 1, 3, 3}, {1}, {1}, 128, false},
      {"conv_transpose2d_4x4_s2/N8_C64_H28_W28_O32_p1", {8, 64, 28, 28}, {64, 32, 4, 4}, {2}, {1}, 1, true},
      {"conv1d_k5/N16_C64_L512_O64_p2", {16, 64, 512}, {64, 64, 5}, {1}, {2}, 1, false},
      {"conv3d_3x3x3/N2_C16_D16_H32_W32_O16_p1", {2, 16, 16, 32, 32}, {16, 16, 3, 3, 3}, {1}, {1}, 1, false},
  };
  return all;
}

// "conv2d_3x3/N8..." -> "conv2d_3x3_fwd/N8..."
std::string with_suffix(const std::string& name, const char* suffix) {
  const size_t slash = name.find('/');
  return name.substr(0, slash) + suffix + name.substr(slash);
}

const bool registered = [] {
  for (const ConvCase& c : cases()) {
    add_case(with_suffix(c.name, "_fwd"), [&c](benchmark::State& s) { forward(s, c); });
    add_case(with_suffix(c.name, "_fwd_bwd"), [&c](benchmark::State& s) { forward_backward(s, c); });
    const char* pieces[] = {"_part_fwd", "_part_gin", "_part_gw", "_part_gb"};
    for (int i = 0; i < 4; ++i) {
      add_case(with_suffix(c.name, pieces[i]), [&c, i](benchmark::State& s) { piece(s, c, i); });
    }
  }
  // Reduced precision (issue 23): bf16 tensors, and float32 under the Medium math mode (bf16
  // operands, float32 sums); tools/bench_vs_torch.py runs PyTorch in bf16 for all of them.
  static const std::vector<ConvCase> reduced = {
      {"conv2d_3x3_fwd_bwd_bf16/N8_C64_H56_W56_O64_p1", {8, 64, 56, 56}, {64, 64, 3, 3}, {1}, {1}, 1, false},
      {"conv2d_1x1_fwd_bwd_bf16/N8_C64_H56_W56_O64", {8, 64, 56, 56}, {64, 64, 1, 1}, {1}, {0}, 1, false},
      {"conv2d_3x3_s2_fwd_bwd_bf16/N8_C128_H28_W28_O128_p1", {8, 128, 28, 28}, {128, 128, 3, 3}, {2}, {1}, 1, false},
  };
  for (const ConvCase& c : reduced)
    add_case(c.name, [&c](benchmark::State& s) { forward_backward(s, c, DType::BFloat16); });
  static const ConvCase medium = {"conv2d_3x3_fwd_bwd_f32medium/N8_C64_H56_W56_O64_p1", {8, 64, 56, 56},
                                  {64, 64, 3, 3}, {1}, {1}, 1, false};
  add_case(medium.name, [](benchmark::State& s) { forward_backward(s, medium, DType::Float32, Float32Math::BFloat16); });
  add_case("conv2d_3x3_reflect_fwd/N8_C64_H56_W56_O64_p1", [](benchmark::State& s) { reflect_conv(s, false, true); });
  add_case("conv2d_3x3_reflect_fwd_bwd/N8_C64_H56_W56_O64_p1", [](benchmark::State& s) { reflect_conv(s, true, true); });
  add_case("pad_reflect_fwd/N8_C64_H56_W56_p1", [](benchmark::State& s) { reflect_conv(s, false, false); });
  add_case("pad_reflect_fwd_bwd/N8_C64_H56_W56_p1", [](benchmark::State& s) { reflect_conv(s, true, false); });
  add_case("gemm_f32/M64_K576_N3136", [](benchmark::State& s) { gemm_case(s, 64, 576, 3136); });
  add_case("gemm_f32/M1024_K1024_N1024", [](benchmark::State& s) { gemm_case(s, 1024, 1024, 1024); });
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
