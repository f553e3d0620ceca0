// Helpers for writing an op's sample cases (the inputs the generic gradcheck test runs).
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include "../../framework/random.h"
#include "../../framework/registry.h"

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

// Values of both signs with |x| in [0.1, 1) (every other element negated): for ops with a kink
// at 0 (relu, abs, leaky_relu), so that no finite-difference step crosses it.
inline Tensor sample_away_from_zero(const Shape& shape, DType dtype, bool requires_grad = true) {
  Tensor x = uniform(shape, 0.1, 1.0, DType::Float64);
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); i += 2) p[i] = -p[i];
  Tensor t = x.to(dtype);
  if (requires_grad) t.requires_grad_();
  return t;
}

// Distinct values 0.25 apart in a random order: for ops whose derivative jumps at a tie (max,
// min), so that no finite-difference step reorders them.
inline Tensor sample_distinct(const Shape& shape, DType dtype, bool requires_grad = true) {
  Tensor keys = randn(shape, DType::Float64);
  const int64_t n = keys.numel();
  const double* k = keys.data<double>();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [k](int64_t a, int64_t b) { return k[a] < k[b]; });
  std::vector<double> values(n);
  for (int64_t r = 0; r < n; ++r) values[order[r]] = 0.25 * (static_cast<double>(r) - 0.5 * (n - 1));
  Tensor t = from_vector(values, shape).to(dtype);
  if (requires_grad) t.requires_grad_();
  return t;
}

}  // namespace tg
