// The loops behind elementwise ops: a unary map and a broadcasting binary map, both over
// tensors of any strides, in parallel for large outputs. Ops include this; users do not.
#pragma once

#include <type_traits>

#include "../../framework/strided_loop.h"
#include "../../framework/tensor.h"

namespace tg {

// f receives opmath_t<T> values (float for bfloat16 and float16, T otherwise) and its result is
// rounded to T once, when stored: a 16-bit map computes in float32 as PyTorch's CPU kernels do.

// out = f(x), same dtype, contiguous output.
template <class T, class F>
Tensor map_unary(const Tensor& x, F f_math) {
  using M = opmath_t<T>;
  auto f = [&f_math](T v) { return static_cast<T>(f_math(static_cast<M>(v))); };
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  T* o = out.data<T>();
  const T* p = x.data<T>();
  for_each_row<2>(x.shape(), {out.strides(), x.strides()},
                  [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                    T* orow = o + off[0];
                    const T* xrow = p + off[1];
                    if (st[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(xrow[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(xrow[i * st[1]]);
                    }
                  });
  return out;
}

// out = f(a, b) with a and b broadcast together; both of dtype T.
template <class T, class F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f_math) {
  using M = opmath_t<T>;
  auto f = [&f_math](T x, T y) { return static_cast<T>(f_math(static_cast<M>(x), static_cast<M>(y))); };
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, a.dtype());
  Tensor ea = a.detach().expand(shape), eb = b.detach().expand(shape);
  T* o = out.data<T>();
  const T* pa = ea.data<T>();
  const T* pb = eb.data<T>();
  for_each_row<3>(shape, {out.strides(), ea.strides(), eb.strides()},
                  [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
                    T* orow = o + off[0];
                    const T* ra = pa + off[1];
                    const T* rb = pb + off[2];
                    // The common layouts get loops the compiler can vectorise.
                    if (st[1] == 1 && st[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(ra[i], rb[i]);
                    } else if (st[1] == 1 && st[2] == 0) {
                      const T s = *rb;
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(ra[i], s);
                    } else if (st[1] == 0 && st[2] == 1) {
                      const T s = *ra;
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(s, rb[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) orow[i] = f(ra[i * st[1]], rb[i * st[2]]);
                    }
                  });
  return out;
}

// PyTorch's type promotion for the elementwise binary ops: both operands in result_type(a, b)
// (bfloat16 + float32 -> float32, int64 + float32 -> float32, bfloat16 + float16 -> float32,
// int32 + int64 -> int64; a 0-dim operand only by category: float32 [3] + float64 [] is float32).
// The cast is a recorded `to`, an entry of its own on the tape whose backward casts the gradient
// back, so each input's gradient arrives in that input's dtype. Operands of one dtype pass
// through untouched (no copy, no entry). `recorded` false casts without recording, for ops whose
// output is not differentiable (the comparisons).
struct PromotedOperands {
  Tensor a, b;
};
inline PromotedOperands promote_operands(const Tensor& a, const Tensor& b, const char* op, bool recorded = true) {
  TG_CHECK(a.defined() && b.defined(), op, ": expected two defined tensors");
  if (a.dtype() == b.dtype()) return {a, b};
  const DType t = result_type(a, b);
  if (!recorded) return {detail::convert(a, t), detail::convert(b, t)};
  return {a.to(t), b.to(t)};
}

// Integer operands (which never require grad): f on their values as unsigned integers, so that
// an overflow wraps around as PyTorch's does (two's complement) instead of being undefined
// behaviour; the result in their (common) integer dtype.
template <class F>
Tensor integer_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using U = std::make_unsigned_t<T>;
    return map_binary<T>(a.detach(), b.detach(), op,
                         [f](T x, T y) { return static_cast<T>(f(static_cast<U>(x), static_cast<U>(y))); });
  };
  TG_CHECK(a.dtype() == b.dtype() && !is_floating(a.dtype()), op, ": expected two integer operands of one dtype");
  if (a.dtype() == DType::Int32) return run(TypeTag<int32_t>{});
  return run(TypeTag<int64_t>{});
}

// Validation shared by binary ops: both defined, same floating dtype.
inline void check_binary_operands(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.defined() && b.defined(), op, ": expected two defined tensors");
  TG_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", dtype_name(a.dtype()),
           " and ", dtype_name(b.dtype()));
  TG_CHECK(is_floating(a.dtype()), op, ": expected floating operands, got ", dtype_name(a.dtype()));
}

}  // namespace tg
