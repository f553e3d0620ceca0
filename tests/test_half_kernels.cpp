// The native 16-bit kernels of group norm and bilinear upsampling (T = BFloat16, Float16;
// ops/group_norm/group_norm_kernels.h, ops/upsample/upsample_kernels.h), forward and backward,
// against the float32 kernel run on the same 16-bit-exact inputs (widened to float, which is
// exact) with each output rounded once to the 16-bit type.
//
// Tolerance: 1 ulp of the 16-bit type, elementwise. The 16-bit kernels run the float32
// algorithm on the widened values, except where they sum in float what the float32 kernel sums
// in double (group norm's forward statistics, upsampling's backward): a float result a few
// float ulps away can round to the neighbouring 16-bit value, never further, and the ulp also
// leaves room for the compiler to contract a multiply-add differently in the two
// instantiations. The statistics mean and rstd are float32 in both kernels, checked to 1e-6
// relative.
//
// Cross-path (expect_same_on_every_isa): the AVX2 and AVX-512 copies contract multiply-adds, so
// a float result moves by a float ulp or two, which can move the rounded 16-bit value by one
// of its ulps: tolerance one 16-bit ulp of the largest value (2^-7 of it for bfloat16, 2^-10
// for float16); 1e-6 for the float32 statistics.
#include "half_kernel_test_util.h"
#include "isa_test_util.h"
#include "test_util.h"

#include <tapegrad/ops/group_norm/group_norm_kernels.h>
#include <tapegrad/ops/upsample/upsample_kernels.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tg {
namespace {

using testing::expect_within_one_ulp;
using testing::random_half;
using testing::ulp_fraction;
using testing::widen;

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(ref[k]) && std::isnan(got[k])) continue;
    ASSERT_LE(std::fabs(got[k] - ref[k]), 1e-6 * std::fabs(ref[k])) << what << " at " << k;
  }
}

// ----- group norm -----

struct GnCase {
  int64_t N, C, HxW, G;
  bool affine;
  double offset;  // x = offset + N(0, 1): the mean split into hi + lo in the normalisation
};

std::string name_of(const GnCase& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " HxW" + std::to_string(c.HxW) + " G" +
         std::to_string(c.G) + (c.affine ? " affine" : " plain") + " offset " + std::to_string(c.offset);
}

const std::vector<GnCase> kGnCases = {
    {1, 1, 1, 1, true, 0},        // one element
    {1, 1, 37, 1, false, 0},      // NC = 1, not a multiple of any vector width
    {2, 6, 5, 3, true, 0},        // ragged small
    {3, 8, 33, 4, false, 2},      // 33: one past 32 lanes
    {2, 64, 17 * 17, 32, true, 0},  // channels of 289 >= the peel threshold
    {4, 32, 300, 8, true, 10},    // |mean| >> std
    {1, 2, 40001, 1, true, 0},    // one group of several chunks: the split path
    {2, 4, 20000, 2, false, 1},   // chunks in the backward's (n, c, chunk) split
};

// The kernels' outputs for one case: y, mean, rstd, grad_x, grad_gamma, grad_beta in T (the
// statistics in float); grad_y is fixed by the seed.
template <class T>
struct GnOut {
  std::vector<T> y, gx, gg, gb;
  std::vector<float> mean, rstd;
};

template <class T>
GnOut<T> run_gn(const GnCase& c, const std::vector<T>& x, const std::vector<T>& gamma, const std::vector<T>& beta,
                const std::vector<T>& gy) {
  GnOut<T> o;
  const int64_t n = c.N * c.C * c.HxW, NG = c.N * c.G;
  o.y.resize(n);
  o.mean.resize(NG);
  o.rstd.resize(NG);
  const T* g = c.affine ? gamma.data() : nullptr;
  const T* b = c.affine ? beta.data() : nullptr;
  kernels::group_norm_forward<T>(x.data(), g, b, c.N, c.C, c.HxW, c.G, 1e-5, o.y.data(), o.mean.data(),
                                 o.rstd.data());
  o.gx.resize(n);
  o.gg.resize(c.C);
  o.gb.resize(c.C);
  kernels::group_norm_backward<T>(gy.data(), x.data(), o.mean.data(), o.rstd.data(), g, c.N, c.C, c.HxW, c.G,
                                  o.gx.data(), o.gg.data(), o.gb.data());
  return o;
}

