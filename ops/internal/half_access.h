// Reading and writing elements of T = float, double, BFloat16 or Float16 in T's arithmetic type
// opmath_t<T> (float for the 16-bit types): a 16-bit value widens exactly, a result rounds once
// (framework/half.h). For float and double these are plain loads and stores.
//
// The 16-bit cases work on the raw bits with half_bits:: (branch-free integer code), so that a
// kernel loop using them vectorises: converting through the storage structs' own operators
// makes GCC copy each struct through a temporary, which it does not vectorise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "isa_dispatch.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tg::kernels::TG_ISA_NS {

template <class T>
inline opmath_t<T> load_op(const T* p, int64_t k) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return half_bits::bf16_to_float(reinterpret_cast<const uint16_t*>(p)[k]);
  else if constexpr (std::is_same_v<T, Float16>)
    return half_bits::fp16_to_float(reinterpret_cast<const uint16_t*>(p)[k]);
  else
    return p[k];
}

template <class T>
inline void store_op(T* p, int64_t k, opmath_t<T> v) {
  if constexpr (std::is_same_v<T, BFloat16>)
    reinterpret_cast<uint16_t*>(p)[k] = half_bits::float_to_bf16(v);
  else if constexpr (std::is_same_v<T, Float16>)
    reinterpret_cast<uint16_t*>(p)[k] = half_bits::float_to_fp16(v);
  else
    p[k] = v;
}

// 2 * lanes consecutive bfloat16 values split into their even elements (0, 2, ...) and odd ones
// (1, 3, ...) as two float vectors of type Vec (any GCC float vector, __m512 included), exactly:
// a 32-bit word holds an even element in its low half and the next odd one in its high half, so
// a shift left by 16 and a mask of the low half widen both, two instructions for 2 * lanes values
// where zero-extending loads take four. A kernel computes on the two vectors as on any others
// (the same expression per element, the same bits) and interleaves or rounds them back
// (float_to_bf16_even_odd_x32).
template <class Vec>
inline void bf16_even_odd(const BFloat16* p, Vec* even, Vec* odd) {
  typedef uint32_t Words __attribute__((vector_size(sizeof(Vec))));
  Words u;
  std::memcpy(&u, p, sizeof u);
  *even = reinterpret_cast<Vec>(u << 16);
  *odd = reinterpret_cast<Vec>(u & 0xffff0000u);
}

#if defined(__AVX512F__)
// 16 floats rounded to bfloat16 with exactly half_bits::float_to_bf16's rule (nearest even on
// the raw bits, so subnormals round like any other value; NaN truncated and kept a NaN). The
// NaN fix-up runs only when a lane is NaN: without it the rounding is 5 vector operations and
// a narrowing, about half of what GCC makes of the scalar rule's selects. (AVX512-BF16's
// vcvtneps2bf16 would be one instruction but flushes subnormals, and the default path on Intel
// CPUs is the plain AVX-512 one.)
//
// bf16_in_high_words leaves each lane's bfloat16 in its high 16 bits, without the NaN fix-up
// (the callers check for NaN first); float_to_bf16_x16 narrows 16 lanes, float_to_bf16_x32
// packs two registers' high words into one (a word permute instead of two shifts and
// narrowings, and one NaN test for both).
inline __m512i bf16_in_high_words(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}

inline __m256i float_to_bf16_x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  __m512i r = bf16_in_high_words(v);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan) {
    const __mmask16 no_mantissa = _mm512_mask_testn_epi32_mask(nan, u, _mm512_set1_epi32(0x7f0000));
    r = _mm512_mask_mov_epi32(r, nan, u);
    r = _mm512_mask_or_epi32(r, no_mantissa, r, _mm512_set1_epi32(0x400000));
  }
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

