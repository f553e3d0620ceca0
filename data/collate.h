// Collating: how the samples of one batch (each a few tensors) become the batch.
#pragma once

#include <functional>
#include <vector>

#include "../framework/tensor.h"

namespace tg::data {

// Turns the samples of one batch into the batch.
using Collate = std::function<std::vector<Tensor>(const std::vector<std::vector<Tensor>>& samples)>;

// Field k of the batch is field k of every sample stacked along a new dim 0 (copied, contiguous,
// the samples' dtype): samples of {image [1, 28, 28], label []} give {[B, 1, 28, 28], [B]}.
// Every sample must have the same number of fields, and field k the same shape and dtype in
// every sample; a mismatch is a tg::Error naming the field and both shapes.
std::vector<Tensor> default_collate(const std::vector<std::vector<Tensor>>& samples);

}  // namespace tg::data