template <class H>
void check_group_norm() {
  for (const GnCase& c : kGnCases) {
    SCOPED_TRACE(name_of(c));
    const int64_t n = c.N * c.C * c.HxW;
    const auto x = random_half<H>(n, 1, 1.0, c.offset);
    const auto gamma = random_half<H>(c.C, 2, 1.0, 1.0);
    const auto beta = random_half<H>(c.C, 3);
    const auto gy = random_half<H>(n, 4);
    const GnOut<H> h = run_gn<H>(c, x, gamma, beta, gy);
    const GnOut<float> f = run_gn<float>(c, widen(x), widen(gamma), widen(beta), widen(gy));
    expect_within_one_ulp(h.y, f.y, "y");
    expect_close(h.mean, f.mean, "mean");
    expect_close(h.rstd, f.rstd, "rstd");
    // grad_x = c1 * dy + c2 * (x - mean) + c3 cancels: where it is ~0 (all of a one-element
    // group), the float result is the rounding noise of terms of size rstd * |gamma * dy|,
    // which a multiply-add contracted in one instantiation and not the other changes. Floor:
    // 4 float ulps (2^-21 relative) of the largest such term.
    double term = 0;
    for (int64_t i = 0; i < c.N * c.G; ++i) term = std::max(term, static_cast<double>(f.rstd[i]));
    double gmax = 0, gymax = 0;
    for (H v : gamma) gmax = std::max(gmax, std::fabs(static_cast<double>(static_cast<float>(v))));
    for (H v : gy) gymax = std::max(gymax, std::fabs(static_cast<double>(static_cast<float>(v))));
    const double floor = std::ldexp(term * (c.affine ? gmax : 1.0) * gymax, -21);
    expect_within_one_ulp(h.gx, f.gx, "grad_x", floor);
    expect_within_one_ulp(h.gg, f.gg, "grad_gamma");
    expect_within_one_ulp(h.gb, f.gb, "grad_beta");

    // The output mask: grad_beta alone (no x needed), and grad_x alone.
    std::vector<H> gb_only(c.C), gx_only(n);
    kernels::group_norm_backward<H>(gy.data(), x.data(), h.mean.data(), h.rstd.data(),
                                    c.affine ? gamma.data() : nullptr, c.N, c.C, c.HxW, c.G, nullptr, nullptr,
                                    gb_only.data());
    expect_within_one_ulp(gb_only, f.gb, "grad_beta alone");
    kernels::group_norm_backward<H>(gy.data(), x.data(), h.mean.data(), h.rstd.data(),
                                    c.affine ? gamma.data() : nullptr, c.N, c.C, c.HxW, c.G, gx_only.data(),
                                    nullptr, nullptr);
    expect_within_one_ulp(gx_only, f.gx, "grad_x alone", floor);
  }
}

TEST(HalfKernels, GroupNormBFloat16MatchesFloat32RoundedOnce) { check_group_norm<BFloat16>(); }
TEST(HalfKernels, GroupNormFloat16MatchesFloat32RoundedOnce) { check_group_norm<Float16>(); }

template <class H>
void check_group_norm_on_every_isa() {
  for (const GnCase& c : kGnCases) {
    // A one-element group's grad_x is pure rounding noise (exactly 0 in exact arithmetic), and
    // the paths' contractions give different noise: nothing to compare relative to it.
    if (c.C * c.HxW / c.G == 1) continue;
    SCOPED_TRACE(name_of(c));
    const int64_t n = c.N * c.C * c.HxW;
    const auto x = random_half<H>(n, 5, 1.0, c.offset);
    const auto gamma = random_half<H>(c.C, 6, 1.0, 1.0);
    const auto beta = random_half<H>(c.C, 7);
    const auto gy = random_half<H>(n, 8);
    auto shape = [](int64_t k) { return Shape{k}; };
    testing::expect_same_on_every_isa(
        [&] {
          GnOut<H> o = run_gn<H>(c, x, gamma, beta, gy);
          return std::vector<Tensor>{from_vector(o.y, shape(n)), from_vector(o.gx, shape(n)),
                                     from_vector(o.gg, shape(c.C)), from_vector(o.gb, shape(c.C))};
        },
        ulp_fraction<H>());
    testing::expect_same_on_every_isa(
        [&] {
          GnOut<H> o = run_gn<H>(c, x, gamma, beta, gy);
          return std::vector<Tensor>{from_vector(o.mean, shape(c.N * c.G)), from_vector(o.rstd, shape(c.N * c.G))};
        },
        1e-6);
  }
}

