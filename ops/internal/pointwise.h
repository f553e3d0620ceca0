// Pointwise ops on tensors: the checks, the output and the dtype dispatch around the kernels of
// pointwise_kernels.h (which run on the active instruction set). Ops include this; users do not.
#pragma once

#include "../../framework/tensor.h"
#include "../pointwise_kernels.h"
#include "elementwise_kernel.h"
#include "reduced_float.h"

namespace tg {

// A bfloat16 or float16 operand is computed by the float32 kernels (widened, never recorded) and
// the result rounded once to its 16-bit dtype: PyTorch's CPU rule (internal/reduced_float.h). A
// native 16-bit kernel that converts in registers would save the two copies: a later speed job.

// out = f(x) for a floating x; throws a tg::Error naming `op` for an undefined or integer x.
inline Tensor pointwise_unary(const Tensor& x, kernels::Unary f, const char* op, kernels::PointwiseScalars s = {}) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  if (is_reduced_floating(x.dtype()))
    return round_result(pointwise_unary(detail::widen(x), f, op, s), x.dtype());
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
  if (is_reduced_floating(a.dtype()))
    return round_result(pointwise_binary(detail::widen(a), detail::widen(b), f, op, s), a.dtype());
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
// for float and double; a 16-bit tensor's values reach it as float, its result is rounded once):
// for the few ops whose formula has no kernel function. Compiled in the op's own file, such a
// loop runs at the baseline instruction set, so hot ops use the kernels above.
template <class F>
Tensor pointwise_unary(const Tensor& x, const char* op, F f) {
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  return dispatch_all_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T>(x, f);
  });
}
template <class F>
Tensor pointwise_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  return dispatch_all_floating(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(a, b, op, f);
  });
}

}  // namespace tg
