// PyTorch's unbatched inputs: an op defined on a batch (N, C, spatial...) also takes one sample
// (C, spatial...) and returns its result without the batch dim. The batch dim is added and
// removed with ordinary views (unsqueeze / squeeze), so the tape records those around the
// batched op and its backward needs nothing new.
#pragma once

#include <cstdint>

#include "../../framework/tensor.h"
#include "../reduce.h"  // ValuesIndices

namespace tg {

inline Tensor drop_batch_dim(const Tensor& t) { return t.squeeze(0); }
inline ValuesIndices drop_batch_dim(const ValuesIndices& r) {
  return {r.values.squeeze(0), r.indices.squeeze(0)};
}

// fn(batched input): called on `input` itself when it has batched_dims dims, on input with a
// batch dim of 1 added when it has one dim fewer (and its result's batch dim removed); any other
// rank is a tg::Error: "conv2d: expected a 3-D (unbatched) or 4-D (batched) input, got [5, 6]".
template <class Fn>
auto with_batch_dim(const char* op, const Tensor& input, int64_t batched_dims, Fn&& fn) {
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(input.dim() == batched_dims || input.dim() == batched_dims - 1, op, ": expected a ", batched_dims - 1,
           "-D (unbatched) or ", batched_dims, "-D (batched) input, got ", format_shape(input.shape()));
  if (input.dim() == batched_dims) return fn(input);
  return drop_batch_dim(fn(input.unsqueeze(0)));
}

}  // namespace tg
