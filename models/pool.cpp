#include "pool.h"

#include <utility>

namespace tg {

MaxPool2d::MaxPool2d(IntOrList k, IntOrList s, IntOrList p, IntOrList d, bool ceil)
    : kernel_size(std::move(k)), stride(std::move(s)), padding(std::move(p)), dilation(std::move(d)), ceil_mode(ceil) {}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode); }

AvgPool2d::AvgPool2d(IntOrList k, IntOrList s, IntOrList p, bool ceil, bool include_pad, std::optional<int64_t> divisor)
    : kernel_size(std::move(k)),
      stride(std::move(s)),
      padding(std::move(p)),
      ceil_mode(ceil),
      count_include_pad(include_pad),
      divisor_override(divisor) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

}  // namespace tg
