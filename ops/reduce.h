// Reductions over dims, with keepdim, as in PyTorch.
#pragma once

#include <vector>

#include "../framework/tensor.h"

namespace tg {

Tensor sum(const Tensor& x);  // all elements -> shape []
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Shared by reductions: `dims` wrapped, sorted and checked for duplicates (empty: all dims).
std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op);
// The output shape of a reduction over `dims`.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim);
// x viewed as a contiguous (outer, reduced) matrix: reduced dims moved last.
Tensor reduced_dims_last(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace tg
