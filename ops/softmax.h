// softmax and log_softmax over one dim, numerically stable (the row maximum is subtracted).
#pragma once

#include "../framework/tensor.h"
#include "softmax_kernels.h"

namespace tg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Records log_softmax(x, dim) whose output y was computed already (by a fused kernel, say):
// returns y (sharing its storage) linked to x's history. log_softmax's backward reads only its
// output, so x's values are never read: x may be a history stand-in (BackwardContext::
// input_history). For a fused op's double backward.
Tensor log_softmax_from_output(const Tensor& x, const Tensor& y, int64_t dim);

// The raw kernels over a contiguous (outer, D, inner) layout, reductions in double
// (softmax_kernels.h):
//   dx = y (g - sum_D g y)  for softmax;   dx = g - e^y sum_D g  for log_softmax (y = output).
using kernels::softmax_backward;
using kernels::softmax_forward;

}  // namespace tg
