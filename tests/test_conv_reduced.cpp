// The reduced-precision convolution kernels (ops/conv/conv_kernels_reduced.cpp: 16-bit operands,
// float32 sums) on every instruction-set path this CPU has, and the float32 math modes and
// cubeMathType (framework/math_mode.h) on convolutions.
//
// Bounds. Inputs are 16-bit-exact, the reference is float64 on the same values, A is the same
// convolution (or gradient) of |operands| (the sum of |terms|, also float64), n the number of
// terms of one sum and u the unit roundoff of the output dtype (bf16: 8 significant bits,
// u = 2^-8; fp16: 11 bits, u = 2^-11; float32 2^-24):
//   16-bit tensors:  |out - ref| <= u |ref| + (n + 2) 2^-24 A
//     (products exact in float32, float32 sums: at most (n + 2) 2^-24 A off, the order of any
//     sum and vdpbf16ps's one rounding of a pair sum included; then one rounding to the
//     output's dtype. vdpbf16ps flushes denormals: none occur in these inputs, and anything it
//     flushes is below 2^-126, far under the bound.)
//   float32 under a math mode, from float32 operands: |out - ref| <= (e + (n + 2) 2^-24) A with
//     e the error of one product: Medium (bf16 operands, each within 2^-8 relative) 2^-7 +
//     2^-16, fp16 2^-10 + 2^-22, High (bf16x3: x = hi + lo to 2^-16 |x|, lo*lo left out)
//     4 * 2^-16. Highest: the float32 bits.
// Each group prints its worst error as a fraction of its bound ("[conv_reduced]").
#include "isa_test_util.h"
#include "test_util.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

namespace tg {
namespace {

struct Case {
  std::string what;
  Shape x, w;
  bool bias;
  IntList stride, padding, dilation;
  bool transposed;
  IntList output_padding;
  int64_t groups;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"ragged 3x3 pad 1", {2, 5, 7, 9}, {6, 5, 3, 3}, true, {1}, {1}, {1}, false, {0}, 1},
      {"1x1", {2, 8, 5, 6}, {7, 8, 1, 1}, true, {1}, {0}, {1}, false, {0}, 1},
      {"stride 2", {2, 4, 9, 11}, {5, 4, 3, 3}, true, {2}, {1}, {1}, false, {0}, 1},
      {"groups 3", {2, 6, 6, 7}, {9, 2, 3, 3}, true, {1}, {1}, {1}, false, {0}, 3},
      {"depthwise", {2, 4, 7, 7}, {4, 1, 3, 3}, false, {1}, {1}, {1}, false, {0}, 4},
      {"depthwise stride 2 multiplier 2", {1, 3, 8, 9}, {6, 1, 3, 3}, true, {2}, {1}, {1}, false, {0}, 3},
      {"dilation 2", {1, 3, 9, 10}, {4, 3, 3, 3}, false, {1}, {2}, {2}, false, {0}, 1},
      {"1d stride 2", {3, 4, 17}, {5, 4, 4}, true, {2}, {1}, {1}, false, {0}, 1},
      {"3d", {1, 3, 5, 6, 4}, {4, 3, 2, 3, 2}, true, {1}, {1}, {1}, false, {0}, 1},
      {"asymmetric padding", {1, 3, 6, 7}, {5, 3, 3, 2}, true, {1}, {1, 0, 2, 1}, {1}, false, {0}, 1},
      {"transposed stride 2", {2, 4, 5, 6}, {4, 3, 3, 3}, true, {2}, {1}, {1}, true, {1}, 1},
      {"transposed 1d groups 2 dilation 2", {2, 4, 7}, {4, 2, 3}, false, {2}, {2}, {2}, true, {1}, 2},
      {"transposed 1x1", {2, 6, 4, 5}, {6, 4, 1, 1}, true, {1}, {0}, {1}, true, {0}, 1},
      {"larger, parallel", {4, 16, 20, 22}, {16, 16, 3, 3}, true, {1}, {1}, {1}, false, {0}, 1},
      {"larger stride 2", {3, 12, 21, 19}, {10, 12, 3, 3}, true, {2}, {1}, {1}, false, {0}, 1},
      {"N = 0", {0, 3, 5, 5}, {4, 3, 3, 3}, true, {1}, {1}, {1}, false, {0}, 1},
  };
  return c;
}

