// Group normalisation kernels; the shape legend and the maths are in group_norm_kernels.h.
//
// Work split. The natural unit is one group i = (n, g): its M elements are contiguous, so one
// thread computes its statistics and then normalises it while the group is still in cache.
// When there are fewer groups than threads (N = 1, group = 1 on a large image), each group is
// cut into fixed chunks of kChunk elements instead, partial sums are taken per chunk in parallel
// and combined in chunk order. Both paths add the very same partial sums in the same order, so
// which path runs (and how many threads there are) never changes a bit of the result.
//
// One copy of this file per instruction set (ops/internal/isa_dispatch.h; group_norm_dispatch.cpp
// holds the public entry points). The lanes below keep one order of summation on every path;
// only FMA contraction (AVX2 and AVX-512 copies) moves results by an ulp.
//
// 16-bit storage (BFloat16, Float16): every load widens to float exactly (load8/load16 below,
// load_op from ../internal/half_access.h) and every store rounds once (store_op; bfloat16 16 at a
// time on AVX-512). The forward's statistics are summed in float lanes over runs of 8 terms,
// then in double (float_lanes_sum), where float32's are summed in double lanes: within 1e-6 of
// the float32 kernel's mean and rstd, and 0.75x of the float32 forward's time instead of 1.0x
// (the widening of every element to double was the 16-bit forward's cost). Everything else is
// the float code unchanged, so outputs and gradients are within an ulp of the float32 kernel's
// on the widened input, rounded once (tests/test_half_kernels.cpp).
#include "group_norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "../internal/half_access.h"
#include "../internal/isa_dispatch.h"
#include "../internal/simd_width.h"

// The vector types below only pass between inlined helpers of this file, so GCC's note that
// their calling convention depends on the instruction set concerns no real call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace tg::kernels::TG_ISA_NS {
namespace {

// Reductions use 32 independent double accumulators ("lanes"): they break the chain of
// dependent adds (so the loop runs at full vector throughput) and fix the order of summation,
// whatever the alignment, the number of threads or the instruction set. The lanes are four
// blocks of 8 (D8), each held in registers of this copy's width (kSimdBytes: one AVX-512
// register, two AVX2 or four SSE ones) written with GCC/Clang vector extensions: unlike plain
// arrays, which the compiler spills to the stack for the final reduction (costly when it runs
// once per channel of an 8x8 image), they stay in registers; and unlike a 64-byte vector type,
// they are never split by the compiler through the stack on a narrower target. Element j of
// a range goes to block (j / 8) % 4, lane j % 8; the last n % 8 elements go to a scalar.
typedef double dv __attribute__((vector_size(kSimdBytes)));
typedef float fv __attribute__((vector_size(kSimdBytes)));
typedef float fh __attribute__((vector_size(kSimdBytes / 2)));  // as many floats as dv has doubles
constexpr int kD = kSimdBytes / 8;  // doubles per register
constexpr int kParts = 8 / kD;      // registers per block of 8 lanes

// A block of lanes held in Parts registers of vector type V (scalar S): D8 and F16 below.
template <class V, class S, int Parts>
struct LaneBlock {
  V p[Parts];
};
template <class V, class S, int Parts>
inline LaneBlock<V, S, Parts>& operator+=(LaneBlock<V, S, Parts>& a, const LaneBlock<V, S, Parts>& b) {
  for (int k = 0; k < Parts; ++k) a.p[k] += b.p[k];
  return a;
}
template <class V, class S, int Parts>
inline LaneBlock<V, S, Parts> operator+(LaneBlock<V, S, Parts> a, const LaneBlock<V, S, Parts>& b) {
  return a += b;
}
template <class V, class S, int Parts>
inline LaneBlock<V, S, Parts> operator-(LaneBlock<V, S, Parts> a, S m) {
  for (int k = 0; k < Parts; ++k) a.p[k] -= m;
  return a;
}
template <class V, class S, int Parts>
inline LaneBlock<V, S, Parts> operator*(LaneBlock<V, S, Parts> a, const LaneBlock<V, S, Parts>& b) {
  for (int k = 0; k < Parts; ++k) a.p[k] *= b.p[k];
  return a;
}

using D8 = LaneBlock<dv, double, kParts>;

inline D8 load8(const double* p) {
  D8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Lanes [Off, Off + kD) of a float register as doubles.
template <int Off, class V, int... I>
inline dv to_double(const V& v, std::integer_sequence<int, I...>) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, (Off + I)...), dv);
}
inline D8 load8(const float* p) {
  D8 v;
  for (int k = 0; k < kParts; ++k) {
    fh f;
    std::memcpy(&f, p + k * kD, sizeof f);
    v.p[k] = __builtin_convertvector(f, dv);
  }
  return v;
}

