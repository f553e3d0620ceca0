// Containers and the simplest layers: ReLU, Sequential (children named "0", "1", ...), and
// MLP, a Sequential of Linear layers with a ReLU between each pair.
#pragma once

#include <memory>
#include <vector>

#include "linear.h"
#include "module.h"

namespace tg {

class ReLU : public Module {
 public:
  std::string name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  std::string name() const override { return "Sequential"; }
  // Appends under the next index as its name; returns the module.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    add_child(std::to_string(layers_.size()), m);
    layers_.push_back(m);
    return m;
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// sizes {784, 256, 10}: Linear(784, 256), ReLU, Linear(256, 10). No activation after the last
// Linear (it produces logits). State dict names: "0.weight", "0.bias", "2.weight", ...
class MLP : public Sequential {
 public:
  explicit MLP(const std::vector<int64_t>& sizes, DType dtype = DType::Float32, Generator* gen = nullptr);
  std::string name() const override { return "MLP"; }
};

}  // namespace tg
