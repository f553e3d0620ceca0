#include "module.h"

#include <set>

#include "../framework/grad_mode.h"

namespace tg {

Tensor Module::forward(const Tensor&) {
  throw Error(name() + ".forward: this module has no single-tensor forward");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TG_CHECK(!name.empty() && name.find('.') == std::string::npos, this->name(), ": ", what,
           " name must be non-empty and contain no '.', got \"", name, "\"");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  TG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), this->name(), ": ", what,
           " name \"", name, "\" is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  TG_CHECK(t.defined(), this->name(), ": parameter \"", name, "\" is undefined");
  TG_CHECK(t.is_leaf(), this->name(), ": parameter \"", name,
           "\" must be a leaf tensor (detach it first)");
  if (requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  TG_CHECK(t.defined(), this->name(), ": buffer \"", name, "\" is undefined");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  TG_CHECK(m != nullptr, this->name(), ": module \"", name, "\" is null");
  TG_CHECK(m.get() != this, this->name(), ": a module cannot be its own child");
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& c : children_)
    if (c.first == name) return c.second;
  throw Error(this->name() + ": no child module named \"" + name + "\"");
}

void Module::collect(const std::string& prefix, bool params, bool buffers, StateDict& out) const {
  if (params)
    for (const auto& p : params_) out.emplace_back(prefix + p.first, p.second);
  if (buffers)
    for (const auto& b : buffers_) out.emplace_back(prefix + b.first, b.second);
  for (const auto& c : children_) c.second->collect(prefix + c.first + ".", params, buffers, out);
}

namespace {
// A tensor registered twice (weight tying) is listed once, under its first name, as PyTorch does.
StateDict unique(const StateDict& all) {
  std::set<const TensorImpl*> seen;
  StateDict out;
  for (const auto& e : all)
    if (seen.insert(e.second.impl()).second) out.push_back(e);
  return out;
}
}  // namespace

StateDict Module::named_parameters() const {
  StateDict all;
  collect("", true, false, all);
  return unique(all);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters()) out.push_back(p.second);
  return out;
}

StateDict Module::named_buffers() const {
  StateDict all;
  collect("", false, true, all);
  return unique(all);
}

StateDict Module::state_dict() const {
  StateDict all;
  collect("", true, true, all);
  return all;
}

void Module::complete_state(const std::string&, StateDict&) const {}

LoadStateDictReport Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict completed = state;
  for (const auto& [name, m] : named_modules()) m->complete_state(name.empty() ? name : name + ".", completed);
  return tg::load_state_dict(state_dict(), completed, strict);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  // An explicit stack, children pushed in reverse so that they come out in registration order.
  std::vector<std::pair<std::string, Module*>> stack = {{"", this}};
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    out.emplace_back(name, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(name.empty() ? it->first : name + "." + it->first, it->second.get());
  }
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  TG_CHECK(fn != nullptr, name(), ".apply: the function is empty");
  std::set<const Module*> seen;  // a child registered under two names is visited once (PyTorch's children())
  for (auto& c : children_)
    if (seen.insert(c.second.get()).second) c.second->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) {
  for (auto& p : named_parameters()) p.second.requires_grad_(requires_grad);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& p : named_parameters()) n += p.second.numel();
  return n;
}

namespace {
// Rewrites the tensor behind every handle: new storage of the new dtype, same shape.
void convert_in_place(const Tensor& t, DType dtype) {
  if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
  Tensor converted = t.detach().to(dtype).contiguous();
  TensorImpl* impl = t.impl();
  impl->storage = converted.impl()->storage;
  impl->strides = converted.strides();
  impl->offset = converted.offset();
  impl->dtype = dtype;
  // the gradient follows, as in PyTorch's Module.to (a gradient of the old dtype would meet the
  // new one's at the next accumulation)
  if (impl->grad) impl->grad = Tensor(impl->grad).detach().to(dtype).contiguous().impl_ptr();
}
}  // namespace

Module& Module::to(DType dtype) {
  TG_CHECK(is_floating(dtype), this->name(), ".to: expected a floating dtype, got ", dtype_name(dtype));
  for (auto& e : state_dict()) convert_in_place(e.second, dtype);
  return *this;
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.second.zero_grad();
}

}  // namespace tg