// n 16-bit values as floats (a loop the compiler turns into vector shifts/selects).
template <int n, class H>
inline void widen(const H* p, float* out) {
  for (int k = 0; k < n; ++k) out[k] = load_op(p, k);
}
// 16-bit storage: widened to float exactly, then as float (the same lanes, the same sums).
template <class H, class = std::enable_if_t<std::is_same_v<opmath_t<H>, float> && !std::is_same_v<H, float>>>
inline D8 load8(const H* p) {
  float f[8];
  widen<8>(p, f);
  return load8(f);
}

// bfloat16 is a float's top 16 bits: widening is a zero extension and a shift, written on
// vector types of this copy's width like the float loads (the float16 loads go through widen).
typedef uint16_t bq __attribute__((vector_size(kSimdBytes / 4)));  // kD bfloat16 patterns
typedef uint32_t uq __attribute__((vector_size(kSimdBytes / 2)));  // the same, 32 bits (fh's size)
inline D8 load8(const BFloat16* p) {
  D8 v;
#if defined(__AVX512F__)
  // GCC lowers the generic code below through 128-bit halves here: 12 instructions, not 4.
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  v.p[0] = reinterpret_cast<dv>(_mm512_cvtps_pd(_mm256_castsi256_ps(u)));
#else
  for (int k = 0; k < kParts; ++k) {
    bq h;
    std::memcpy(&h, p + k * kD, sizeof h);
    const uq u = __builtin_convertvector(h, uq) << 16;
    fh f;
    std::memcpy(&f, &u, sizeof f);
    v.p[k] = __builtin_convertvector(f, dv);
  }
#endif
  return v;
}

// The lanes of one register added by halving: lanes [0, n/2) + [n/2, n), and again.
template <class V, int... I>
inline auto half_sum(const V& v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, I...) +
         __builtin_shufflevector(v, v, (I + static_cast<int>(sizeof...(I)))...);
}
template <class V>
inline double fold(const V& v) {
  constexpr int n = sizeof(V) / sizeof(double);
  if constexpr (n == 2)
    return v[0] + v[1];
  else
    return fold(half_sum(v, std::make_integer_sequence<int, n / 2>{}));
}
// The 8 lanes of a block added by the same halving tree on every instruction set: lanes
// [0, 4) + [4, 8), then [0, 2) + [2, 4), then lane 0 + lane 1 (the first halvings add whole
// registers when a block spans several).
inline double fold(const D8& a) {
  dv p[kParts];
  for (int k = 0; k < kParts; ++k) p[k] = a.p[k];
  for (int n = kParts; n > 1; n /= 2)
    for (int k = 0; k < n / 2; ++k) p[k] += p[k + n / 2];
  return fold(p[0]);
}

// A fixed pairwise tree over the 32 lanes.
inline double reduce(const D8 (&a)[4]) { return fold((a[0] + a[1]) + (a[2] + a[3])); }

// Unit of the chunked reductions. Fixed (not derived from the thread count) for determinism.
constexpr int64_t kChunk = 16384;
// Below this many elements an OpenMP region costs more than it saves.
[[maybe_unused]] constexpr int64_t kParallelMin = 1 << 15;

// Elements of p[0..n) before the first 64-byte boundary (0 if p is not even T-aligned). The
// elementwise loops below run these few elements on their own so that the vector stores that
// follow are aligned: a vector store straddling two cache lines costs ~1.4x here, and malloc'd
// buffers are only 16-byte aligned. Every element is still computed by the same expression.
// Short rows (an 8x8 channel) are better off without the scalar head.
constexpr int64_t kPeelMin = 256;
template <class T>
int64_t head_to_align(const T* p, int64_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p) % 64;
  return a % sizeof(T) ? 0 : std::min<int64_t>(n, static_cast<int64_t>((64 - a) % 64 / sizeof(T)));
}

// Applies step(q, j) to the 8-element blocks of [0, n) -- j the block's first element, q the
// accumulator it feeds -- and returns where the scalar tail starts.
template <class Step>
inline int64_t for_blocks(int64_t n, Step step) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    step(0, j);
    step(1, j + 8);
    step(2, j + 16);
    step(3, j + 24);
  }
  for (int q = 0; j + 8 <= n; j += 8, ++q) step(q, j);
  return j;
}

