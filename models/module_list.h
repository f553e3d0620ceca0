// ModuleList: PyTorch's nn.ModuleList, a list of child modules named "0", "1", ... so that their
// parameters appear as "layers.0.linear1.weight". It has no forward of its own (Sequential,
// in sequential.h, is the list that chains single-tensor forwards). It is typed: a stack of
// layers whose forward takes other arguments than one tensor is called without a cast.
//
//     auto layers = add_module("layers", std::make_shared<tg::ModuleList<EncoderLayer>>());
//     for (int i = 0; i < 6; ++i) layers->append(std::make_shared<EncoderLayer>(...));
//     for (auto& layer : *layers) x = layer->forward(x, pos, mask);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../framework/check.h"
#include "module.h"

namespace tg {

template <class M = Module>
class ModuleList : public Module {
 public:
  std::string name() const override { return "ModuleList"; }

  // Appends under the next index as its name; returns the module.
  template <class Derived>
  std::shared_ptr<Derived> append(std::shared_ptr<Derived> m) {
    TG_CHECK(m != nullptr, "ModuleList::append: expected a module, got a null pointer");
    add_child(std::to_string(items_.size()), m);
    items_.push_back(m);
    return m;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::shared_ptr<M>& operator[](size_t i) const {
    TG_CHECK(i < items_.size(), "ModuleList: index ", i, " out of range for a list of ", items_.size(), " modules");
    return items_[i];
  }
  typename std::vector<std::shared_ptr<M>>::const_iterator begin() const { return items_.begin(); }
  typename std::vector<std::shared_ptr<M>>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace tg