TEST(HalfKernels, GroupNormSameOnEveryIsa) {
  check_group_norm_on_every_isa<BFloat16>();
  check_group_norm_on_every_isa<Float16>();
}

// ----- bilinear upsampling -----

struct UpCase {
  int64_t NC, H, W, Ho, Wo;
  double scales_h = -1, scales_w = -1;
};

std::string name_of(const UpCase& c, bool ac) {
  return "NC" + std::to_string(c.NC) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) + " -> " +
         std::to_string(c.Ho) + "x" + std::to_string(c.Wo) + (ac ? " align_corners" : "");
}

const std::vector<UpCase> kUpCases = {
    {1, 5, 7, 11, 13},      // up, NC = 1, ragged
    {1, 1, 1, 3, 5},        // one input pixel
    {3, 16, 16, 33, 47},    // up, widths one past / between vector widths
    {2, 13, 17, 5, 6},      // down
    {2, 8, 9, 8, 9},        // same size: a copy
    {2, 4, 6, 8, 12, 2.0, 2.0},  // the user's scale factor passed through
    {4, 32, 32, 64, 64},    // large enough to run in parallel
    {3, 40, 24, 17, 100},   // down along H, up along W
};

template <class T>
std::pair<std::vector<T>, std::vector<T>> run_up(const UpCase& c, bool ac, const std::vector<T>& x,
                                                 const std::vector<T>& gy) {
  std::vector<T> y(c.NC * c.Ho * c.Wo), gx(c.NC * c.H * c.W);
  kernels::upsample_bilinear2d_forward<T>(x.data(), y.data(), c.NC, c.H, c.W, c.Ho, c.Wo, ac, c.scales_h,
                                          c.scales_w);
  kernels::upsample_bilinear2d_backward<T>(gy.data(), gx.data(), c.NC, c.H, c.W, c.Ho, c.Wo, ac, c.scales_h,
                                           c.scales_w);
  return {y, gx};
}

template <class H>
void check_upsample() {
  for (const UpCase& c : kUpCases) {
    for (bool ac : {false, true}) {
      SCOPED_TRACE(name_of(c, ac));
      const auto x = random_half<H>(c.NC * c.H * c.W, 11);
      const auto gy = random_half<H>(c.NC * c.Ho * c.Wo, 12);
      const auto h = run_up<H>(c, ac, x, gy);
      const auto f = run_up<float>(c, ac, widen(x), widen(gy));
      expect_within_one_ulp(h.first, f.first, "y");
      expect_within_one_ulp(h.second, f.second, "grad_x");
    }
  }
}

TEST(HalfKernels, UpsampleBFloat16MatchesFloat32RoundedOnce) { check_upsample<BFloat16>(); }
TEST(HalfKernels, UpsampleFloat16MatchesFloat32RoundedOnce) { check_upsample<Float16>(); }

