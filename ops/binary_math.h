// Pointwise math of two tensors, as torch.maximum / torch.minimum / torch.pow(tensor, tensor):
// PyTorch's broadcasting and type promotion (tg::result_type; each gradient in its input's
// dtype), integer operands computed in integers. (+ - * / are in elementwise.h, pow with a
// number in unary.h.)
#pragma once

#include "../framework/tensor.h"

namespace tg {

// The larger (smaller) of a and b; NaN if either is NaN. The gradient goes to the input that
// wins, half to each on a tie (PyTorch's rule).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// self ^ exponent. d/dself = exponent self^(exponent - 1) (0 where exponent == 0); d/dexponent
// = self^exponent log(self) (0 where self == 0 and exponent >= 0), as PyTorch. Integers: exact
// (wrapping on overflow); a negative exponent gives 1 / self^-exponent truncated toward zero
// (0 but for self = +-1), as PyTorch's tensor exponents (its scalar ones, and pow(x, double)
// here, refuse them).
Tensor pow(const Tensor& self, const Tensor& exponent);

}  // namespace tg
