// The reduced-precision GEMM (kernels::gemm_batched_reduced, ops/matmul_kernels.h) on every
// path this CPU has, and the float32 math modes of matmul / linear (framework/math_mode.h).
//
// Tolerances. The operands are bf16 / fp16 values, so their products are exact in float32 and
// float64 alike; what differs from the float64 reference is the float32 summation: a sum of k
// products and an initial C is within (k + 1) 2^-24 (sum |a||b| + |c0|) of the exact value on
// any path (the usual gamma_{k+1} bound, whatever the order or pairing of the additions). The
// vdpbf16ps path also treats bf16 denormals as zero and flushes denormal partial sums: at most
// 2^-126 per product (times |other operand|) and per step more, stated and tested below.
// The converting paths must give exactly the bits of gemm_batched<float> on the widened
// operands (the same kernel on the same values), which is tested bit for bit.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <tapegrad/ops/matmul_kernels.h>
#include "test_util.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

namespace tg {
namespace {

using kernels::MatrixLayout;

constexpr Isa kAllPaths[] = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16};

// The paths to test; the ones this CPU lacks are named in the output.
std::vector<Isa> paths() {
  std::vector<Isa> out;
  for (Isa isa : kAllPaths) {
    if (isa_supported(isa)) out.push_back(isa);
    else std::cout << "[ skipped ] path " << isa_name(isa) << ": this CPU (" << cpu_info().model << ") or build lacks it\n";
  }
  return out;
}

// Whether `isa` runs S on the vdpbf16ps kernel (else the converting float32 kernel).
template <class S>
bool dpbf16_path(Isa isa) {
  return std::is_same_v<S, BFloat16> && isa == Isa::Avx512Bf16;
}

// One product's shapes and layouts: op(A) (n x k), op(B) (k x m), C (n x m) in a batch, each
// stored with padding in its rows and between the matrices (or batch stride 0: shared).
struct Case {
  int64_t batch, n, k, m;
  bool ta, tb, tc, acc;
  bool share_a = false, share_b = false;
};

struct Buffers {
  MatrixLayout a, b, c;
  int64_t na, nb, nc;
};

Buffers layouts(const Case& t) {
  Buffers u;
  const int64_t ar = t.ta ? t.k : t.n, ac = t.ta ? t.n : t.k;
  const int64_t br = t.tb ? t.m : t.k, bc = t.tb ? t.k : t.m;
  const int64_t cr = t.tc ? t.m : t.n, cc = t.tc ? t.n : t.m;
  u.a = {ac + 3, t.share_a ? 0 : ar * (ac + 3) + 5, t.ta};
  u.b = {bc + 1, t.share_b ? 0 : br * (bc + 1) + 2, t.tb};
  u.c = {cc + 2, cr * (cc + 2) + 1, t.tc};
  u.na = std::max<int64_t>(1, (t.batch - 1) * u.a.batch_stride + ar * u.a.ld);
  u.nb = std::max<int64_t>(1, (t.batch - 1) * u.b.batch_stride + br * u.b.ld);
  u.nc = std::max<int64_t>(1, t.batch * u.c.batch_stride);
  return u;
}

double get(const std::vector<float>& x, MatrixLayout l, int64_t b, int64_t i, int64_t j) {
  return x[size_t(b * l.batch_stride + (l.trans ? j * l.ld + i : i * l.ld + j))];
}

// Random values exactly representable in S (as float), some zeros among them.
template <class S>
std::vector<float> exact_values(int64_t count, uint64_t seed) {
  manual_seed(seed);
  std::vector<float> v = randn({count}).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 17 == 3 ? 0.0f : float(S(v[i]));
  return v;
}

template <class S>
std::vector<S> as_s(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// C on the active path: gemm_batched_reduced<S> of the values, C starting as c0.
template <class S>
std::vector<float> run_reduced(const Case& t, const Buffers& u, const std::vector<float>& a,
                               const std::vector<float>& b, const std::vector<float>& c0) {
  std::vector<S> as = as_s<S>(a), bs = as_s<S>(b);
  std::vector<float> c = c0;
  kernels::gemm_batched_reduced<S>(as.data(), u.a, bs.data(), u.b, c.data(), u.c, t.batch, t.n, t.k, t.m, t.acc);
  return c;
}

bool same_float_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {1, 1, 1, 1, false, false, false, false},      // 1 x 1
      {1, 1, 1, 1, true, true, false, true},         // 1 x 1, accumulate
      {2, 3, 0, 4, false, false, false, false},      // k = 0: zeros
      {2, 3, 0, 4, false, true, false, true},        // k = 0, accumulate: C unchanged
      {1, 5, 7, 3, false, false, false, false},      // small, k odd (plain loops)
      {1, 100, 1, 100, false, false, false, false},  // k = 1, packed
      {1, 100, 1, 100, true, true, true, true},      // k = 1, every transpose
      {1, 13, 33, 45, false, false, false, false},   // ragged tiles, k odd
      {1, 13, 33, 45, true, false, false, true},
      {1, 13, 33, 45, false, true, true, false},
      {3, 37, 301, 65, false, false, false, true},  // batch, two float depth blocks, k odd
      {3, 37, 301, 65, true, true, false, false},
      {3, 37, 301, 65, false, true, false, false, false, true},  // one B for the batch
      {3, 37, 301, 65, true, false, true, true, true, false},    // one A for the batch, C^T
      {2, 25, 513, 40, false, false, false, false},  // two bf16 depth blocks, one of them odd
      {2, 25, 513, 40, true, true, true, true},
      {1, 250, 96, 70, false, true, false, true},    // row parts >= 3: B^T transposed first
  };
  return c;
}

