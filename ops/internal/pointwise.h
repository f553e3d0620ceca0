// Helpers for pointwise ops written as a generic lambda of values: `[](auto v) { ... }` is
// instantiated for float and double by the dtype dispatch, so each op states its formula once.
// Ops include this; users do not.
#pragma once

#include "../../framework/tensor.h"
#include "elementwise_kernel.h"

namespace tg {

// out = f(x) for a floating x; throws a tg::Error naming `op` for an undefined or int64 x.
template <class F>
Tensor pointwise_unary(const Tensor& x, const char* op, F f) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  return dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T>(x, [&f](T v) { return static_cast<T>(f(v)); });
  });
}

// out = f(a, b), broadcast; a and b of the same floating dtype (checked by the caller).
template <class F>
Tensor pointwise_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  return dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(a, b, op, [&f](T x, T y) { return static_cast<T>(f(x, y)); });
  });
}

}  // namespace tg
