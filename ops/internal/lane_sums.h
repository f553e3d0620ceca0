// Sums in double over fixed lanes, for the kernel files (*_kernels*.cpp) only: every function
// here lives in the instruction set's namespace (ops/internal/isa_dispatch.h).
//
// A plain `s += f(i)` loop is one chain of dependent additions (each waits ~4 cycles for the
// one before), and `omp simd reduction` makes the order depend on the vector width. Here the
// elements go to 32 double lanes, four 8-wide vectors (GCC/Clang vector extensions, which
// stay in registers): element j of [0, n) goes to vector (j / 8) % 4, lane j % 8, the last
// n % 8 elements to a scalar tail, and the lanes are added up in a fixed pairwise tree. So the
// order of summation depends on n alone: not on the thread count, the alignment or the
// instruction set (only a product the compiler fuses into an FMA on AVX2 / AVX-512 can round
// differently), and there are 4 x (8 / vector width) independent chains.
//
// A term is written once, as a generic lambda of a loader `at`: at(p) is the element of the
// array p at the current position, an 8-wide double vector in the body and a double in the
// tail, so the same expression serves both:
//
//   const double s = lane_sum(n, [=](auto at) { auto d = at(x) - m; return d * d; });
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "isa_dispatch.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

// The 64-byte vectors only pass between inlined helpers, so GCC's note that their calling
// convention differs without AVX-512 concerns no real call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace tg::kernels::TG_ISA_NS::lanes {

typedef double d8 __attribute__((vector_size(64)));
typedef float f8 __attribute__((vector_size(32)));

inline d8 load8(const double* p) {
  d8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// 8 floats widened to doubles. Spelled with intrinsics where there are vector registers of
// 4 or 8 doubles: GCC 12 lowers __builtin_convertvector of a loaded f8 into half-width
// conversions and shuffles (5 instructions for AVX-512's one vcvtps2pd).
inline d8 load8(const float* p) {
#if defined(__AVX512F__)
  return (d8)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#elif defined(__AVX__)
  const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(p)), hi = _mm256_cvtps_pd(_mm_loadu_ps(p + 4));
  d8 v;
  std::memcpy(&v, &lo, sizeof lo);
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
  return v;
#else
  f8 v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, d8);
#endif
}

// The loaders: element j of an array, as an 8-wide vector (Block) or a double (Scalar).
struct Block {
  int64_t j;
  template <class T>
  d8 operator()(const T* p) const { return load8(p + j); }
};
struct Scalar {
  int64_t j;
  template <class T>
  double operator()(const T* p) const { return static_cast<double>(p[j]); }
};

// The fixed pairwise tree over the 32 lanes.
inline double reduce(const d8 (&a)[4]) {
  const d8 s = (a[0] + a[1]) + (a[2] + a[3]);
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// K sums at once over [0, n): f(at, acc) adds its K terms into acc[0..K) (d8 or double).
template <int K, class F>
[[gnu::always_inline]] inline std::array<double, K> lane_sums(int64_t n, F f) {
  d8 acc[4][K] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int q = 0; q < 4; ++q) f(Block{j + 8 * q}, acc[q]);
  for (int q = 0; j + 8 <= n; j += 8, ++q) f(Block{j}, acc[q]);
  double tail[K] = {};
  for (; j < n; ++j) f(Scalar{j}, tail);
  std::array<double, K> out;
  for (int k = 0; k < K; ++k) {
    const d8 v[4] = {acc[0][k], acc[1][k], acc[2][k], acc[3][k]};
    out[k] = reduce(v) + tail[k];
  }
  return out;
}

// One sum: f(at) returns the term.
template <class F>
[[gnu::always_inline]] inline double lane_sum(int64_t n, F f) {
  return lane_sums<1>(n, [&f](auto at, auto* acc) { acc[0] += f(at); })[0];
}

}  // namespace tg::kernels::TG_ISA_NS::lanes