// Uniform values in [-2, 2], exact in dt (a float32 tensor rounded, for dt 16-bit).
Tensor random_tensor(const Shape& s, DType dt, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  for (float& e : v) e = u(gen);
  return from_vector(v, s).to(dt);
}

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

Tensor abs64(const Tensor& t) { return t.defined() ? abs(t.to(DType::Float64)) : t; }
Tensor f64(const Tensor& t) { return t.defined() ? t.to(DType::Float64) : t; }

Shape out_shape_of(const Case& c) {
  Tensor w = Tensor::empty(c.w, DType::Float64);
  Shape xs = c.x;
  if (xs[0] == 0) xs[0] = 1;
  Shape s = convolution(zeros(xs, DType::Float64), w, Tensor(), c.stride, c.padding, c.dilation, c.transposed,
                        c.output_padding, c.groups)
                .shape();
  s[0] = c.x[0];
  return s;
}

struct ConvRun {
  Tensor y, gi, gw, gb;
};

ConvRun run(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
        std::array<bool, 3> mask = {true, true, true}) {
  ConvRun r;
  r.y = convolution(x, w, b, c.stride, c.padding, c.dilation, c.transposed, c.output_padding, c.groups);
  const IntList bias_sizes = c.bias ? IntList{b.shape()[0]} : IntList{};
  ConvolutionGrads gr = convolution_backward(g, x, w, bias_sizes, c.stride, c.padding, c.dilation, c.transposed,
                                             c.output_padding, c.groups, mask);
  r.gi = gr.grad_input, r.gw = gr.grad_weight, r.gb = gr.grad_bias;
  return r;
}

// Worst |got - ref| / bound over the elements; fails any element over its bound (and any
// non-finite mismatch). bound_k = rel |ref_k| + abs_per_A * A_k.
double check_bound(const std::string& what, const Tensor& got, const Tensor& ref, const Tensor& A, double rel,
                   double per_A) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.shape(), ref.shape());
  const std::vector<double> a = values(got), r = values(ref), s = values(A);
  double worst = 0;
  size_t bad = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const double bound = rel * std::abs(r[k]) + per_A * s[k] + 1e-300;
    const double err = std::abs(a[k] - r[k]);
    if (!(err <= bound)) ++bad;
    worst = std::max(worst, err / bound);
  }
  EXPECT_EQ(bad, 0u) << "worst error / bound " << worst;
  return worst;
}

// The paths to run: every path this CPU has (framework/isa.h; avx512bf16 runs the bf16 GEMM with
// vdpbf16ps), the others reported as skipped.
std::vector<Isa> paths() {
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16})
    if (!isa_supported(isa)) std::cout << "[ skipped ] path " << isa_name(isa) << ": this CPU lacks it\n";
  return supported_isas();
}

double unit_roundoff(DType dt) { return std::ldexp(1.0, dt == DType::BFloat16 ? -8 : -11); }

