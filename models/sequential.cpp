#include "sequential.h"

#include "../ops/activation.h"

namespace tg {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  TG_CHECK(i < layers_.size(), name(), ": index ", i, " is out of range for ", layers_.size(), " modules");
  return layers_[i];
}

MLP::MLP(const std::vector<int64_t>& sizes, DType dtype, Generator* gen) {
  TG_CHECK(sizes.size() >= 2, "MLP: expected at least 2 sizes (input and output), got ", sizes.size());
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1], true, dtype, gen));
    if (i + 2 < sizes.size()) push_back(std::make_shared<ReLU>());
  }
}

}  // namespace tg
