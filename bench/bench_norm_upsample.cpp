// Group norm and bilinear upsampling, forward and backward separately, on the feature-map shapes
// below; nearest upsampling (forward, backward, both), bicubic and trilinear upsampling (forward,
// forward + backward); and a plain copy, the memory-bandwidth yardstick for group norm's GB/s.
#include "bench_common.h"

#include <tapegrad/ops/group_norm/group_norm_kernels.h>
#include <tapegrad/ops/upsample/upsample_kernels.h>

namespace tg::bench {
namespace {

// Bytes a pass must move at least once: for the GB/s counters.
void set_bandwidth(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void copy_case(benchmark::State& state, Shape shape) {
  use_threads(state);
  Tensor x = randn(shape), y = Tensor::empty(shape);
  for (auto _ : state) y.copy_(x);
  set_bandwidth(state, 2.0 * x.numel() * 4);  // read + write
}

void group_norm_fwd(benchmark::State& state, Shape shape, int64_t groups, DType dt = DType::Float32) {
  use_threads(state);
  Tensor x = randn(shape, dt), w = randn({shape[1]}, dt), b = randn({shape[1]}, dt);
  for (auto _ : state) benchmark::DoNotOptimize(group_norm(x, groups, w, b));
  set_bandwidth(state, 2.0 * x.numel() * dtype_size(dt));  // read x, write y
}

void group_norm_bwd(benchmark::State& state, Shape shape, int64_t groups, DType dt = DType::Float32) {
  use_threads(state);
  const int64_t N = shape[0], C = shape[1], HxW = shape_numel(shape) / (N * C);
  Tensor x = randn(shape, dt), w = randn({C}, dt), g = randn(shape, dt);
  GroupNormResult r = native_group_norm(x, w, Tensor(), N, C, HxW, groups, 1e-5);
  for (auto _ : state) benchmark::DoNotOptimize(native_group_norm_backward(g, x, r.mean, r.rstd, w, N, C, HxW, groups));
  set_bandwidth(state, 3.0 * x.numel() * dtype_size(dt));  // read grad_y and x, write grad_x
}

void upsample_fwd(benchmark::State& state, Shape in, std::array<int64_t, 2> out, bool ac, DType dt = DType::Float32) {
  use_threads(state);
  Tensor x = randn(in, dt);
  for (auto _ : state) benchmark::DoNotOptimize(upsample_bilinear2d(x, out, ac));
  set_bandwidth(state, dtype_size(dt) * double(x.numel() + in[0] * in[1] * out[0] * out[1]));
}

void upsample_bwd(benchmark::State& state, Shape in, std::array<int64_t, 2> out, bool ac, DType dt = DType::Float32) {
  use_threads(state);
  Tensor g = randn({in[0], in[1], out[0], out[1]}, dt);
  for (auto _ : state)
    benchmark::DoNotOptimize(upsample_bilinear2d_backward(g, out, {in[0], in[1], in[2], in[3]}, ac));
  set_bandwidth(state, dtype_size(dt) * double(g.numel() + shape_numel(in)));
}

// interpolate(mode nearest), through the front end as a user calls it: forward, backward alone
// (the kernel API, as PyTorch's autograd.grad with retain_graph), and forward + backward
// through the tape.
InterpolateOptions nearest_to(std::array<int64_t, 2> out) {
  return InterpolateOptions().size({out[0], out[1]}).mode(InterpolateMode::Nearest);
}

void nearest_fwd(benchmark::State& state, Shape in, std::array<int64_t, 2> out) {
  use_threads(state);
  Tensor x = randn(in);
  for (auto _ : state) benchmark::DoNotOptimize(interpolate(x, nearest_to(out)));
  set_bandwidth(state, 4.0 * double(x.numel() + in[0] * in[1] * out[0] * out[1]));
}

void nearest_bwd(benchmark::State& state, Shape in, std::array<int64_t, 2> out) {
  use_threads(state);
  Tensor g = randn({in[0], in[1], out[0], out[1]});
  for (auto _ : state) benchmark::DoNotOptimize(upsample_nearest2d_backward(g, out, {in[0], in[1], in[2], in[3]}));
  set_bandwidth(state, 4.0 * double(g.numel() + shape_numel(in)));
}

void nearest_fwd_bwd(benchmark::State& state, Shape in, std::array<int64_t, 2> out) {
  use_threads(state);
  Tensor x = randn(in).requires_grad_();
  Tensor g = randn({in[0], in[1], out[0], out[1]});
  for (auto _ : state) {
    interpolate(x, nearest_to(out)).backward(g);
    x.zero_grad();
  }
}

// The kernels themselves (no Tensor, no allocation in the loop) in T = float or BFloat16 on the
// same values: the 16-bit kernels' speed against float32's in one run, while the Tensor-level
// ops above may still take 16-bit by widening to float32.
template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> f = randn({n}, DType::Float32, &gen).to_vector<float>();
  return std::vector<T>(f.begin(), f.end());
}

template <class T>
void group_norm_fwd_kernel(benchmark::State& state, Shape shape, int64_t groups) {
  use_threads(state);
  const int64_t N = shape[0], C = shape[1], HxW = shape_numel(shape) / (N * C);
  const std::vector<T> x = random_values<T>(N * C * HxW, 1), w = random_values<T>(C, 2), b = random_values<T>(C, 3);
  std::vector<T> y(x.size());
  std::vector<opmath_t<T>> mean(N * groups), rstd(N * groups);
  for (auto _ : state) {
    kernels::group_norm_forward<T>(x.data(), w.data(), b.data(), N, C, HxW, groups, 1e-5, y.data(), mean.data(),
                                   rstd.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_bandwidth(state, 2.0 * x.size() * sizeof(T));
}

template <class T>
void group_norm_bwd_kernel(benchmark::State& state, Shape shape, int64_t groups) {
  use_threads(state);
  const int64_t N = shape[0], C = shape[1], HxW = shape_numel(shape) / (N * C);
  const std::vector<T> x = random_values<T>(N * C * HxW, 1), w = random_values<T>(C, 2), g = random_values<T>(x.size(), 4);
  std::vector<T> y(x.size()), gx(x.size()), gw(C), gb(C);
  std::vector<opmath_t<T>> mean(N * groups), rstd(N * groups);
  kernels::group_norm_forward<T>(x.data(), w.data(), nullptr, N, C, HxW, groups, 1e-5, y.data(), mean.data(),
                                 rstd.data());
  for (auto _ : state) {
    kernels::group_norm_backward<T>(g.data(), x.data(), mean.data(), rstd.data(), w.data(), N, C, HxW, groups,
                                    gx.data(), gw.data(), gb.data());
    benchmark::DoNotOptimize(gx.data());
  }
  set_bandwidth(state, 3.0 * x.size() * sizeof(T));
}

template <class T>
void upsample_fwd_kernel(benchmark::State& state, Shape in, std::array<int64_t, 2> out, bool ac) {
  use_threads(state);
  const int64_t NC = in[0] * in[1];
  const std::vector<T> x = random_values<T>(shape_numel(in), 1);
  std::vector<T> y(NC * out[0] * out[1]);
  for (auto _ : state) {
    kernels::upsample_bilinear2d_forward<T>(x.data(), y.data(), NC, in[2], in[3], out[0], out[1], ac, -1, -1);
    benchmark::DoNotOptimize(y.data());
  }
  set_bandwidth(state, sizeof(T) * double(x.size() + y.size()));
}

template <class T>
void upsample_bwd_kernel(benchmark::State& state, Shape in, std::array<int64_t, 2> out, bool ac) {
  use_threads(state);
  const int64_t NC = in[0] * in[1];
  const std::vector<T> g = random_values<T>(NC * out[0] * out[1], 1);
  std::vector<T> gx(shape_numel(in));
  for (auto _ : state) {
    kernels::upsample_bilinear2d_backward<T>(g.data(), gx.data(), NC, in[2], in[3], out[0], out[1], ac, -1, -1);
    benchmark::DoNotOptimize(gx.data());
  }
  set_bandwidth(state, sizeof(T) * double(g.size() + gx.size()));
}

std::string shape_name(const Shape& s) {
  const char* names[] = {"N", "C", "H", "W"};
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "_" : "") + std::string(names[i]) + std::to_string(s[i]);
  return out;
}

const bool registered = [] {
  manual_seed(0);
  add_case("copy/N32_C64_H64_W64", [](benchmark::State& s) { copy_case(s, {32, 64, 64, 64}); });
  for (Shape shape : {Shape{8, 256, 32, 32}, Shape{32, 64, 64, 64}, Shape{4, 512, 8, 8}}) {
    std::string name = shape_name(shape) + "_G32";
    add_case("group_norm_fwd/" + name, [shape](benchmark::State& s) { group_norm_fwd(s, shape, 32); });
    add_case("group_norm_bwd/" + name, [shape](benchmark::State& s) { group_norm_bwd(s, shape, 32); });
  }
  struct Up {
    Shape in;
    std::array<int64_t, 2> out;
  };
  for (Up u : {Up{{8, 64, 32, 32}, {64, 64}}, Up{{8, 256, 16, 16}, {64, 64}}, Up{{2, 32, 128, 128}, {256, 256}}}) {
    for (bool ac : {false, true}) {
      std::string name = shape_name(u.in) + "_to" + std::to_string(u.out[0]) + "x" + std::to_string(u.out[1]) +
                         (ac ? "_ac" : "");
      add_case("upsample_fwd/" + name, [u, ac](benchmark::State& s) { upsample_fwd(s, u.in, u.out, ac); });
      add_case("upsample_bwd/" + name, [u, ac](benchmark::State& s) { upsample_bwd(s, u.in, u.out, ac); });
    }
  }
  // issue 26: interpolate nearest, float32
  const Shape near{8, 64, 32, 32};
  add_case("interpolate_nearest_fwd/N8_C64_H32_W32_to64x64",
           [=](benchmark::State& s) { nearest_fwd(s, near, {64, 64}); });
  add_case("interpolate_nearest_bwd/N8_C64_H32_W32_to64x64",
           [=](benchmark::State& s) { nearest_bwd(s, near, {64, 64}); });
  add_case("interpolate_nearest_fwd_bwd/N8_C64_H32_W32_to64x64",
           [=](benchmark::State& s) { nearest_fwd_bwd(s, near, {64, 64}); });
  const Shape gn{8, 256, 32, 32}, up{8, 64, 32, 32};
  // Issue 26's interpolate modes, align_corners false, float32.
  const Shape cube{2, 16, 16, 16, 16};
  add_case("upsample_bicubic_fwd/N8_C64_H32_W32_to64x64", [=](benchmark::State& s) {
    use_threads(s);
    Tensor x = randn(up);
    for (auto _ : s) benchmark::DoNotOptimize(upsample_bicubic2d(x, {64, 64}, false));
  });
  add_case("upsample_bicubic_fwd_bwd/N8_C64_H32_W32_to64x64", [=](benchmark::State& s) {
    fwd_bwd(s, randn(up), [](const Tensor& x) { return upsample_bicubic2d(x, {64, 64}, false); });
  });
  add_case("upsample_trilinear_fwd/N2_C16_D16_H16_W16_to32x32x32", [=](benchmark::State& s) {
    use_threads(s);
    Tensor x = randn(cube);
    for (auto _ : s) benchmark::DoNotOptimize(upsample_trilinear3d(x, {32, 32, 32}, false));
  });
  add_case("upsample_trilinear_fwd_bwd/N2_C16_D16_H16_W16_to32x32x32", [=](benchmark::State& s) {
    fwd_bwd(s, randn(cube), [](const Tensor& x) { return upsample_trilinear3d(x, {32, 32, 32}, false); });
  });
  // bfloat16 (issue 22's rows): the first shape of each op, beside its float32 row.
  const auto bf16 = DType::BFloat16;
  add_case("group_norm_fwd/N8_C256_H32_W32_G32_bf16", [=](benchmark::State& s) { group_norm_fwd(s, gn, 32, bf16); });
  add_case("group_norm_bwd/N8_C256_H32_W32_G32_bf16", [=](benchmark::State& s) { group_norm_bwd(s, gn, 32, bf16); });
  add_case("upsample_fwd/N8_C64_H32_W32_to64x64_bf16", [=](benchmark::State& s) { upsample_fwd(s, up, {64, 64}, false, bf16); });
  add_case("upsample_bwd/N8_C64_H32_W32_to64x64_bf16", [=](benchmark::State& s) { upsample_bwd(s, up, {64, 64}, false, bf16); });
  // The kernels alone, float32 beside bfloat16 (the ratio bf16 / f32 is the 16-bit kernels' gain).
  add_case("group_norm_fwd/N8_C256_H32_W32_G32_kernel_f32", [=](benchmark::State& s) { group_norm_fwd_kernel<float>(s, gn, 32); });
  add_case("group_norm_fwd/N8_C256_H32_W32_G32_kernel_bf16", [=](benchmark::State& s) { group_norm_fwd_kernel<BFloat16>(s, gn, 32); });
  add_case("group_norm_bwd/N8_C256_H32_W32_G32_kernel_f32", [=](benchmark::State& s) { group_norm_bwd_kernel<float>(s, gn, 32); });
  add_case("group_norm_bwd/N8_C256_H32_W32_G32_kernel_bf16", [=](benchmark::State& s) { group_norm_bwd_kernel<BFloat16>(s, gn, 32); });
  add_case("upsample_fwd/N8_C64_H32_W32_to64x64_kernel_f32", [=](benchmark::State& s) { upsample_fwd_kernel<float>(s, up, {64, 64}, false); });
  add_case("upsample_fwd/N8_C64_H32_W32_to64x64_kernel_bf16", [=](benchmark::State& s) { upsample_fwd_kernel<BFloat16>(s, up, {64, 64}, false); });
  add_case("upsample_bwd/N8_C64_H32_W32_to64x64_kernel_f32", [=](benchmark::State& s) { upsample_bwd_kernel<float>(s, up, {64, 64}, false); });
  add_case("upsample_bwd/N8_C64_H32_W32_to64x64_kernel_bf16", [=](benchmark::State& s) { upsample_bwd_kernel<BFloat16>(s, up, {64, 64}, false); });
  return true;
}();

}  // namespace
}  // namespace tg::bench

TAPEGRAD_BENCHMARK_MAIN()