TEST(ConvReduced, EveryPathAgainstFloat64) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    double worst = 0;
    for (Isa isa : paths()) {
      IsaGuard guard(isa);
      for (const Case& c : cases()) {
        SCOPED_TRACE(c.what + " " + dtype_name(dt) + " path " + isa_name(isa));
        const Shape os = out_shape_of(c);
        const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
        Tensor x = random_tensor(c.x, dt, 1), w = random_tensor(c.w, dt, 2);
        Tensor b = c.bias ? random_tensor({C_out}, dt, 3) : Tensor(), g = random_tensor(os, dt, 4);
        const ConvRun got = run(c, x, w, b, g);
        const ConvRun ref = run(c, f64(x), f64(w), f64(b), f64(g));
        const ConvRun A = run(c, abs64(x), abs64(w), abs64(b), abs64(g));
        for (const Tensor* t : {&got.y, &got.gi, &got.gw}) EXPECT_EQ(t->dtype(), dt);
        int64_t K = 1, L = 1;
        for (size_t d = 2; d < c.w.size(); ++d) K *= c.w[d];
        for (size_t d = 2; d < os.size(); ++d) L *= std::max(os[d], c.x[d]);
        const double u = unit_roundoff(dt), e = std::ldexp(1.0, -24);
        const int64_t terms_c = (c.x[1] + C_out) * K + 1;  // at least one group's C * K, + bias
        const int64_t terms_w = std::max<int64_t>(c.x[0], 1) * L;
        worst = std::max(worst, check_bound("output", got.y, ref.y, A.y, u, (terms_c + 2) * e));
        worst = std::max(worst, check_bound("grad_input", got.gi, ref.gi, A.gi, u, (terms_c + 2) * e));
        worst = std::max(worst, check_bound("grad_weight", got.gw, ref.gw, A.gw, u, (terms_w + 2) * e));
        if (c.bias) worst = std::max(worst, check_bound("grad_bias", got.gb, ref.gb, A.gb, u, (terms_w + 2) * e));
      }
    }
    std::cout << "[conv_reduced] " << dtype_name(dt) << ": worst error / bound " << worst << "\n";
  }
}

void expect_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.defined(), b.defined());
  if (!a.defined()) return;
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> x = values(a), y = values(b);
  size_t diff = 0;
  for (size_t k = 0; k < x.size(); ++k)
    if (!(x[k] == y[k] || (std::isnan(x[k]) && std::isnan(y[k])))) ++diff;
  EXPECT_EQ(diff, 0u);
}

void expect_same_run(const ConvRun& a, const ConvRun& b, const std::string& what) {
  expect_bits(a.y, b.y, what + ": output");
  expect_bits(a.gi, b.gi, what + ": grad_input");
  expect_bits(a.gw, b.gw, what + ": grad_weight");
  expect_bits(a.gb, b.gb, what + ": grad_bias");
}

// Every output-mask combination gives exactly the gradients it asks for, bit for bit those of
// the full backward.
TEST(ConvReduced, EveryOutputMask) {
  for (const char* name : {"ragged 3x3 pad 1", "transposed stride 2", "depthwise", "N = 0"}) {
    const Case& c = *std::find_if(cases().begin(), cases().end(), [&](const Case& k) { return k.what == name; });
    const Shape os = out_shape_of(c);
    const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
    const DType dt = DType::BFloat16;
    Tensor x = random_tensor(c.x, dt, 1), w = random_tensor(c.w, dt, 2), b = random_tensor({C_out}, dt, 3);
    Tensor g = random_tensor(os, dt, 4);
    const ConvRun all = run(c, x, w, b, g);
    for (int m = 0; m < 8; ++m) {
      const std::array<bool, 3> mask{(m & 1) != 0, (m & 2) != 0, (m & 4) != 0};
      const ConvRun r = run(c, x, w, b, g, mask);
      const std::string what = std::string(name) + " mask " + std::to_string(m);
      EXPECT_EQ(r.gi.defined(), mask[0]) << what;
      EXPECT_EQ(r.gw.defined(), mask[1]) << what;
      EXPECT_EQ(r.gb.defined(), mask[2]) << what;
      if (mask[0]) expect_bits(r.gi, all.gi, what);
      if (mask[1]) expect_bits(r.gw, all.gw, what);
      if (mask[2]) expect_bits(r.gb, all.gb, what);
    }
  }
}

