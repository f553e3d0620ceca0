// The two 16-bit floating types, bfloat16 and IEEE float16, as storage types: a value is held as
// its 16 bits and converts to and from float implicitly, so `float y = x;` and `x = 2.0f * y;`
// read and round as expected. There are no 16-bit arithmetic operators on purpose: arithmetic on
// these types happens in float32 (as PyTorch's CPU kernels do) and rounds once, when stored.
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits: float32's range, 3 significant digits.
//   float16:  1 sign, 5 exponent, 10 mantissa bits: largest finite 65504, subnormals from 2^-24.
//
// float -> 16 bits rounds to nearest, ties to even. Too large for float16 gives inf (as PyTorch).
// NaN stays NaN of the same sign, keeping as much of its payload as fits, so every one of the
// 65,536 patterns of either type survives a round trip through float32 bit for bit (a signalling
// NaN is not quieted: the conversions are integer operations, not the FPU's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace tg {

namespace half_bits {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// The conversions below compute every case and select the answer (no branches), in integer
// arithmetic (a floating-point operation that might trap is never executed speculatively by the
// compiler), so that a loop converting an array (the 16-bit kernels' loads and stores)
// vectorises.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  // Round to nearest even at bit 16: add just under half, plus one when the kept part is odd.
  // The largest floats carry into the exponent and give inf, which is the right answer.
  // NaN: truncate instead, keeping the top of the payload, and never become inf: set a mantissa
  // bit (0x40 of the result) if none is left.
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t add = nan ? 0u : 0x7fffu + ((u >> 16) & 1u);
  const uint32_t quiet = nan && (u & 0x7f0000u) == 0 ? 0x400000u : 0u;
  return static_cast<uint16_t>(((u | quiet) + add) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t bits = h & 0x7fffu;  // exponent and mantissa
  const uint32_t exponent = bits >> 10;
  const uint32_t normal = (bits << 13) + 0x38000000u;     // rebias 15 -> 127
  const uint32_t inf_nan = (bits << 13) | 0x7f800000u;    // exponent 0x1f: inf, NaN (payload kept)
  // Zero and subnormals (bits is the mantissa m there): m * 2^-24, a float32 normal. m is shifted
  // left by n until its leading 1 reaches bit 10 (a binary search: shifts of 5, 3, 2, 1), which
  // makes the value 1.f * 2^(-14 - n).
  uint32_t m = bits & 0x3ffu, n = 0;
  const uint32_t s5 = m < 0x40u ? 5u : 0u;
  m <<= s5;
  const uint32_t s3 = m < 0x100u ? 3u : 0u;
  m <<= s3;
  const uint32_t s2 = m < 0x200u ? 2u : 0u;
  m <<= s2;
  const uint32_t s1 = m < 0x400u ? 1u : 0u;
  m <<= s1;
  n = s5 + s3 + s2 + s1;
  const uint32_t small = bits == 0 ? 0u : ((113u - n) << 23) | ((m & 0x3ffu) << 13);
  const uint32_t r = exponent == 0 ? small : (exponent == 0x1fu ? inf_nan : normal);
  return bits_float(sign | r);
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // NaN: keep the top of the payload (a quiet bit if none is left)
  const uint32_t payload = (a >> 13) & 0x3ffu;
  const uint32_t nan = 0x7c00u | (payload ? payload : 0x200u);
  // normal in float16 (>= 2^-14): round to nearest even at bit 13, rebias (wraps harmlessly,
  // and is not selected, below 2^-14)
  const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
  // Subnormal or zero (|f| < 2^-14): |f| / 2^-24, float16's smallest step, is m * 2^-s with m
  // the 24-bit significand and s = 126 - exponent (>= 14), rounded to nearest even; the result
  // is the float16 pattern (0x400, the smallest normal, when it rounds up to 2^-14). A float
  // subnormal (no implicit bit) or anything below 2^-26 gets s = 31 and rounds to 0.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | (e ? 0x800000u : 0u);
  const uint32_t s_raw = 126u - (e < 112u ? e : 112u);  // only lanes with e <= 112 are selected
  const uint32_t s = s_raw < 31u ? s_raw : 31u;
  const uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  const uint32_t small = q + ((rem > half ? 1u : 0u) | (rem == half ? (q & 1u) : 0u));
  // The selection as masks (GCC does not vectorise it as a chain of ?:).
  auto pick = [](bool c, uint32_t yes, uint32_t no) {
    const uint32_t mask = 0u - static_cast<uint32_t>(c);
    return (yes & mask) | (no & ~mask);
  };
  uint32_t r = pick(a >= 0x38800000u, normal, small);
  r = pick(a >= 0x477ff000u, 0x7c00u, r);  // >= 65520 rounds to inf
  r = pick(a > 0x7f800000u, nan, r);
  return static_cast<uint16_t>(sign | r);
}

}  // namespace half_bits

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(half_bits::float_to_bf16(f)) {}  // NOLINT: implicit, as a float is
  operator float() const { return half_bits::bf16_to_float(bits); }  // NOLINT
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 x;
    x.bits = b;
    return x;
  }
};

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  Float16(float f) : bits(half_bits::float_to_fp16(f)) {}  // NOLINT
  operator float() const { return half_bits::fp16_to_float(bits); }  // NOLINT
  static Float16 from_bits(uint16_t b) {
    Float16 x;
    x.bits = b;
    return x;
  }
};

// The type arithmetic on T happens in: float for the 16-bit types, T itself otherwise.
template <class T> struct OpMath { using type = T; };
template <> struct OpMath<BFloat16> { using type = float; };
template <> struct OpMath<Float16> { using type = float; };
template <class T> using opmath_t = typename OpMath<T>::type;

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2, "16-bit types must be 2 bytes");

// The next value of T toward -inf (std::nextafter for float and double; the 16-bit types step
// their sign-and-magnitude bits). For finite v.
template <class T>
T next_below(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {
    const uint16_t b = v.bits;
    return T::from_bits((b & 0x7fff) == 0 ? uint16_t(0x8001) : (b & 0x8000) ? uint16_t(b + 1) : uint16_t(b - 1));
  }
}

}  // namespace tg