// sum dy and sum dy * (x - m) over [0..n). Centring x before the product is what keeps
// grad_gamma and grad_x accurate when |mean| >> std.
template <class T>
void grad_sums_double_lanes(const T* dy, const T* x, int64_t n, double m, double* sdy, double* sdyx) {
  D8 a1[4] = {}, a2[4] = {};
  int64_t j = for_blocks(n, [&](int q, int64_t k) {
    const D8 g = load8(dy + k);
    a1[q] += g;
    a2[q] += g * (load8(x + k) - m);
  });
  double t1 = 0.0, t2 = 0.0;
  for (; j < n; ++j) {
    const double g = static_cast<double>(dy[j]);
    t1 += g;
    t2 += g * (static_cast<double>(x[j]) - m);
  }
  *sdy = reduce(a1) + t1;
  *sdyx = reduce(a2) + t2;
}

// The same sums for float inputs, with far fewer instructions: x - m is exact in float when x is
// within a factor 2 of the saved float mean m (and correctly rounded otherwise), 32 float lanes sum dy and dy * (x - m) over up to
// 4 steps (fused multiply-add: one rounding per step), and these short partial sums (at most 9
// terms per lane) are then added into double lanes. This keeps the sums within a few 1e-7 of
// exact (sum dy, which cancels most, is the worst), while converting every element to double
// cost more than the rest of the backward. Small images (8x8: two steps per channel) also
// need the cheap final reduction below.
// 16 float lanes (F16) in registers of this copy's width, as D8.
constexpr int kF = kSimdBytes / 4;  // floats per register
constexpr int kFParts = 16 / kF;    // registers per 16 lanes

using F16 = LaneBlock<fv, float, kFParts>;

inline F16 load16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class H>
inline F16 load16(const H* p) {
  float f[16];
  widen<16>(p, f);
  return load16(f);
}
typedef uint16_t bh __attribute__((vector_size(kSimdBytes / 2)));  // kF bfloat16 patterns
typedef uint32_t uf __attribute__((vector_size(kSimdBytes)));      // the same, 32 bits (fv's size)
inline F16 load16(const BFloat16* p) {
  F16 v;
#if defined(__AVX512F__)
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
  v.p[0] = reinterpret_cast<fv>(_mm512_castsi512_ps(u));
#else
  for (int f = 0; f < kFParts; ++f) {
    bh h;
    std::memcpy(&h, p + f * kF, sizeof h);
    const uf u = __builtin_convertvector(h, uf) << 16;
    std::memcpy(&v.p[f], &u, sizeof u);
  }
#endif
  return v;
}
// Elements [0, 32) of p as two blocks of 16 float lanes, for the sums below, which add the two
// blocks lane by lane: elements 0-15 and 16-31, or for bfloat16 on AVX-512 the even and the odd
// elements (bf16_even_odd: two instructions widen 32 values, where load16 takes two per 16).
// Which element goes to which lane changes the order of the sums, not their accuracy.
template <class T>
inline void load_pair(const T* p, F16* a, F16* b) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, BFloat16>) {
    bf16_even_odd(p, &a->p[0], &b->p[0]);
    return;
  }
#endif
  *a = load16(p);
  *b = load16(p + 16);
}

