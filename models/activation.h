// The parameterless layers with PyTorch's names and defaults: the activations GELU, Sigmoid,
// Tanh, SiLU, LeakyReLU (ReLU is in sequential.h) and Flatten. Each forwards to its
// functional op (ops/activation.h, Tensor::flatten), which checks the arguments.
#pragma once

#include <string>

#include "module.h"

namespace tg {

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");  // "none" (erf) or "tanh"
  std::string name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override;

  std::string approximate;
};

class Sigmoid : public Module {
 public:
  std::string name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  std::string name() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override;
};

class SiLU : public Module {
 public:
  std::string name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  std::string name() const override { return "LeakyReLU"; }
  Tensor forward(const Tensor& x) override;

  double negative_slope;
};

// Flattens dims start_dim..end_dim into one (a view when the input's strides allow, as
// torch.nn.Flatten); the default keeps the batch dim: (N, C, H, W) -> (N, C * H * W).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  std::string name() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override;

  int64_t start_dim, end_dim;
};

}  // namespace tg
