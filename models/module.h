// tg::Module: the base of every layer and model. A module owns named parameters and buffers
// and named child modules; names compose with dots exactly as PyTorch's state_dict does
// ("layers.0.linear1.weight"), so a checkpoint maps one to one onto a PyTorch model.
//
// Writing a model takes a few lines. Members are plain handles; register_* records them
// under a name and returns them, so one line declares and registers:
//
//   struct Net : tg::Module {
//     std::shared_ptr<tg::Linear> fc1 = add_module("fc1", std::make_shared<tg::Linear>(784, 128));
//     std::shared_ptr<tg::Linear> fc2 = add_module("fc2", std::make_shared<tg::Linear>(128, 10));
//     tg::Tensor forward(const tg::Tensor& x) override { return fc2->forward(tg::relu(fc1->forward(x))); }
//   };
//
// Parameters are tensor handles shared between the member and the registry; to(DType)
// converts them in place (the handle keeps its identity), so both stay in step.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../framework/state_dict.h"
#include "../framework/safetensors.h"
#include "../framework/tensor.h"

namespace tg {

// A layer's per-dim argument (kernel_size, stride, padding, ...) given as one integer for every
// dim or as a list, PyTorch's "int or tuple": Conv2d(3, 8, 3, 1, 1) and Conv2d(3, 8, {3, 5}).
struct IntOrList : IntList {
  IntOrList() = default;
  IntOrList(int64_t value) : IntList{value} {}  // NOLINT: implicit on purpose
  IntOrList(std::initializer_list<int64_t> values) : IntList(values) {}
  IntOrList(IntList values) : IntList(std::move(values)) {}  // NOLINT
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The type's name for messages ("Linear"); override in each layer.
  virtual std::string name() const { return "Module"; }

  // The single-tensor forward that Sequential chains. Modules with other signatures define
  // their own and declare this one private (`private: using Module::forward;`): calling it on
  // such a module is a compile error, and their forward does not hide it unawares (clang's
  // -Woverloaded-virtual). Through a Module& it throws.
  virtual Tensor forward(const Tensor& x);

  Tensor operator()(const Tensor& x) { return forward(x); }

  // Recursive views, in registration order: own entries first, then each child's (PyTorch's order).
  StateDict named_parameters() const;
  std::vector<Tensor> parameters() const;
  StateDict named_buffers() const;
  // Parameters and buffers of each module, then its children: PyTorch's state_dict order. The
  // registered tensors themselves (PyTorch returns detached aliases): change their values under
  // NoGradGuard.
  StateDict state_dict() const;
  // Copies values into the registered tensors through tg::load_state_dict (framework/safetensors.h):
  // shapes must match, floating values are converted to each tensor's dtype (PyTorch's
  // copy_ rule: a float32 checkpoint loads into a bfloat16 module); strict: every key of the module must be present and no other
  // key may be. On error nothing is copied; the report lists missing and unexpected keys.
  // Before the check, each module may complete the state with what PyTorch's modules infer
  // (complete_state below).
  LoadStateDictReport load_state_dict(const StateDict& state, bool strict = true);
  // Adds to `state` (a state dict being loaded into the whole model) entries this module's own
  // keys (`prefix` + name) lack but PyTorch's module would infer: BatchNorm's num_batches_tracked,
  // absent from dicts saved before it existed, loads as 0, as PyTorch loads a dict without
  // version metadata (a plain dict, a safetensors file). Nothing by default.
  virtual void complete_state(const std::string& prefix, StateDict& state) const;

  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  std::shared_ptr<Module> child(const std::string& name) const;  // throws when absent
  // This module ("") and every descendant under its dotted name ("encoder", "encoder.0", ...),
  // depth first in registration order, each module once (under its first name) even when it is
  // registered in several places: PyTorch's named_modules(). The pointers are owned by the tree.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn on every child's subtree (children first, recursively) and then on this module,
  // PyTorch's module.apply(fn); returns the module:
  //   net->apply([](tg::Module& m) { if (auto* l = dynamic_cast<tg::Linear*>(&m)) tg::init::zeros_(l->bias); });
  Module& apply(const std::function<void(Module&)>& fn);
  // Sets requires_grad on every parameter (false freezes the module: backward computes no
  // gradient for them and an optimizer skips them); returns the module.
  Module& requires_grad_(bool requires_grad = true);

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }

  int64_t num_parameters() const;  // elements, counted once per parameter
  // Converts every floating parameter and buffer to the floating `dtype` (float32, float64,
  // bfloat16, float16) in place, rounding to nearest even: the tensor handles held by members
  // stay valid. Integer buffers (counters, indices) keep their dtype. Gradients are converted too.
  // Returns the module, as PyTorch's module.to(dtype) does, so calls chain:
  //   net->to(tg::DType::BFloat16).train(false);
  Module& to(DType dtype);
  void zero_grad();  // drops the gradients (set_to_none, PyTorch 2's default)

 protected:
  // Registers and returns the tensor (a leaf; requires_grad set unless requires_grad is false).
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> add_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool params, bool buffers, StateDict& out) const;

  StateDict params_;
  StateDict buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tg
