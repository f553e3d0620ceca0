// exp and erf that a loop can vectorise. glibc's expf / erff are one call per element, and
// they were most of the time of softmax, cross_entropy and gelu (PyTorch calls Sleef's vector
// versions). The float overloads below are branch-free straight-line code, so the compiler
// turns a loop over them into vector code (SSE, AVX2 or AVX-512 by the path); the double overloads are std::exp / std::erf, so
// float64 (gradcheck, golden float64 fixtures) keeps the correctly rounded library results.
//
// Accuracy of the float versions against double-precision references, over all 2^32 floats:
// vec_exp at most 1.03 ulp, vec_erf at most 1.23 ulp (tests/test_vec_math.cpp checks a sweep).
// (PyTorch's Sleef versions: 1.0 ulp; glibc's expf / erff: within 1 ulp.)
// Special values: NaN -> NaN; vec_exp(-inf) = 0, vec_exp(+inf) = inf; vec_erf(+-inf) = +-1.
// A result depends only on the argument, and is the same in the vectorised body and the scalar
// tail of a loop (tested), so where a thread's piece of a loop starts changes no bits.
//
// These are inline code of the kernels, so they live in the instruction set's namespace
// (ops/internal/isa_dispatch.h): each compile of a *_kernels*.cpp file gets its own copy. Other
// files (and tests) see the generic copy as tg::vec_exp etc. through the using-declarations at
// the end. The float versions use no fused multiply-add by hand; a path whose compiler contracts
// a * b + c into one (AVX2, AVX-512) rounds differently, within about an ulp (tested by
// tests/test_isa_pointwise.cpp).
#pragma once

#include "isa_dispatch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tg::kernels::TG_ISA_NS {

inline double vec_exp(double x) { return std::exp(x); }
inline double vec_erf(double x) { return std::erf(x); }

// c ? a : b, written as a blend of the bits. GCC 12 turns a plain ?: or std::min / std::max
// followed by arithmetic into a branch (it folds the arithmetic into the constant side), and then
// will not vectorise the loop without AVX-512 masks, since computing both sides for every lane
// could raise floating-point exceptions the branch would not. The blend gives the same value.
// With AVX-512 GCC masks the branch instead, a few per cent faster than the blend.
[[gnu::always_inline]] inline float select_bits(bool c, float a, float b) {
#if defined(__AVX512F__)
  return c ? a : b;
#else
  uint32_t ab, bb;
  std::memcpy(&ab, &a, sizeof ab);
  std::memcpy(&bb, &b, sizeof bb);
  const uint32_t m = c ? ~uint32_t{0} : 0;
  const uint32_t r = (ab & m) | (bb & ~m);
  float f;
  std::memcpy(&f, &r, sizeof f);
  return f;
#endif
}

// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, e^r = 1 + r + r^2 P(r), e^x = 2^n e^r.
// exp_reduced returns e^r and n (as an int); the callers below scale by 2^n.
[[gnu::always_inline]] inline float exp_reduced(float x, int32_t& n_out) {
  // n = round(x / ln2) without a float-to-int conversion: adding 1.5 * 2^23 rounds to an
  // integer, which then sits in the low mantissa bits of t.
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  // ln2 split in two (C1 exact in a few bits) so that n * C1 is exact.
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  int32_t tbits, kbits;
  std::memcpy(&tbits, &t, sizeof t);
  std::memcpy(&kbits, &kRound, sizeof kRound);
  n_out = tbits - kbits;
  return p * r * r + r + 1.0f;
}