template <class S>
void check_against_float64() {
  for (Isa isa : paths()) {
    IsaGuard guard(isa);
    double worst_all = 0;  // worst error / (k + 1) 2^-24 sum|a||b|, for the output
    for (const Case& t : cases()) {
      SCOPED_TRACE(std::string("path ") + isa_name(isa) + ", batch " + std::to_string(t.batch) + ", n k m " +
                   std::to_string(t.n) + " " + std::to_string(t.k) + " " + std::to_string(t.m) + ", trans " +
                   std::to_string(t.ta) + std::to_string(t.tb) + std::to_string(t.tc) + ", acc " + std::to_string(t.acc));
      const Buffers u = layouts(t);
      const std::vector<float> a = exact_values<S>(u.na, 1), b = exact_values<S>(u.nb, 2);
      const std::vector<float> c0 = exact_values<S>(u.nc, 3);
      const std::vector<float> c = run_reduced<S>(t, u, a, b, c0);
      double worst = 0;
      int64_t bad = 0;
      for (int64_t bi = 0; bi < t.batch; ++bi)
        for (int64_t i = 0; i < t.n; ++i)
          for (int64_t j = 0; j < t.m; ++j) {
            double exact = t.acc ? get(c0, u.c, bi, i, j) : 0.0, scale = std::fabs(exact);
            for (int64_t p = 0; p < t.k; ++p) {
              const double x = get(a, u.a, bi, i, p), y = get(b, u.b, bi, p, j);
              exact += x * y;
              scale += std::fabs(x * y);
            }
            const double err = std::fabs(get(c, u.c, bi, i, j) - exact);
            const double bound = double(t.k + 1) * std::ldexp(scale, -24);
            if (!(err <= bound)) ++bad;
            if (bound > 0) worst_all = std::max(worst_all, err / bound);
            if (scale > 0) worst = std::max(worst, err / scale);
          }
      EXPECT_EQ(bad, 0) << "worst error / sum|a||b| " << worst;
      // Bytes of C outside the matrices (row padding, gaps between them) are never written.
      for (int64_t bi = 0; bi < t.batch; ++bi)
        for (int64_t r = 0; r < (t.tc ? t.m : t.n); ++r)
          for (int64_t j = (t.tc ? t.n : t.m); j < u.c.ld; ++j) {
            const size_t at = size_t(bi * u.c.batch_stride + r * u.c.ld + j);
            ASSERT_EQ(c[at], c0[at]);
          }
      // The converting paths: the bits of the float32 kernel on the widened values.
      if (!dpbf16_path<S>(isa)) {
        std::vector<float> f = c0;
        kernels::gemm_batched<float>(a.data(), u.a, b.data(), u.b, f.data(), u.c, t.batch, t.n, t.k, t.m, t.acc);
        EXPECT_TRUE(same_float_bits(c, f)) << "not the float32 kernel's bits";
      }
    }
    std::cout << "path " << isa_name(isa) << (dpbf16_path<S>(isa) ? " (vdpbf16ps)" : " (converting)")
              << ": worst error = " << worst_all << " of the bound (k + 1) 2^-24 sum|a||b|\n";
  }
}