// The way back: 32 bfloat16 values from the even and odd elements' floats, each rounded by
// float_to_bf16_x16's rule; the odd element's rounded high half and the even one's shifted down
// make each word (no narrowing shuffles; one NaN test for both, as float_to_bf16_x32).
inline __m512i float_to_bf16_even_odd_x32(__m512 even, __m512 odd) {
  if (_mm512_cmp_ps_mask(even, odd, _CMP_UNORD_Q)) {  // a NaN in either: the lane-wise rule
    const __m512i e = _mm512_cvtepu16_epi32(float_to_bf16_x16(even));
    return _mm512_or_si512(e, _mm512_slli_epi32(_mm512_cvtepu16_epi32(float_to_bf16_x16(odd)), 16));
  }
  return _mm512_or_si512(_mm512_and_si512(bf16_in_high_words(odd), _mm512_set1_epi32(static_cast<int>(0xffff0000u))),
                         _mm512_srli_epi32(bf16_in_high_words(even), 16));
}

// 32 floats (lo's 16, then hi's) rounded as float_to_bf16_x16 rounds them, in one register.
inline __m512i float_to_bf16_x32(__m512 lo, __m512 hi) {
  if (_mm512_cmp_ps_mask(lo, hi, _CMP_UNORD_Q))  // a NaN in either: the lane-wise rule
    return _mm512_inserti64x4(_mm512_castsi256_si512(float_to_bf16_x16(lo)), float_to_bf16_x16(hi), 1);
  // Word k of the result is word 2k + 1 (a lane's high half) of lo:hi taken as 64 words.
  alignas(64) static constexpr uint16_t kHighWords[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                          23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                          45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(bf16_in_high_words(lo), _mm512_load_si512(kHighWords), bf16_in_high_words(hi));
}
#endif

// A row of n values in T's arithmetic type stored as T: each rounded once for the 16-bit types.
// A vectorised loop, whatever the including file's optimisation pragmas (it is defined before
// them), for the kernels that accumulate 16-bit results in float32 and round them at the end.
// (bfloat16 32 and then 16 at a time on AVX-512: float_to_bf16_x32 / _x16, the same rule and
// bits, a fraction of the instructions of GCC's vectorisation of the scalar rule.)
template <class T>
inline void store_row(const opmath_t<T>* src, int64_t n, T* dst) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, BFloat16>) {
    for (; j + 32 <= n; j += 32)
      _mm512_storeu_si512(dst + j, float_to_bf16_x32(_mm512_loadu_ps(src + j), _mm512_loadu_ps(src + j + 16)));
    if (j + 16 <= n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), float_to_bf16_x16(_mm512_loadu_ps(src + j)));
      j += 16;
    }
  }
#endif
#pragma omp simd
  for (int64_t k = j; k < n; ++k) store_op(dst, k, src[k]);
}

// A row of n values of T widened to T's arithmetic type (exact).
template <class T>
inline void load_row(const T* src, int64_t n, opmath_t<T>* dst) {
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) dst[k] = load_op(src, k);
}

// n values of S widened to T = opmath_t<S> (widen_all), or T rounded to S (round_all), whole
// arrays, in parallel blocks (each element has one writer, so any split gives the same bits).
template <class S, class T>
void widen_all(const S* from, int64_t n, T* to) {
  constexpr int64_t kBlockElems = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= 4 * kBlockElems)
  for (int64_t b = 0; b < ceil_div(n, kBlockElems); ++b)
    load_row(from + b * kBlockElems, std::min(kBlockElems, n - b * kBlockElems), to + b * kBlockElems);
}
template <class T, class S>
void round_all(const T* from, int64_t n, S* to) {
  constexpr int64_t kBlockElems = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= 4 * kBlockElems)
  for (int64_t b = 0; b < ceil_div(n, kBlockElems); ++b)
    store_row(from + b * kBlockElems, std::min(kBlockElems, n - b * kBlockElems), to + b * kBlockElems);
}

}  // namespace tg::kernels::TG_ISA_NS
