// Dropout: zeroes each element with probability p and scales the rest by 1/(1-p) in training;
// the identity (the input itself) in evaluation.
#pragma once

#include "../framework/random.h"
#include "../framework/tensor.h"

namespace tg {

// The mask is drawn serially from `gen` (the default generator when null), so the same seed
// gives the same mask whatever the thread count.
Tensor dropout(const Tensor& x, double p, bool train, Generator* gen = nullptr);

}  // namespace tg