// Off the vdpbf16ps path, a 16-bit convolution other than a unit one (1x1, stride 1, no
// padding) runs the float32 kernels on widened copies of its operands (conv_kernels_reduced.cpp's
// widen_to_float32; the README's "converting" path): every result is, bit for bit, the float32
// convolution of the widened tensors rounded once to the 16-bit dtype.
TEST(ConvReduced, ConvertingPathIsTheFloat32KernelsOnWidenedOperands) {
  for (Isa isa : paths()) {
    IsaGuard guard(isa);
    for (const Case& c : cases()) {
      if (c.what == "1x1" || c.what == "transposed 1x1") continue;  // unit: im2col-free 16-bit GEMM
      const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
      for (DType dt : {DType::BFloat16, DType::Float16}) {
        if (dt == DType::BFloat16 && isa == Isa::Avx512Bf16) continue;  // the vdpbf16ps GEMM instead
        Tensor x = random_tensor(c.x, dt, 11), w = random_tensor(c.w, dt, 12), b = random_tensor({C_out}, dt, 13);
        Tensor g = random_tensor(out_shape_of(c), dt, 14);
        const ConvRun got = run(c, x, w, b, g);
        auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
        const ConvRun wide = run(c, f32(x), f32(w), f32(b), f32(g));
        auto rounded = [dt](const Tensor& t) { return t.defined() ? t.to(dt) : t; };
        const ConvRun want{rounded(wide.y), rounded(wide.gi), rounded(wide.gw), rounded(wide.gb)};
        expect_same_run(got, want, c.what + " " + dtype_name(dt) + " path " + isa_name(isa));
      }
    }
  }
}

TEST(ConvReduced, SameBitsForOneAndTwoThreads) {
  const int before = omp_get_max_threads();
  for (Isa isa : paths()) {
    IsaGuard guard(isa);
    for (const char* name : {"larger, parallel", "larger stride 2", "groups 3", "transposed stride 2"}) {
      const Case& c = *std::find_if(cases().begin(), cases().end(), [&](const Case& k) { return k.what == name; });
      const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
      for (DType dt : {DType::BFloat16, DType::Float16}) {
        Tensor x = random_tensor(c.x, dt, 5), w = random_tensor(c.w, dt, 6), b = random_tensor({C_out}, dt, 7);
        Tensor g = random_tensor(out_shape_of(c), dt, 8);
        omp_set_num_threads(1);
        const ConvRun one = run(c, x, w, b, g);
        omp_set_num_threads(2);
        const ConvRun two = run(c, x, w, b, g);
        expect_same_run(one, two, std::string(name) + " " + dtype_name(dt) + " path " + isa_name(isa));
      }
    }
  }
  omp_set_num_threads(before);
}

// Inf and NaN as the float32 kernels (on the widened tensors, rounded once): the same NaN and
// Inf positions, the finite values within 2u of the largest |value|. The padding must never
// turn an Inf into a NaN (an Inf weight or input next to the zero padding).
TEST(ConvReduced, InfAndNaNAsFloat32) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Poison {
    const char* what;
    int which;  // 0 x, 1 w, 2 g
    size_t at;
    double v;
  };
  const std::vector<Poison> poisons = {{"Inf weight", 1, 0, inf},   {"-Inf weight", 1, 4, -inf},
                                       {"Inf input corner", 0, 0, inf}, {"Inf input", 0, 12, inf},
                                       {"NaN grad_output", 2, 3, nan}, {"Inf grad_output corner", 2, 0, inf}};
  for (Isa isa : paths()) {
    IsaGuard guard(isa);
    for (const char* name : {"ragged 3x3 pad 1", "stride 2", "transposed stride 2", "depthwise", "1x1"}) {
      const Case& c = *std::find_if(cases().begin(), cases().end(), [&](const Case& k) { return k.what == name; });
      const Shape os = out_shape_of(c);
      const int64_t C_out = c.transposed ? c.w[1] * c.groups : c.w[0];
      for (DType dt : {DType::BFloat16, DType::Float16}) {
        for (const Poison& p : poisons) {
          Tensor t[3] = {random_tensor(c.x, dt, 1), random_tensor(c.w, dt, 2), random_tensor(os, dt, 4)};
          std::vector<double> v = values(t[p.which]);
          v[p.at] = p.v;
          t[p.which] = from_vector(v, t[p.which].shape()).to(dt);
          Tensor b = c.bias ? random_tensor({C_out}, dt, 3) : Tensor();
          const ConvRun got = run(c, t[0], t[1], b, t[2]);
          auto f32 = [](const Tensor& a) { return a.defined() ? a.to(DType::Float32) : a; };
          const ConvRun ref = run(c, f32(t[0]), f32(t[1]), f32(b), f32(t[2]));
          const std::string what = std::string(name) + ", " + p.what + ", " + dtype_name(dt) + " path " + isa_name(isa);
          const Tensor* gs[] = {&got.y, &got.gi, &got.gw, &got.gb};
          const Tensor* rs[] = {&ref.y, &ref.gi, &ref.gw, &ref.gb};
          for (int k = 0; k < 4; ++k) {
            if (!gs[k]->defined()) continue;
            const std::vector<double> a = values(*gs[k]), r = values(rs[k]->to(dt));
            double m = 0;
            for (double e : r)
              if (std::isfinite(e)) m = std::max(m, std::abs(e));
            size_t bad = 0;
            for (size_t i = 0; i < a.size(); ++i) {
              if (std::isnan(r[i]) ? !std::isnan(a[i]) : std::isinf(r[i]) ? a[i] != r[i]
                                                                          : !(std::abs(a[i] - r[i]) <= 2 * unit_roundoff(dt) * m))
                ++bad;
            }
            EXPECT_EQ(bad, 0u) << what << ", result " << k;
          }
        }
      }
    }
  }
}

