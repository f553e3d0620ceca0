// Helpers for writing an op's sample cases (the inputs the generic gradcheck test runs).
#pragma once

#include <vector>

#include "../framework/random.h"
#include "../framework/registry.h"

namespace tg {

// A random tensor for a sample case, by default N(0, 1) and requiring grad.
inline Tensor sample_tensor(const Shape& shape, DType dtype, bool requires_grad = true) {
  Tensor t = randn(shape, dtype);
  if (requires_grad) t.requires_grad_();
  return t;
}

// Values in [low, high): for inputs that must stay away from a kink or a pole.
inline Tensor sample_uniform(const Shape& shape, DType dtype, double low, double high, bool requires_grad = true) {
  Tensor t = uniform(shape, low, high, dtype);
  if (requires_grad) t.requires_grad_();
  return t;
}

}  // namespace tg
