// Embedding lookup, as torch.nn.functional.embedding.
#pragma once

#include <optional>

#include "../framework/tensor.h"

namespace tg {

// weight (num, dim), indices int64 of any shape -> (*indices.shape, dim). The row padding_idx
// (negative counts from the end) receives no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace tg