// Adds the 16 float lanes of v into the 16 double lanes a[0], a[1] (float lane i to double
// lane i: register f's halves are double registers 2f and 2f + 1 of the pair).
inline void add_to_double(D8 (&a)[2], const F16& v) {
  const auto half = std::make_integer_sequence<int, kD>{};
  for (int f = 0; f < kFParts; ++f) {
    const int lo = 2 * f, hi = 2 * f + 1;
    a[lo / kParts].p[lo % kParts] += to_double<0>(v.p[f], half);
    a[hi / kParts].p[hi % kParts] += to_double<kD>(v.p[f], half);
  }
}
// fold(s) and fold(t) with the shuffles shared by both sums.
template <class V>
inline void fold_pair(const V& s, const V& t, double* sa, double* sb) {
  constexpr int n = sizeof(V) / sizeof(double);
  if constexpr (n == 8) {
    // u = (s0+s4, s1+s5, s2+s6, s3+s7, t0+t4, t1+t5, t2+t6, t3+t7)
    const V u = __builtin_shufflevector(s, t, 0, 1, 2, 3, 8, 9, 10, 11) +
                __builtin_shufflevector(s, t, 4, 5, 6, 7, 12, 13, 14, 15);
    const V v = u + __builtin_shufflevector(u, u, 2, 3, 0, 1, 6, 7, 4, 5);
    *sa = v[0] + v[1];
    *sb = v[4] + v[5];
  } else if constexpr (n == 4) {
    const V u = __builtin_shufflevector(s, t, 0, 1, 4, 5) + __builtin_shufflevector(s, t, 2, 3, 6, 7);
    *sa = u[0] + u[1];
    *sb = u[2] + u[3];
  } else {
    *sa = fold(s);
    *sb = fold(t);
  }
}
// The 16 lanes of a and of b, each in reduce's tree, the two sums sharing their shuffles
// (this runs once per channel: an 8x8 image's backward feels it).
inline void reduce2(const D8 (&a)[2], const D8 (&b)[2], double* sa, double* sb) {
  D8 x = a[0] + a[1], y = b[0] + b[1];
  for (int n = kParts; n > 1; n /= 2)
    for (int k = 0; k < n / 2; ++k) {
      x.p[k] += x.p[k + n / 2];
      y.p[k] += y.p[k + n / 2];
    }
  fold_pair(x.p[0], y.p[0], sa, sb);
}

// For float and the 16-bit types (whose values widen exactly to float: the same sums as float).
template <class T>
void grad_sums_float_lanes(const T* dy, const T* x, int64_t n, double m, double* sdy, double* sdyx) {
  const float mf = static_cast<float>(m);  // exact: m is a float mean
  D8 a1[2] = {}, a2[2] = {};
  int64_t j = 0;
  while (j + 16 <= n) {
    F16 g1[2] = {}, g2[2] = {};  // float partials, two per sum for throughput
    for (int step = 0; step < 4 && j + 32 <= n; ++step, j += 32) {
      F16 g[2], xv[2];
      load_pair(dy + j, &g[0], &g[1]);
      load_pair(x + j, &xv[0], &xv[1]);
      for (int q = 0; q < 2; ++q) {
        g1[q] += g[q];
        g2[q] += g[q] * (xv[q] - mf);
      }
    }
    if (j + 32 > n && j + 16 <= n) {  // one last half step
      const F16 g = load16(dy + j);
      g1[0] += g;
      g2[0] += g * (load16(x + j) - mf);
      j += 16;
    }
    add_to_double(a1, g1[0] + g1[1]);
    add_to_double(a2, g2[0] + g2[1]);
  }
  double t1 = 0.0, t2 = 0.0;
  for (; j < n; ++j) {
    const double g = static_cast<double>(dy[j]);
    t1 += g;
    t2 += g * (static_cast<double>(x[j]) - m);
  }
  double r1, r2;
  reduce2(a1, a2, &r1, &r2);
  *sdy = r1 + t1;
  *sdyx = r2 + t2;
}

template <class T>
void grad_sums(const T* dy, const T* x, int64_t n, double m, double* sdy, double* sdyx) {
  if constexpr (std::is_same_v<opmath_t<T>, float>)
    grad_sums_float_lanes(dy, x, n, m, sdy, sdyx);
  else
    grad_sums_double_lanes(dy, x, n, m, sdy, sdyx);
}

// The forward's sums for the 16-bit types, as grad_sums_float_lanes: float partials over short
// runs (at most 4 steps of 32 elements, 8 terms per lane) added into 16 double lanes. A 16-bit
// value widens to float exactly, so each partial is within a few float ulps of exact and the
// statistics stay well inside float32 accuracy (PyTorch sums them in float); the double lanes of
// the float32 kernel cost one widening to double per element, which made the 16-bit forward no
// faster than float32's. pair(j, a, b) gives elements j .. j + 31 as two blocks of float lanes
// (load_pair), term(j) elements j .. j + 15, scalar(j) element j.
template <class Pair, class Term, class Scalar>
double float_lanes_sum(int64_t n, Pair pair, Term term, Scalar scalar) {
  D8 a[2] = {};
  int64_t j = 0;
  while (j + 16 <= n) {
    F16 g[2] = {};  // two partials for throughput
    for (int step = 0; step < 4 && j + 32 <= n; ++step, j += 32) {
      F16 u, v;
      pair(j, &u, &v);
      g[0] += u;
      g[1] += v;
    }
    if (j + 32 > n && j + 16 <= n) {  // one last half step
      g[0] += term(j);
      j += 16;
    }
    add_to_double(a, g[0] + g[1]);
  }
  double t = 0.0;
  for (; j < n; ++j) t += scalar(j);
  return fold(a[0] + a[1]) + t;
}

