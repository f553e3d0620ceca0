// Joining and splitting tensors, and free-function forms of the Tensor view methods (so that
// code reads as PyTorch's: tg::reshape(x, {2, -1}), tg::cat({a, b}, 1)).
#pragma once

#include <vector>

#include "../framework/tensor.h"

namespace tg {

// Concatenates along an existing dim; all shapes equal except along dim. As PyTorch's: the
// tensors are converted to their promoted dtype (framework/dtype.h), and a 1-D tensor of size 0
// (the legacy empty tensor) is skipped whatever the others' shape.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins along a new dim (all shapes equal).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of consecutive pieces of split_size along dim (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Views with the given sizes along dim (they must sum to the dim's size).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// At most `chunks` views of ceil(size / chunks) along dim, as torch.chunk (an empty dim gives
// `chunks` empty views, at most 2^20 of them).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

inline Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
inline Tensor view(const Tensor& x, const Shape& shape) { return x.view(shape); }
inline Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) { return x.permute(dims); }
inline Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) { return x.transpose(dim0, dim1); }
inline Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return x.narrow(dim, start, length);
}
inline Tensor expand(const Tensor& x, const Shape& shape) { return x.expand(shape); }
inline Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1) {
  return x.flatten(start_dim, end_dim);
}
inline Tensor squeeze(const Tensor& x, int64_t dim) { return x.squeeze(dim); }
inline Tensor unsqueeze(const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }
inline Tensor select(const Tensor& x, int64_t dim, int64_t index) { return x.select(dim, index); }

}  // namespace tg