// 2^n for n in [-126, 127]. Shifted as unsigned: for x = NaN, n is garbage (and the result NaN
// through e^r), and a negative int shifted left would be undefined behaviour.
[[gnu::always_inline]] inline float pow2_normal(int32_t n) {
  const uint32_t b = static_cast<uint32_t>(n + 127) << 23;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

inline float vec_exp(float x) {
  // Outside [-104, 89] e^x rounds to 0 or overflows to inf in float; NaN passes the clamp.
  // (std::min(std::max(x, -104.0f), 89.0f), NaN kept, as a blend: see select_bits.)
  x = select_bits(x < -104.0f, -104.0f, x);
  x = select_bits(89.0f < x, 89.0f, x);
  int32_t n;
  const float er = exp_reduced(x, n);
  // 2^n as two factors 2^(n/2) 2^(n - n/2): each stays a normal float for n in [-150, 129],
  // so subnormal results and overflow to inf come out of the last multiplications.
  const int32_t n1 = n >> 1;
  return er * pow2_normal(n1) * pow2_normal(n - n1);
}

// vec_exp for x in [-87, 88], where e^x is a normal float: no clamp, and 2^n in one factor. The
// same bits as vec_exp there (er * 2^n1 is exact, so er * 2^n1 * 2^n2 rounds once, as er * 2^n),
// for less work (vec_erf's exponent stays in [-17, 0.01]).
[[gnu::always_inline]] inline float vec_exp_normal_range(float x) {
  int32_t n;
  const float er = exp_reduced(x, n);
  return er * pow2_normal(n);
}

// vec_exp for x <= 0 (or NaN), as gelu's and the normal density's e^(-x^2/2): the same bits with
// less work. e^x = e^r 2^n with n in [-150, 0]: e^r 2^(n+75) is exact (a normal float), and the
// one rounding of the product by 2^-75 is that of vec_exp's last product.
[[gnu::always_inline]] inline float vec_exp_nonpositive(float x) {
  x = select_bits(x < -104.0f, -104.0f, x);
  int32_t n;
  const float er = exp_reduced(x, n);
  return er * pow2_normal(n + 75) * 0x1p-75f;
}

// erf for float, two pieces selected without a branch:
//   |x| < 0.875:         erf x = x + x Q(x^2)      (Q odd-part minimax fit of erf(x)/x - 1)
//   0.875 <= |x| < 3.93: erf x = 1 - e^P(|x|)      (P fits log erfc; the error of P is scaled
//                                                    down by erfc <= 0.22 in the result)
//   |x| >= 3.93:         erf x = +-1 in float
// The coefficients were fitted (weighted least squares on Chebyshev nodes) to keep the float
// result within about an ulp.
inline float vec_erf(float x) {
  const float a = std::fabs(x);
  const float u = x * x;
  float q = -6.239150534383953e-4f;
  q = q * u + 5.039692856371403e-3f;
  q = q * u + -2.6797045022249222e-2f;
  q = q * u + 1.1282627284526825e-1f;
  q = q * u + -3.76125693321228e-1f;
  q = q * u + 1.2837916612625122e-1f;
  const float small = x + x * q;

  const float s = select_bits(3.93f < a, 3.93f, a);  // std::min(a, 3.93f); NaN passes
  float p = -7.441495313287305e-7f;
  p = p * s + -1.1077398085035384e-5f;
  p = p * s + 3.7663939292542636e-4f;
  p = p * s + -3.98411275818944e-3f;
  p = p * s + 2.4749038740992546e-2f;
  p = p * s + -1.0781949013471603e-1f;
  p = p * s + -6.336981654167175e-1f;
  p = p * s + -1.1293647289276123f;
  p = p * s + 1.4708148955833167e-4f;
  const float large = std::copysign(1.0f - vec_exp_normal_range(p), x);  // p in [-17, 0.01]
  return select_bits(a < 0.875f, small, large);
}

// sum_{i < n} f(i) in double. `omp simd reduction` lets the compiler keep one partial sum per
// vector lane and add the lanes up at the end: the order is fixed for a given n and build (it
// does not depend on threads), and there is no chain of n dependent additions, each waiting
// ~4 cycles for the previous one, as in a plain loop (5x slower on a 768-element row).
// Pass f capturing pointers by value: GCC 12 turns a pointer captured by reference into a
// gather here. always_inline: as a call, f's loads are gathers too.
template <class F>
[[gnu::always_inline]] inline double sum_in_double(int64_t n, F f) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += f(i);
  return s;
}

// max_{i < n} f(i), NaNs skipped (std::max keeps its first argument), -inf for n = 0. Lane by
// lane like sum_in_double; the maximum of a set does not depend on the order it is taken in.
template <class F>
[[gnu::always_inline]] inline auto max_of(int64_t n, F f) {
  using T = decltype(f(0));
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, f(i));
  return m;
}

}  // namespace tg::kernels::TG_ISA_NS

namespace tg {
using kernels::TG_ISA_NS::max_of;
using kernels::TG_ISA_NS::sum_in_double;
using kernels::TG_ISA_NS::vec_erf;
using kernels::TG_ISA_NS::vec_exp;
}  // namespace tg
