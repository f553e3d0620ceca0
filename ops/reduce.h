// Reductions over dims, with keepdim, as in PyTorch.
#pragma once

#include <vector>

#include "../framework/tensor.h"

namespace tg {

Tensor sum(const Tensor& x);  // all elements -> shape []
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Values and int64 indices of a max/min over one dim (the first occurrence; NaN counts as
// the extreme, as in PyTorch).
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements; the gradient is shared evenly by ties
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmin(const Tensor& x);

// Variance sum((x - mean)^2) / (R - correction) over dims (empty: all); correction 1 is the
// unbiased estimator, 0 the population variance.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);

// Shared by reductions: `dims` wrapped, sorted and checked for duplicates (empty: all dims).
std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op);
// The output shape of a reduction over `dims`.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim);
// x viewed as a contiguous (outer, reduced) matrix: reduced dims moved last.
Tensor reduced_dims_last(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace tg
