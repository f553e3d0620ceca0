// The differentiable views and copies behind Tensor's methods (view, permute, narrow, expand,
// contiguous, to, ...), and sum_to, the one helper that reduces a broadcast gradient back to
// its input's shape.
#pragma once

#include <vector>

#include "registry.h"
#include "tensor.h"

namespace tg {

// Sums `grad` over the dims that broadcasting added or stretched, giving `shape`.
// Deterministic: a fixed summation order whatever the thread count.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// The OpDefs of the view ops, for the registry (ops/registry.cpp adds them).
const std::vector<const OpDef*>& view_op_defs();

}  // namespace tg