template <class T>
constexpr bool kSixteenBit = std::is_same_v<opmath_t<T>, float> && !std::is_same_v<T, float>;

// sum of x[0..n)
template <class T>
double sum_of(const T* x, int64_t n) {
  if constexpr (kSixteenBit<T>)
    return float_lanes_sum(n, [&](int64_t k, F16* u, F16* v) { load_pair(x + k, u, v); },
                           [&](int64_t k) { return load16(x + k); },
                           [&](int64_t k) { return static_cast<double>(static_cast<float>(x[k])); });
  D8 acc[4] = {};
  int64_t j = for_blocks(n, [&](int q, int64_t k) { acc[q] += load8(x + k); });
  double tail = 0.0;
  for (; j < n; ++j) tail += static_cast<double>(x[j]);
  return reduce(acc) + tail;
}

// sum (x - m)^2 over x[0..n): the second pass of the two-pass variance. With m accurate to
// double precision the usual compensation term (sum (x - m))^2 / n is below rounding level.
template <class T>
double centred_sq_sum(const T* x, int64_t n, double m) {
  if constexpr (kSixteenBit<T>) {
    const float mf = static_cast<float>(m);
    return float_lanes_sum(
        n,
        [&](int64_t k, F16* u, F16* v) {
          load_pair(x + k, u, v);
          const F16 du = *u - mf, dv = *v - mf;
          *u = du * du;
          *v = dv * dv;
        },
        [&](int64_t k) {
          const F16 d = load16(x + k) - mf;
          return d * d;
        },
        [&](int64_t k) {
          const double d = static_cast<double>(static_cast<float>(x[k])) - m;
          return d * d;
        });
  }
  D8 acc[4] = {};
  int64_t j = for_blocks(n, [&](int q, int64_t k) {
    const D8 d = load8(x + k) - m;
    acc[q] += d * d;
  });
  double tail = 0.0;
  for (; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    tail += d * d;
  }
  return reduce(acc) + tail;
}

// y = (x - mean) * rstd * gamma[c] + beta[c] over the elements [a, b) of group i.
// The double mean is split into mean_hi + mean_lo in T: x - mean_hi is exact (or exactly
// rounded) since x is close to the mean, so the whole expression runs in T, at full vector
// width, and still keeps the digits that PyTorch's float form scale * x + shift loses when
// |mean| >> std. (For T = double, mean_lo is 0.)
template <class T>
void normalize_range(const T* x, const T* gamma, const T* beta, int64_t G, int64_t HxW,
                     int64_t D, int64_t i, int64_t a, int64_t b, double mean, double rstd,
                     T* y) {
  using O = opmath_t<T>;  // T's arithmetic type (float for the 16-bit types)
  const int64_t base = i * D * HxW;  // groups are contiguous blocks of D * HxW elements
  const int64_t c0 = (i % G) * D;    // first channel of the group
  const O mean_hi = static_cast<O>(mean);
  const O mean_lo = static_cast<O>(mean - static_cast<double>(mean_hi));
  const T* xp = x + base;
  T* yp = y + base;
  int64_t j = a;
  while (j < b) {
    const int64_t cl = j / HxW;  // channel within the group
    const int64_t end = std::min(b, (cl + 1) * HxW);
    const O scale = static_cast<O>(rstd * (gamma ? static_cast<double>(gamma[c0 + cl]) : 1.0));
    const O shift = beta ? static_cast<O>(beta[c0 + cl]) : O(0);
    auto y_of = [&](int64_t k) {
      return ((load_op(xp, k) - mean_hi) - mean_lo) * scale + shift;
    };
    const int64_t h = end - j >= kPeelMin ? j + head_to_align(yp + j, end - j) : j;
    for (int64_t k = j; k < h; ++k) store_op(yp, k, y_of(k));
    int64_t k = h;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, BFloat16>) {
      // 16 at a time: the same expression on vectors (so the same contraction) and the same
      // rounding rule (float_to_bf16_x16, about half of what GCC makes of the scalar rule).
      const fv vh = fv{} + mean_hi, vl = fv{} + mean_lo, vs = fv{} + scale, vb = fv{} + shift;
      // 32 at a time as even and odd elements (bf16_even_odd): fewer widening and
      // narrowing instructions, the same expression per element.
      for (; k + 32 <= end; k += 32) {
        fv e, o;
        bf16_even_odd(xp + k, &e, &o);
        const fv ye = ((e - vh) - vl) * vs + vb;
        const fv yo = ((o - vh) - vl) * vs + vb;
        _mm512_storeu_si512(yp + k, float_to_bf16_even_odd_x32(reinterpret_cast<__m512>(ye), reinterpret_cast<__m512>(yo)));
      }
      for (; k + 16 <= end; k += 16) {
        const fv v = ((load16(xp + k).p[0] - vh) - vl) * vs + vb;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(yp + k), float_to_bf16_x16(reinterpret_cast<__m512>(v)));
      }
    }