// Float32 convolutions under the math modes: forward and backward against float64.
struct ModeCase {
  Float32Math math;
  double e;  // error of one product, relative to |x y|
};

TEST(ConvReduced, Float32MathModes) {
  const Case c{"conv2d", {2, 6, 9, 10}, {8, 6, 3, 3}, true, {1}, {1}, {1}, false, {0}, 1};
  const Shape os = out_shape_of(c);
  std::mt19937 gen(9);
  auto randf = [&](const Shape& s) {  // float32 values, not 16-bit-exact
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = u(gen);
    return from_vector(v, s);
  };
  Tensor x = randf(c.x), w = randf(c.w), b = randf({c.w[0]}), g = randf(os);
  const ConvRun plain = run(c, x, w, b, g);
  {
    Float32MathGuard guard(MathPrecision::Highest);
    expect_same_run(run(c, x, w, b, g), plain, "Highest");
  }
  const ConvRun ref = run(c, f64(x), f64(w), f64(b), f64(g));
  const ConvRun A = run(c, abs64(x), abs64(w), abs64(b), abs64(g));
  const double f = std::ldexp(1.0, -24);
  const int64_t terms_c = (c.x[1] + c.w[0]) * 9 + 3, terms_w = c.x[0] * 90 + 2;
  for (const ModeCase& m : {ModeCase{Float32Math::BFloat16x3, 4 * std::ldexp(1.0, -16)},
                            ModeCase{Float32Math::BFloat16, std::ldexp(1.0, -7) + std::ldexp(1.0, -16)},
                            ModeCase{Float32Math::Float16, std::ldexp(1.0, -10) + std::ldexp(1.0, -22)}}) {
    for (Isa isa : paths()) {
      IsaGuard iguard(isa);
      Float32MathGuard guard(m.math);
      const ConvRun got = run(c, x, w, b, g);
      const std::string what = std::string(float32_math_name(m.math)) + " path " + isa_name(isa);
      for (const Tensor* t : {&got.y, &got.gi, &got.gw, &got.gb}) EXPECT_EQ(t->dtype(), DType::Float32) << what;
      double worst = 0;
      worst = std::max(worst, check_bound(what + " output", got.y, ref.y, A.y, f, m.e + terms_c * f));
      worst = std::max(worst, check_bound(what + " grad_input", got.gi, ref.gi, A.gi, f, m.e + terms_c * f));
      worst = std::max(worst, check_bound(what + " grad_weight", got.gw, ref.gw, A.gw, f, m.e + terms_w * f));
      expect_bits(got.gb, plain.gb, what + ": grad_bias is the float32 sum");
      // The mode is really used: the output is further from float64 than float32's rounding.
      const std::vector<double> a = values(got.y), r = values(ref.y), s = values(A.y);
      double rel = 0;
      for (size_t k = 0; k < a.size(); ++k) rel = std::max(rel, std::abs(a[k] - r[k]) / s[k]);
      EXPECT_GT(rel, m.e / 64) << what;
      std::cout << "[conv_reduced] " << what << ": worst error / bound " << worst << ", worst error / A " << rel
                << "\n";
    }
  }
}

