// softmax and log_softmax over one dim, numerically stable (the row maximum is subtracted).
#pragma once

#include "../framework/tensor.h"

namespace tg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Records log_softmax(x, dim) whose output y was computed already (by a fused kernel, say):
// returns y (sharing its storage) linked to x's history. log_softmax's backward reads only its
// output, so x's values are never read: x may be a history stand-in (BackwardContext::
// input_history). For a fused op's double backward.
Tensor log_softmax_from_output(const Tensor& x, const Tensor& y, int64_t dim);

// The raw kernels over a contiguous (outer, D, inner) layout; reductions in double.
template <class T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log);
// dx = y (g - sum_D g y)  for softmax;   dx = g - e^y sum_D g  for log_softmax (y = output).
template <class T>
void softmax_backward(const T* g, const T* y, T* dx, int64_t outer, int64_t D, int64_t inner, bool log);

}  // namespace tg
