// Masks and selection. A mask is an int64 tensor of 0/1 (int64 rather than a float so that it
// can never require grad or be mistaken for data). where and masked_fill accept an int64 or a
// floating condition: nonzero means true.
#pragma once

#include "../framework/tensor.h"

namespace tg {

// Comparisons (broadcast; same dtype on both sides). Not differentiable.
Tensor gt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);

// out = cond ? a : b, all three broadcast. Gradients flow to a where cond, to b elsewhere.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask is true; mask broadcasts to x's shape. The gradient is zero there.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, double value);  // in place (framework/inplace.h)

}  // namespace tg
