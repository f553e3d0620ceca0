// GroupNorm module over tg::group_norm, as torch.nn.GroupNorm: weight ones, bias zeros.
#pragma once

#include "module.h"

namespace tg {

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            DType dtype = DType::Float32);
  std::string name() const override { return "GroupNorm"; }
  Tensor forward(const Tensor& x) override;

  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;  // undefined without affine
};

}  // namespace tg
