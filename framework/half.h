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

#include <cstdint>
#include <cstring>

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

// The conversions below compute every case and select the answer (no branches), so that a loop
// converting an array (the 16-bit kernels' loads and stores) vectorises.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  // Round to nearest even at bit 16: add just under half, plus one when the kept part is odd.
  // The largest floats carry into the exponent and give inf, which is the right answer.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // NaN: keep the top of the payload; never become inf (set a mantissa bit if none is left).
  const uint32_t top = u >> 16;
  const uint32_t nan = top | ((top & 0x7fu) == 0 ? 0x40u : 0u);
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t bits = h & 0x7fffu;  // exponent and mantissa
  const uint32_t exponent = bits >> 10;
  const uint32_t normal = (bits << 13) + 0x38000000u;     // rebias 15 -> 127
  const uint32_t inf_nan = (bits << 13) | 0x7f800000u;    // exponent 0x1f: inf, NaN (payload kept)
  // zero and subnormals: mantissa * 2^-24, exact in float32 (bits is the mantissa there)
  const uint32_t small = float_bits(static_cast<float>(static_cast<int32_t>(bits)) * 5.9604644775390625e-8f);
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
  // Subnormal or zero: 0.5f has a unit in the last place of 2^-24, float16's smallest step, so
  // adding it lets the FPU round |f| to a multiple of 2^-24 (ties to even); the low bits are then
  // the float16 pattern (0x400, the smallest normal, when it rounds up to 2^-14).
  const uint32_t small = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  uint32_t r = a >= 0x38800000u ? normal : small;
  r = a >= 0x477ff000u ? 0x7c00u : r;  // >= 65520 rounds to inf
  r = a > 0x7f800000u ? nan : r;
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

}  // namespace tg
