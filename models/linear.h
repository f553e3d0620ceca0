// Linear: y = x W^T + b, with weight (out_features, in_features) and bias (out_features).
#pragma once

#include "../framework/random.h"
#include "module.h"

namespace tg {

class Linear : public Module {
 public:
  // PyTorch's default init: weight kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)),
  // and bias U(-1/sqrt(in), 1/sqrt(in)).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::Float32,
         Generator* gen = nullptr);
  std::string name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator* gen = nullptr);

  int64_t in_features, out_features;
  Tensor weight;
  Tensor bias;  // undefined when built without bias
};

}  // namespace tg
