#include "group_norm.h"

#include "../ops/group_norm/group_norm.h"

namespace tg {

GroupNorm::GroupNorm(int64_t num_groups_, int64_t num_channels_, double eps_, bool affine, DType dtype)
    : num_groups(num_groups_), num_channels(num_channels_), eps(eps_) {
  TG_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "GroupNorm: expected num_channels (",
           num_channels, ") to be a positive multiple of num_groups (", num_groups, ")");
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}, dtype));
    bias = register_parameter("bias", zeros({num_channels}, dtype));
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, eps); }

}  // namespace tg