TEST(GemmReduced, BFloat16MatchesFloat64OnEveryPath) { check_against_float64<BFloat16>(); }
TEST(GemmReduced, Float16MatchesFloat64OnEveryPath) { check_against_float64<Float16>(); }

template <class S>
void check_thread_counts() {
  const Case t{2, 150, 301, 130, false, true, false, true};
  const Buffers u = layouts(t);
  const std::vector<float> a = exact_values<S>(u.na, 4), b = exact_values<S>(u.nb, 5), c0 = exact_values<S>(u.nc, 6);
  const int saved = num_threads();
  for (Isa isa : paths()) {
    IsaGuard guard(isa);
    set_num_threads(1);
    const std::vector<float> one = run_reduced<S>(t, u, a, b, c0);
    set_num_threads(2);
    const std::vector<float> two = run_reduced<S>(t, u, a, b, c0);
    EXPECT_TRUE(same_float_bits(one, two)) << "path " << isa_name(isa);
  }
  set_num_threads(saved);
}

TEST(GemmReduced, SameBitsForOneAndTwoThreads) {
  check_thread_counts<BFloat16>();
  check_thread_counts<Float16>();
}

// Inf and NaN among the operands give what the float32 kernel gives: NaN where it has NaN,
// the same infinities, finite values where it has finite ones.
template <class S>
void check_inf_nan() {
  for (const Case& t : {Case{1, 4, 5, 3, false, false, false, false}, Case{1, 30, 41, 70, false, true, false, false},
                        Case{1, 30, 41, 70, true, false, false, true}}) {
    const Buffers u = layouts(t);
    std::vector<float> a = exact_values<S>(u.na, 7), b = exact_values<S>(u.nb, 8), c0 = exact_values<S>(u.nc, 9);
    const float inf = std::numeric_limits<float>::infinity();
    a[0] = inf;                    // row 0, column 0 of op(A) (or of A stored transposed)
    a[size_t(u.a.ld + 1)] = -inf;  // next stored row
    b[2] = std::nanf("");
    b[size_t(u.b.ld)] = 0.0f;      // Inf x 0 = NaN where they meet
    std::vector<float> f = c0;
    kernels::gemm_batched<float>(a.data(), u.a, b.data(), u.b, f.data(), u.c, t.batch, t.n, t.k, t.m, t.acc);
    int64_t nonfinite = 0;
    for (float v : f) nonfinite += !std::isfinite(v);
    ASSERT_GT(nonfinite, 0);
    for (Isa isa : paths()) {
      IsaGuard guard(isa);
      const std::vector<float> c = run_reduced<S>(t, u, a, b, c0);
      for (size_t i = 0; i < c.size(); ++i) {
        if (std::isnan(f[i])) EXPECT_TRUE(std::isnan(c[i])) << isa_name(isa) << " at " << i;
        else if (std::isinf(f[i])) EXPECT_EQ(c[i], f[i]) << isa_name(isa) << " at " << i;
        else EXPECT_TRUE(std::isfinite(c[i])) << isa_name(isa) << " at " << i;
      }
    }
  }
}

TEST(GemmReduced, InfAndNanPropagateAsInFloat32) {
  check_inf_nan<BFloat16>();
  check_inf_nan<Float16>();
}

// bf16 denormals (|x| < 2^-126). The converting paths compute them exactly (float32 has the
// same denormals); vdpbf16ps reads them as zero and flushes denormal sums: each product of a
// denormal a with b loses at most 2^-126 |b|, and each flushed step at most 2^-126, so the
// error is at most 2^-126 (sum |b| + k + 1) on top of the float32 bound, invisible next to any
// normal value's bf16 resolution.
TEST(GemmReduced, Bf16DenormalsOnTheDpbf16PathAreFlushedWithinTheStatedBound) {
  if (!isa_supported(Isa::Avx512Bf16))
    GTEST_SKIP() << "path avx512bf16: this CPU (" << cpu_info().model << ") or build lacks AVX512-BF16";
  const Case t{1, 24, 64, 40, false, false, false, false};
  const Buffers u = layouts(t);
  std::vector<float> a(size_t(u.na)), b = exact_values<BFloat16>(u.nb, 10);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::ldexp(float(1 + i % 7), -130);  // bf16 denormals
  a[5] = 1.0f;  // one normal product per row 0 among them
  for (Isa isa : {Isa::Generic, Isa::Avx512Bf16}) {
    IsaGuard guard(isa);
    const std::vector<float> c = run_reduced<BFloat16>(t, u, a, b, std::vector<float>(size_t(u.nc), 0.0f));
    double worst = 0;
    for (int64_t i = 0; i < t.n; ++i)
      for (int64_t j = 0; j < t.m; ++j) {
        double exact = 0, scale = 0, sum_b = 0;
        for (int64_t p = 0; p < t.k; ++p) {
          const double x = get(a, u.a, 0, i, p), y = get(b, u.b, 0, p, j);
          exact += x * y;
          scale += std::fabs(x * y);
          sum_b += std::fabs(y);
        }
        const double err = std::fabs(get(c, u.c, 0, i, j) - exact);
        const double flush = isa == Isa::Avx512Bf16 ? std::ldexp(sum_b + double(t.k) + 1, -126) : 0.0;
        EXPECT_LE(err, double(t.k + 1) * std::ldexp(scale, -24) + flush) << isa_name(isa) << " " << i << "," << j;
        worst = std::max(worst, err);
      }
    std::cout << "path " << isa_name(isa) << ": worst |error| on denormal operands " << worst << " (2^-126 = "
              << std::ldexp(1.0, -126) << ")\n";
  }
}

