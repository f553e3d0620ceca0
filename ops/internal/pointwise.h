// Pointwise ops on tensors: the checks, the output and the dtype dispatch around the kernels of
// pointwise_kernels.h (which run on the active instruction set). Ops include this; users do not.
#pragma once

#include "../../framework/tensor.h"
#include "../pointwise_kernels.h"
#include "elementwise_kernel.h"

namespace tg {

// out = f(x) for a floating x; throws a tg::Error naming `op` for an undefined or int64 x.
inline Tensor pointwise_unary(const Tensor& x, kernels::Unary f, const char* op, kernels::PointwiseScalars s = {}) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  return dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    kernels::unary_pointwise<T>(f, s, x.data<T>(), out.data<T>(), x.shape(), x.strides(), out.strides());
    return out;
  });
}

// out = f(a, b), a and b broadcast together; of the same floating dtype (checked by the caller).
inline Tensor pointwise_binary(const Tensor& a, const Tensor& b, kernels::Binary f, const char* op,
                               kernels::PointwiseScalars s = {}) {
  return dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
    Tensor out = Tensor::empty(shape, a.dtype());
    const Tensor ea = a.detach().expand(shape), eb = b.detach().expand(shape);
    kernels::binary_pointwise<T>(f, s, ea.data<T>(), eb.data<T>(), out.data<T>(), shape, ea.strides(), eb.strides(),
                                 out.strides());
    return out;
  });
}

// The same for a formula given as a generic lambda of values (`[](auto v) { ... }`, instantiated
// for float and double): for the few ops whose formula has no kernel function. Compiled in the op's
// own file, such a loop runs at the baseline instruction set, so hot ops use the kernels above.
template <class F>
Tensor pointwise_unary(const Tensor& x, const char* op, F f) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  return dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T>(x, [&f](T v) { return static_cast<T>(f(v)); });
  });
}
template <class F>
Tensor pointwise_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  return dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(a, b, op, [&f](T x, T y) { return static_cast<T>(f(x, y)); });
  });
}

}  // namespace tg
