// Pooling layers with PyTorch's names, argument order and defaults: MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d. Sizes are an int or a list (IntOrList: MaxPool2d(2) or MaxPool2d({2, 3})). No parameters; each forwards to the functional op of ops/pool/pool.h, which
// checks the arguments (so a bad kernel size is reported at the first forward, as in PyTorch).
#pragma once

#include <initializer_list>
#include <optional>

#include "../ops/pool/pool.h"
#include "module.h"

namespace tg {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(IntOrList kernel_size, IntOrList stride = {}, IntOrList padding = {0}, IntOrList dilation = {1},
                     bool ceil_mode = false);
  // MaxPool2d({2, 3}): without it the braces could also build a MaxPool2d(2, 3) to copy (ambiguous).
  explicit MaxPool2d(std::initializer_list<int64_t> kernel_size) : MaxPool2d(IntOrList(kernel_size)) {}
  std::string name() const override { return "MaxPool2d"; }
  Tensor forward(const Tensor& x) override;

  IntList kernel_size, stride, padding, dilation;  // stride {}: the kernel size
  bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(IntOrList kernel_size, IntOrList stride = {}, IntOrList padding = {0}, bool ceil_mode = false,
                     bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  explicit AvgPool2d(std::initializer_list<int64_t> kernel_size) : AvgPool2d(IntOrList(kernel_size)) {}  // as MaxPool2d's
  std::string name() const override { return "AvgPool2d"; }
  Tensor forward(const Tensor& x) override;

  IntList kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(IntOrList output_size) : output_size(std::move(output_size)) {}
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  Tensor forward(const Tensor& x) override;

  IntList output_size;
};

}  // namespace tg