// ---- float32 math modes on matmul and linear, forward and gradients ----

struct ModeRun {
  std::vector<Tensor> outs;  // y, then the gradients
};

// matmul of a batch against a shared right operand (the bmm-like broadcast), or linear with a
// bias; loss = sum(y * G), so dy = G exactly.
std::vector<Tensor> run_op(bool linear_op, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& G) {
  Tensor ai = a.detach().requires_grad_(), bi = b.detach().requires_grad_(), ci = bias.detach().requires_grad_();
  Tensor y = linear_op ? linear(ai, bi, ci) : matmul(ai, bi);
  sum(y * G).backward();
  if (linear_op) return {y, ai.grad(), bi.grad(), ci.grad()};
  return {y, ai.grad(), bi.grad()};
}

// |x - exact| / (sum |terms|) at worst, and whether it stays within `rel` plus float32
// summation (k + 1) 2^-24.
struct Worst {
  double ratio = 0;
  int64_t bad = 0;
};

Worst compare(const Tensor& got, const Tensor& exact, const Tensor& scale, int64_t k, double rel) {
  const std::vector<double> x = got.to(DType::Float64).to_vector<double>(), e = exact.to_vector<double>(),
                            s = scale.to_vector<double>();
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(x[i] - e[i]);
    if (!(err <= (rel + double(k + 1) * std::ldexp(1.0, -24)) * s[i] + 1e-30)) ++w.bad;
    if (s[i] > 0) w.ratio = std::max(w.ratio, err / s[i]);
  }
  return w;
}