TEST(ConvReduced, CubeMathTypeArgument) {
  const Case c{"conv2d", {2, 4, 7, 8}, {5, 4, 3, 3}, true, {2}, {1}, {1}, false, {0}, 1};
  Tensor x = random_tensor(c.x, DType::Float32, 1), w = random_tensor(c.w, DType::Float32, 2);
  Tensor g = random_tensor(out_shape_of(c), DType::Float32, 3);
  auto bw = [&](const Tensor& gg, const Tensor& xx, const Tensor& ww, std::optional<CubeMathType> t) {
    ConvolutionGrads r = convolution_backward(gg, xx, ww, {c.w[0]}, c.stride, c.padding, c.dilation, false, {0}, 1,
                                              {true, true, true}, t);
    return ConvRun{Tensor(), r.grad_input, r.grad_weight, r.grad_bias};
  };
  for (int v = 0; v <= 3; ++v) {
    const CubeMathType t = static_cast<CubeMathType>(v);
    ConvRun mode_run;
    {
      Float32MathGuard guard(to_float32_math(t));
      mode_run = bw(g, x, w, std::nullopt);
    }
    expect_same_run(bw(g, x, w, t), mode_run, "cubeMathType " + std::to_string(v));
    {
      // the argument overrides the thread's mode, whichever it is
      Float32MathGuard guard(v == 1 ? Float32Math::Float16 : Float32Math::BFloat16);
      expect_same_run(bw(g, x, w, t), mode_run, "cubeMathType " + std::to_string(v) + " over another mode");
    }
    // 16-bit tensors keep their own dtype
    for (DType dt : {DType::BFloat16, DType::Float16}) {
      Tensor gh = g.to(dt), xh = x.to(dt), wh = w.to(dt);
      expect_same_run(bw(gh, xh, wh, t), bw(gh, xh, wh, std::nullopt),
                      std::string(dtype_name(dt)) + " cubeMathType " + std::to_string(v));
    }
  }
  ConvRun keep = bw(g, x, w, CubeMathType::KeepDtype);
  expect_same_run(keep, bw(g, x, w, std::nullopt), "KeepDtype is float32");
  for (int bad : {-1, 4, 100}) {
    EXPECT_THROW(bw(g, x, w, static_cast<CubeMathType>(bad)), Error) << bad;
    try {
      bw(g, x, w, static_cast<CubeMathType>(bad));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("convolution_backward"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cubeMathType"), std::string::npos) << e.what();
    }
  }
}

// A 16-bit convolution ignores the float32 math mode.
TEST(ConvReduced, SixteenBitIgnoresMathMode) {
  const Case& c = cases()[0];
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Tensor x = random_tensor(c.x, dt, 1), w = random_tensor(c.w, dt, 2), b = random_tensor({c.w[0]}, dt, 3);
    Tensor g = random_tensor(out_shape_of(c), dt, 4);
    const ConvRun plain = run(c, x, w, b, g);
    for (Float32Math m : {Float32Math::BFloat16x3, Float32Math::BFloat16, Float32Math::Float16}) {
      Float32MathGuard guard(m);
      expect_same_run(run(c, x, w, b, g), plain, std::string(dtype_name(dt)) + " under " + float32_math_name(m));
    }
  }
}

}  // namespace
}  // namespace tg
