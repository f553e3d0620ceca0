#include "linear.h"

#include <cmath>

#include "../ops/matmul.h"
#include "init.h"

namespace tg {

Linear::Linear(int64_t in, int64_t out, bool with_bias, DType dtype, Generator* gen)
    : in_features(in), out_features(out) {
  TG_CHECK(in > 0 && out > 0, "Linear: expected positive in_features and out_features, got ", in, " and ", out);
  TG_CHECK(is_floating(dtype), "Linear: expected a floating dtype, got ", dtype_name(dtype));
  weight = register_parameter("weight", Tensor::empty({out, in}, dtype));
  if (with_bias) bias = register_parameter("bias", Tensor::empty({out}, dtype));
  reset_parameters(gen);
}

void Linear::reset_parameters(Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  TG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features, "Linear: expected input with last dim ",
           in_features, ", got shape ", describe_shape(x));
  return linear(x, weight, bias);
}

}  // namespace tg
