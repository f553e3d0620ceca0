// Math modes: whether float32 matrix products and convolutions may compute with 16-bit operands
// (bf16 or fp16 products, float32 sums) to run on the CPU's 16-bit units, as PyTorch's
// torch.set_float32_matmul_precision and the convolution specification's cubeMathType allow.
//
// The setting is thread-local (each thread starts at Highest, like grad mode) and read by an op
// when it runs, forward or backward. It changes only float32 matmul, bmm, linear and the
// convolutions; 16-bit tensors always compute in their own dtype, float64 in float64.
//
//   Float32Math  operands of a float32 product         relative error of one product
//   Float32      float32 (the default)                   float32 rounding
//   BFloat16x3   x = hi + lo, two bf16 each; hi*hi +      about 2^-16 of |x||y| per product
//                hi*lo + lo*hi (three bf16 products)
//   BFloat16     bf16(x) * bf16(y)                        2^-8 of |x||y| per product
//   Float16      fp16(x) * fp16(y) (fp16's range!)       2^-11 of |x||y| (values > 65504 are inf)
//
// Sums are float32 in every mode.
#pragma once

#include <cstdint>
#include <optional>

namespace tg {

enum class Float32Math { Float32, BFloat16x3, BFloat16, Float16 };

// PyTorch's names: "highest" = Float32, "high" = BFloat16x3, "medium" = BFloat16.
enum class MathPrecision { Highest, High, Medium };

// The convolution specification's cubeMathType (its int8 values), and what each means here:
//   KeepDtype (0)              Float32
//   AllowFp32DownPrecision (1) BFloat16 (the fastest reduced mode this CPU has)
//   UseFp16 (2)                Float16
//   UseHf32 (3)                BFloat16x3 (HF32 keeps 11 significant bits; bf16x3 at least as many)
enum class CubeMathType : int8_t { KeepDtype = 0, AllowFp32DownPrecision = 1, UseFp16 = 2, UseHf32 = 3 };

Float32Math to_float32_math(MathPrecision p);
Float32Math to_float32_math(CubeMathType t);  // throws tg::Error for a value outside 0..3

// The calling thread's mode.
Float32Math float32_math();
void set_float32_math(Float32Math m);
void set_float32_math_precision(MathPrecision p);
MathPrecision float32_math_precision();  // High for BFloat16x3, Medium for BFloat16 or Float16

// An op's mode: the explicit one if given (e.g. convolution_backward's cubeMathType), else the
// thread's.
inline Float32Math float32_math_or(const std::optional<CubeMathType>& explicit_type);

const char* float32_math_name(Float32Math m);  // "float32", "bf16x3", "bf16", "fp16"

// Sets the calling thread's mode for a scope and restores the previous one.
class Float32MathGuard {
 public:
  explicit Float32MathGuard(Float32Math m) : previous_(float32_math()) { set_float32_math(m); }
  explicit Float32MathGuard(MathPrecision p) : Float32MathGuard(to_float32_math(p)) {}
  ~Float32MathGuard() { set_float32_math(previous_); }
  Float32MathGuard(const Float32MathGuard&) = delete;
  Float32MathGuard& operator=(const Float32MathGuard&) = delete;

 private:
  Float32Math previous_;
};

inline Float32Math float32_math_or(const std::optional<CubeMathType>& explicit_type) {
  return explicit_type ? to_float32_math(*explicit_type) : float32_math();
}

}  // namespace tg