void check_modes(bool linear_op) {
  const int64_t batch = 3, n = 40, k = 77, m = 50;
  manual_seed(11);
  Tensor a = randn({batch, n, k});
  Tensor b = linear_op ? randn({m, k}) : randn({k, m});  // linear: W (out, in)
  Tensor bias = randn({m}), G = randn({batch, n, m});
  auto f64 = [](const Tensor& t) { return t.to(DType::Float64); };
  auto absd = [&](const Tensor& t) { return abs(f64(t)); };
  // Exact (float64) results and the sums of |terms| each is made of.
  const Tensor bm = linear_op ? b.transpose(0, 1) : b;  // (k, m)
  std::vector<Tensor> exact = {matmul(f64(a), f64(bm)), matmul(f64(G), f64(bm).transpose(0, 1))};
  std::vector<Tensor> scale = {matmul(absd(a), absd(bm)), matmul(absd(G), absd(bm).transpose(0, 1))};
  // d(other): a^T G summed over the batch, as (k, m) for matmul, its transpose (m, k) for linear.
  Tensor db = sum(matmul(f64(a).transpose(1, 2), f64(G)), {0});
  Tensor db_scale = sum(matmul(absd(a).transpose(1, 2), absd(G)), {0});
  exact.push_back(linear_op ? db.transpose(0, 1) : db);
  scale.push_back(linear_op ? db_scale.transpose(0, 1) : db_scale);
  const int64_t depth[] = {k, m, batch * n, batch * n};
  if (linear_op) {
    exact[0] = exact[0] + f64(bias);
    scale[0] = scale[0] + abs(f64(bias));
    exact.push_back(sum(f64(G), {0, 1}));
    scale.push_back(sum(absd(G), {0, 1}));
  }
  const std::vector<Tensor> highest = run_op(linear_op, a, b, bias, G);
  const Isa default_isa = active_isa();
  struct Mode {
    Float32Math mode;
    double rel;        // the bound of one product's operand rounding (framework/math_mode.h)
    double at_least;   // its worst error must show the rounding happened (Float32: none)
  };
  const Mode modes[] = {{Float32Math::Float32, 0.0, 0.0},
                        {Float32Math::BFloat16x3, std::ldexp(3.0, -16), 0.0},
                        {Float32Math::BFloat16, std::ldexp(1.0, -8) + std::ldexp(1.0, -16), std::ldexp(1.0, -12)},
                        {Float32Math::Float16, std::ldexp(1.0, -11) + std::ldexp(1.0, -22), std::ldexp(1.0, -16)}};
  for (Isa isa : paths()) {
    IsaGuard isa_guard(isa);
    for (const Mode& md : modes) {
      SCOPED_TRACE(std::string(linear_op ? "linear" : "matmul") + ", mode " + float32_math_name(md.mode) + ", path " +
                   isa_name(isa));
      std::vector<Tensor> got;
      {
        Float32MathGuard guard(md.mode);
        got = run_op(linear_op, a, b, bias, G);
      }
      if (md.mode == Float32Math::Float32 && isa == default_isa) {
        for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], highest[i])) << "output " << i;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].dtype(), DType::Float32);
        const Worst w = compare(got[i], exact[i], scale[i], i < 4 ? depth[i] : batch * n, i == 3 ? 0.0 : md.rel);
        EXPECT_EQ(w.bad, 0) << "output " << i << ": worst error / sum|terms| " << w.ratio;
        if (isa == default_isa)
          std::cout << (linear_op ? "linear" : "matmul") << " " << float32_math_name(md.mode) << " output " << i
                    << ": worst error / sum|terms| = 2^" << (w.ratio > 0 ? std::log2(w.ratio) : -999) << "\n";
        if (i < 3) {
          EXPECT_GE(w.ratio, md.at_least) << "output " << i << ": the mode did not round the operands";
        }
        if (md.mode == Float32Math::BFloat16x3 && i < 3) {
          EXPECT_LE(w.ratio, std::ldexp(1.0, -14)) << "output " << i << ": bf16x3 lost precision";
        }
      }
    }
  }
}

TEST(Float32MathModes, MatmulForwardAndGradients) { check_modes(false); }
TEST(Float32MathModes, LinearForwardAndGradients) { check_modes(true); }

TEST(Float32MathModes, HighestIsTheDefaultBitForBit) {
  manual_seed(12);
  Tensor a = randn({70, 90}), b = randn({90, 33});
  const Tensor plain = matmul(a, b);
  Float32MathGuard guard(MathPrecision::Highest);
  EXPECT_TRUE(same_bits(matmul(a, b), plain));
}

// USE_FP16 rounds the float32 operands to float16, so a value beyond float16's 65504 becomes
// inf there (the README's table): a product through it is inf, while bf16 keeps float32's range.
TEST(Float32MathModes, Fp16OperandsBeyond65504BecomeInf) {
  const Tensor a = from_vector(std::vector<float>{70000.f, 1.f}, {1, 2});
  const Tensor b = from_vector(std::vector<float>{1.f, 1.f}, {2, 1});
  EXPECT_EQ(matmul(a, b).item<float>(), 70001.f);
  {
    Float32MathGuard guard(Float32Math::Float16);
    EXPECT_TRUE(std::isinf(matmul(a, b).item<float>()));
    Tensor x = from_vector(std::vector<float>{70000.f, 1.f, 1.f, 1.f}, {1, 1, 2, 2});
    Tensor w = ones({1, 1, 1, 1});
    EXPECT_TRUE(std::isinf(conv2d(x, w).to_vector<float>()[0]));
  }
  Float32MathGuard guard(Float32Math::BFloat16);
  EXPECT_FALSE(std::isinf(matmul(a, b).item<float>()));
}

// The modes leave 16-bit and float64 tensors alone.
TEST(Float32MathModes, OnlyFloat32ProductsChange) {
  manual_seed(13);
  Tensor a = randn({20, 30}), b = randn({30, 10});
  for (DType dt : {DType::Float64, DType::BFloat16, DType::Float16}) {
    const Tensor x = a.to(dt), y = b.to(dt);
    const Tensor plain = matmul(x, y);
    Float32MathGuard guard(Float32Math::Float16);
    EXPECT_TRUE(same_bits(matmul(x, y), plain)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace tg
