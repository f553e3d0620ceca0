// Element types. The floating ones are differentiable: float32 and float64, and the 16-bit
// bfloat16 and float16, which are storage types whose arithmetic happens in float32
// (framework/half.h). int64 and int32 hold indices and shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "check.h"
#include "half.h"

namespace tg {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Float16, Int32 };

size_t dtype_size(DType t);  // bytes per element
const char* dtype_name(DType t);  // "float32", "float64", "int64", "bfloat16", "float16", "int32"
inline bool is_floating(DType t) { return t != DType::Int64 && t != DType::Int32; }
// bfloat16 and float16: the types whose ops compute in float32 and round once at the output.
inline bool is_reduced_floating(DType t) { return t == DType::BFloat16 || t == DType::Float16; }
// The dtype a binary op of a and b computes in and returns, by PyTorch's rules: floating beats
// integer, the wider of two of a kind wins, and bfloat16 with float16 meet in float32.
DType promote_types(DType a, DType b);
// Whether the value v, truncated towards zero, lies in integer dtype t's range (always true for
// a floating t): what a fill or a scalar operand of an integer tensor needs, since converting
// a double out of range (or NaN) to an integer is undefined behaviour.
bool fits_integer_range(DType t, double v);
// Whether a finite v lies within floating dtype t's finite range (always true for an integer t,
// Inf and NaN): what PyTorch's fill_ and masked_fill check ("cannot be converted ... without
// overflow"); arithmetic with such a scalar overflows to Inf instead, as PyTorch's.
bool fits_floating_range(DType t, double v);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<Float16> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };

template <class T> struct TypeTag { using type = T; };

// Calls fn(TypeTag<float>{}) or fn(TypeTag<double>{}) for float32 or float64, and throws a
// tg::Error naming `op` for any other dtype. Inside: `using T = typename decltype(tag)::type;`.
// Ops whose kernels also take 16-bit tensors dispatch those before reaching here.
template <class Fn>
decltype(auto) dispatch_floating(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    default: TG_ERROR(op, ": expected a floating dtype (float32 or float64), got ", dtype_name(t));
  }
}

// The same over all four floating dtypes, the 16-bit ones included (TypeTag<BFloat16> and
// TypeTag<Float16>): for code whose arithmetic reads and writes T through float.
template <class Fn>
decltype(auto) dispatch_all_floating(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::BFloat16: return fn(TypeTag<BFloat16>{});
    case DType::Float16: return fn(TypeTag<Float16>{});
    default: return dispatch_floating(t, op, std::forward<Fn>(fn));
  }
}

// The same over every dtype.
template <class Fn>
decltype(auto) dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::BFloat16: return fn(TypeTag<BFloat16>{});
    case DType::Float16: return fn(TypeTag<Float16>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    default: return fn(TypeTag<int64_t>{});
  }
}

}  // namespace tg
