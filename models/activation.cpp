#include "activation.h"

#include <utility>

#include "../ops/activation.h"

namespace tg {

GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {
  TG_CHECK(approximate == "none" || approximate == "tanh", "GELU: expected approximate to be 'none' or 'tanh', got '",
           approximate, "'");
}

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }

Tensor Flatten::forward(const Tensor& x) {
  TG_CHECK(x.defined(), "Flatten: expected a defined input");
  return x.flatten(start_dim, end_dim);
}

}  // namespace tg