#endif
#pragma omp simd
    for (int64_t kk = k; kk < end; ++kk) store_op(yp, kk, y_of(kk));
    j = end;
  }
}

// The biased variance, clamped at 0 (a no-op for two passes, kept as a guard). An empty
// group has variance 0/0 = NaN, as in PyTorch.
double rstd_of(double s2, int64_t M, double eps) {
  if (M == 0) return std::numeric_limits<double>::quiet_NaN();
  const double var = std::max(s2 / M, 0.0);
  return 1.0 / std::sqrt(var + eps);
}

}  // namespace

template <class T>
void group_norm_forward(const T* x, const T* gamma, const T* beta, int64_t N, int64_t C,
                        int64_t HxW, int64_t group, double eps, T* y, opmath_t<T>* mean,
                        opmath_t<T>* rstd) {
  using S = opmath_t<T>;  // the statistics' type
  const int64_t G = group, D = C / G, M = D * HxW, NG = N * G;
  if (NG == 0) return;
  const int64_t chunks = ceil_div(M, kChunk);
  [[maybe_unused]] const bool parallel = NG * M >= kParallelMin;

  if (NG >= max_threads() || chunks <= 1) {
    // One group per iteration: both passes and the normalisation reuse the cached group.
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < NG; ++i) {
      const T* xg = x + i * M;
      double s = 0.0;
      for (int64_t k = 0; k < chunks; ++k)
        s += sum_of(xg + k * kChunk, std::min(kChunk, M - k * kChunk));
      const double m = M > 0 ? s / M : 0.0;
      double s2 = 0.0;
      for (int64_t k = 0; k < chunks; ++k)
        s2 += centred_sq_sum(xg + k * kChunk, std::min(kChunk, M - k * kChunk), m);
      const double r = rstd_of(s2, M, eps);
      normalize_range(x, gamma, beta, G, HxW, D, i, 0, M, m, r, y);
      mean[i] = static_cast<S>(m);
      rstd[i] = static_cast<S>(r);
    }
    return;
  }

  // Few large groups: every pass is split into (group, chunk) work items.
  const int64_t W = NG * chunks;
  std::vector<double> p(W), m(NG), r(NG);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t w = 0; w < W; ++w) {
    const int64_t i = w / chunks, k = w % chunks;
    p[w] = sum_of(x + i * M + k * kChunk, std::min(kChunk, M - k * kChunk));
  }
  for (int64_t i = 0; i < NG; ++i) {
    double s = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s += p[i * chunks + k];
    m[i] = s / M;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t w = 0; w < W; ++w) {
    const int64_t i = w / chunks, k = w % chunks;
    p[w] = centred_sq_sum(x + i * M + k * kChunk, std::min(kChunk, M - k * kChunk), m[i]);
  }
  for (int64_t i = 0; i < NG; ++i) {
    double s2 = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s2 += p[i * chunks + k];
    r[i] = rstd_of(s2, M, eps);
    mean[i] = static_cast<S>(m[i]);
    rstd[i] = static_cast<S>(r[i]);
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t w = 0; w < W; ++w) {
    const int64_t i = w / chunks, k = w % chunks;
    normalize_range(x, gamma, beta, G, HxW, D, i, k * kChunk, std::min(M, (k + 1) * kChunk),
                    m[i], r[i], y);
  }
}