// The forward's vector rounding (16 or 32 lanes at a time on AVX-512, a scalar tail) against
// the scalar rule, bit for bit: the 16-bit forward is the float kernel's result rounded once.
// The inputs are the values where a rounding shortcut would go wrong: blends of bf16 values with
// the weights 1/4 and 3/4 land on ties at bit 16 (all of them even-odd cases), bf16 subnormals
// (which vcvtneps2bf16 would flush), the largest finite values (which round up to inf), inf and
// NaN (the lane-wise rule takes over for a whole register). Widths cover 32-lane steps, a
// 16-lane step and a scalar tail.
TEST(HalfKernels, UpsampleBFloat16ForwardRoundsAsTheScalarRule) {
  const float kSpecial[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 128,  // odd last bit: neighbours' blends tie
                            3.0f,
                            -5.0f / 1024,
                            half_bits::bits_float(0x00010000u),  // the smallest bf16 subnormal
                            half_bits::bits_float(0x00550000u),
                            -half_bits::bits_float(0x007f0000u),  // the largest bf16 subnormal
                            half_bits::bits_float(0x00800000u),   // FLT_MIN
                            half_bits::bits_float(0x7f7f0000u),   // the largest finite bf16
                            -half_bits::bits_float(0x7f7f0000u),
                            INFINITY,
                            -INFINITY};
  for (int64_t W : {16, 23, 24, 40}) {  // Wo = 2 W: 32, 46, 48, 80
    SCOPED_TRACE("W = " + std::to_string(W));
    for (bool with_nan : {false, true}) {
      const int64_t NC = 3, H = 5, Ho = 2 * H, Wo = 2 * W;
      std::vector<BFloat16> x(NC * H * W);
      // Planes 0 and 1: two in three values are 1 + j / 128 (j < 8: consecutive bf16 values),
      // whose blends tie often, the others special; plane 2: bf16 subnormals only, whose blends
      // are float subnormals.
      for (size_t k = 0; k < x.size(); ++k) {
        const auto j = static_cast<uint32_t>(k * 5 + k / 7);
        x[k] = static_cast<int64_t>(k) >= 2 * H * W ? BFloat16::from_bits(static_cast<uint16_t>(j % 0x80 | (j & 0x100) << 7))
               : k % 3 == 2 ? BFloat16(kSpecial[(k * 7 + k / 5) % std::size(kSpecial)])
                            : BFloat16(1.0f + static_cast<float>(j % 8) / 128);
      }
      if (with_nan) x[W + 3] = BFloat16(NAN);
      std::vector<BFloat16> y(NC * Ho * Wo);
      std::vector<float> xf = widen(x), yf(y.size());
      kernels::upsample_bilinear2d_forward<BFloat16>(x.data(), y.data(), NC, H, W, Ho, Wo, false, -1, -1);
      kernels::upsample_bilinear2d_forward<float>(xf.data(), yf.data(), NC, H, W, Ho, Wo, false, -1, -1);
      int ties_down = 0, ties_up = 0, subnormal = 0;  // ties: the nearest even lies below / above
      for (size_t k = 0; k < y.size(); ++k) {
        ASSERT_EQ(y[k].bits, half_bits::float_to_bf16(yf[k])) << "output " << k << " of " << yf[k];
        const uint32_t u = half_bits::float_bits(yf[k]);
        if ((u & 0xffffu) == 0x8000u) ++((u & 0x10000u) ? ties_up : ties_down);
        if (yf[k] != 0.0f && std::fabs(yf[k]) < FLT_MIN) ++subnormal;
      }
      EXPECT_GE(ties_down, 10);  // the test does meet what it is about
      EXPECT_GE(ties_up, 10);
      EXPECT_GE(subnormal, 5);
    }
  }
}

template <class H>
void check_upsample_on_every_isa() {
  for (const UpCase& c : kUpCases) {
    for (bool ac : {false, true}) {
      SCOPED_TRACE(name_of(c, ac));
      const auto x = random_half<H>(c.NC * c.H * c.W, 13);
      const auto gy = random_half<H>(c.NC * c.Ho * c.Wo, 14);
      testing::expect_same_on_every_isa(
          [&] {
            auto o = run_up<H>(c, ac, x, gy);
            return std::vector<Tensor>{from_vector(o.first, {c.NC, c.Ho, c.Wo}), from_vector(o.second, {c.NC, c.H, c.W})};
          },
          ulp_fraction<H>());
    }
  }
}

TEST(HalfKernels, UpsampleSameOnEveryIsa) {
  check_upsample_on_every_isa<BFloat16>();
  check_upsample_on_every_isa<Float16>();
}

}  // namespace
}  // namespace tg
