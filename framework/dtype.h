// Element types. Float32 and Float64 are differentiable; Int64 holds indices and shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"

namespace tg {

enum class DType : uint8_t { Float32, Float64, Int64 };

inline size_t dtype_size(DType t) { return t == DType::Float32 ? 4 : 8; }
inline bool is_floating(DType t) { return t != DType::Int64; }
const char* dtype_name(DType t);  // "float32", "float64", "int64"

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };

template <class T> struct TypeTag { using type = T; };

// Calls fn(TypeTag<float>{}) or fn(TypeTag<double>{}) for a floating dtype, and throws a
// tg::Error naming `op` for any other. Inside: `using T = typename decltype(tag)::type;`.
template <class Fn>
decltype(auto) dispatch_floating(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    default: TG_ERROR(op, ": expected a floating dtype (float32 or float64), got ", dtype_name(t));
  }
}

// The same over all three dtypes.
template <class Fn>
decltype(auto) dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    default: return fn(TypeTag<int64_t>{});
  }
}

}  // namespace tg