namespace {

// Per-(n, c) sums of the backward: db = sum_hw dy, ds = sum_hw dy * (x - mean), taken over
// the channel's HxW elements in chunks of kChunk, like the forward, so that the split path
// adds the same partials in the same order.
template <class T>
void channel_grad_sums(const T* dy, const T* x, int64_t HxW, double m, bool need_ds,
                       double* db, double* ds) {
  double sdb = 0.0, sds = 0.0;
  for (int64_t k = 0; k * kChunk < HxW; ++k) {
    const int64_t len = std::min(kChunk, HxW - k * kChunk);
    if (need_ds) {
      double a, b;
      grad_sums(dy + k * kChunk, x + k * kChunk, len, m, &a, &b);
      sdb += a;
      sds += b;
    } else {
      sdb += sum_of(dy + k * kChunk, len);
    }
  }
  *db = sdb;
  *ds = sds;
}

// grad_x = c1 * dy + c2 * (x - mean) + c3 over one channel's elements [a, b).
// x - mean is exact or nearly so in T (x and mean are close), so T arithmetic suffices here;
// the bracketing makes it a subtraction and two fused multiply-adds.
// O is T's arithmetic type (float for the 16-bit types).
template <class T, class O>
void input_grad_range(const T* dy, const T* x, int64_t a, int64_t b, O mean, O c1, O c2, O c3,
                      T* dx) {
  auto dx_of = [&](int64_t k) {
    return c1 * load_op(dy, k) + (c2 * (load_op(x, k) - mean) + c3);
  };
  const int64_t h = b - a >= kPeelMin ? a + head_to_align(dx + a, b - a) : a;
  for (int64_t k = a; k < h; ++k) store_op(dx, k, dx_of(k));
  int64_t k = h;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, BFloat16>) {  // as normalize_range: 16 at a time, the same bits
    const fv v1 = fv{} + c1, v2 = fv{} + c2, v3 = fv{} + c3, vm = fv{} + mean;
    for (; k + 32 <= b; k += 32) {  // as even and odd elements, as normalize_range
      fv ge, go, xe, xo;
      bf16_even_odd(dy + k, &ge, &go);
      bf16_even_odd(x + k, &xe, &xo);
      const fv ve = v1 * ge + (v2 * (xe - vm) + v3);
      const fv vo = v1 * go + (v2 * (xo - vm) + v3);
      _mm512_storeu_si512(dx + k, float_to_bf16_even_odd_x32(reinterpret_cast<__m512>(ve), reinterpret_cast<__m512>(vo)));
    }
    for (; k + 16 <= b; k += 16) {
      const fv v = v1 * load16(dy + k).p[0] + (v2 * (load16(x + k).p[0] - vm) + v3);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dx + k), float_to_bf16_x16(reinterpret_cast<__m512>(v)));
    }
  }
#endif
#pragma omp simd
  for (int64_t kk = k; kk < b; ++kk) store_op(dx, kk, dx_of(kk));
}

}  // namespace

