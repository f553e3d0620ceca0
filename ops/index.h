// Indexing by int64 index tensors, as torch.index_select and torch.gather. Every index is
// checked against the indexed dim's size before any element is read.
#pragma once

#include "../framework/tensor.h"

namespace tg {

// out = x with dim `dim` replaced by index's length: out[..., i, ...] = x[..., index[i], ...].
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out has index's shape: out[i][j][k] = x[i][index[i][j][k]][k] (dim = 1). index has x's number
// of dims and index.size(d) <= x.size(d) for d != dim.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// zeros(shape) with src added at index along dim (index and src contiguous-able, same shape,
// indices already checked). The backward of gather and of max/min over a dim. Recorded when
// src requires grad (under create_graph): its gradient is gather(grad, dim, index).
// Deterministic without atomics: the same bits at any thread count.
Tensor scatter_add_along(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace tg