template <class T>
void group_norm_backward(const T* grad_y, const T* x, const opmath_t<T>* mean,
                         const opmath_t<T>* rstd, const T* gamma, int64_t N, int64_t C,
                         int64_t HxW, int64_t group, T* grad_x, T* grad_gamma, T* grad_beta) {
  using O = opmath_t<T>;
  const int64_t G = group, D = C / G, M = D * HxW, NG = N * G;
  if (!grad_x && !grad_gamma && !grad_beta) return;
  const bool need_ds = grad_x || grad_gamma;  // grad_beta alone needs no x
  [[maybe_unused]] const bool parallel = NG * M >= kParallelMin;

  // db[n*C + c], ds[n*C + c]: the per-(n, c) sums shared by all three gradients.
  std::vector<double> db(N * C), ds(N * C);
  // dx coefficients of group i (see the header's formula, with A = sum gamma*db and
  // B = sum gamma*ds over the group's channels): c2 = -rstd^3 * B / M, c3 = -rstd * A / M.
  auto group_coeffs = [&](int64_t i, double* c2, double* c3) {
    const int64_t n = i / G, g = i % G;
    double A = 0.0, B = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t c = g * D + d;
      const double gm = gamma ? static_cast<double>(gamma[c]) : 1.0;
      A += gm * db[n * C + c];
      B += gm * ds[n * C + c];
    }
    const double r = static_cast<double>(rstd[i]);
    *c2 = -r * r * r * B / M;
    *c3 = -r * A / M;
  };
  auto c1_of = [&](int64_t i, int64_t c) {
    return static_cast<O>(static_cast<double>(rstd[i]) *
                          (gamma ? static_cast<double>(gamma[c]) : 1.0));
  };

  const int64_t chunks = ceil_div(HxW, kChunk);
  // (n, c, chunk) items give more parallelism than groups whenever a group has several
  // channels or chunks; both paths give the same bits, so pick by the thread count.
  if (NG >= max_threads() || N * C * chunks <= NG) {
    // One group per iteration: sums, then grad_x while the group is still in cache.
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < NG; ++i) {
      const int64_t n = i / G, g = i % G;
      const double m = static_cast<double>(mean[i]);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t nc = n * C + g * D + d;
        channel_grad_sums(grad_y + nc * HxW, x + nc * HxW, HxW, m, need_ds, &db[nc], &ds[nc]);
      }
      if (grad_x) {
        double c2, c3;
        group_coeffs(i, &c2, &c3);
        for (int64_t d = 0; d < D; ++d) {
          const int64_t nc = n * C + g * D + d;
          input_grad_range(grad_y + nc * HxW, x + nc * HxW, 0, HxW, mean[i], c1_of(i, g * D + d),
                           static_cast<O>(c2), static_cast<O>(c3), grad_x + nc * HxW);
        }
      }
    }
  } else {
    // Fewer groups than threads: (n, c, chunk) work items; partials combined in chunk order.
    const int64_t W = N * C * chunks;
    std::vector<double> pdb(W), pds(W);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t w = 0; w < W; ++w) {
      const int64_t nc = w / chunks, k = w % chunks;
      const int64_t i = nc / C * G + nc % C / D;
      const int64_t off = nc * HxW + k * kChunk, len = std::min(kChunk, HxW - k * kChunk);
      channel_grad_sums(grad_y + off, x + off, len, static_cast<double>(mean[i]), need_ds,
                        &pdb[w], &pds[w]);
    }
    for (int64_t nc = 0; nc < N * C; ++nc) {
      double sdb = 0.0, sds = 0.0;
      for (int64_t k = 0; k < chunks; ++k) {
        sdb += pdb[nc * chunks + k];
        sds += pds[nc * chunks + k];
      }
      db[nc] = sdb;
      ds[nc] = sds;
    }
    if (grad_x) {
      std::vector<O> c2(NG), c3(NG);
      for (int64_t i = 0; i < NG; ++i) {
        double a, b;
        group_coeffs(i, &a, &b);
        c2[i] = static_cast<O>(a);
        c3[i] = static_cast<O>(b);
      }
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t w = 0; w < W; ++w) {
        const int64_t nc = w / chunks, k = w % chunks;
        const int64_t i = nc / C * G + nc % C / D;
        const T* base_dy = grad_y + nc * HxW;
        input_grad_range(base_dy, x + nc * HxW, k * kChunk, std::min(HxW, (k + 1) * kChunk),
                         mean[i], c1_of(i, nc % C), c2[i], c3[i], grad_x + nc * HxW);
      }
    }
  }

  if (grad_gamma || grad_beta) {
    // grad_gamma[c] = sum_n ds[n, c] * rstd[n, g], grad_beta[c] = sum_n db[n, c]. Blocks of
    // channels own their outputs; within a block the sum over n runs in a fixed order, and the
    // innermost loop runs over the contiguous channels of one group.
    constexpr int64_t kCBlock = 256;
    const int64_t cblocks = ceil_div(C, kCBlock);
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t cb = 0; cb < cblocks; ++cb) {
      const int64_t c0 = cb * kCBlock, c1 = std::min(C, c0 + kCBlock);
      double sg[kCBlock] = {}, sb[kCBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t g = c0 / D; g * D < c1; ++g) {
          const double r = static_cast<double>(rstd[n * G + g]);
          const int64_t cs = std::max(c0, g * D), ce = std::min(c1, (g + 1) * D);
          const double* dsn = ds.data() + n * C;
          const double* dbn = db.data() + n * C;
          for (int64_t c = cs; c < ce; ++c) {
            sg[c - c0] += dsn[c] * r;
            sb[c - c0] += dbn[c];
          }
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        if (grad_gamma) grad_gamma[c] = static_cast<T>(sg[c - c0]);
        if (grad_beta) grad_beta[c] = static_cast<T>(sb[c - c0]);
      }
    }
  }
}

#define TG_INSTANTIATE(T)                                                                      \
  template void group_norm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      int64_t, double, T*, opmath_t<T>*, opmath_t<T>*);        \
  template void group_norm_backward<T>(const T*, const T*, const opmath_t<T>*,                 \
                                       const opmath_t<T>*, const T*, int64_t, int64_t, int64_t, \
                                       int64_t, T*, T*, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
