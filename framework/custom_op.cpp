#include "custom_op.h"

#include <algorithm>

#include <unordered_set>

#include "grad_mode.h"
#include "tape.h"

namespace tg {

namespace detail {

// One user op. Shared by the CustomOp handles and by every tape entry the op recorded, so it
// outlives all of them. Not copyable: op.name and friends point into the strings beside it.
struct CustomOpDef {
  std::string name;
  std::string backward_name;
  std::string inputs_joined;  // "x, weight", as OpDef::inputs is written
  std::vector<std::string> input_names;
  CustomForwardFn forward;
  CustomBackwardFn backward;
  OpDef op{};

  CustomOpDef() = default;
  CustomOpDef(const CustomOpDef&) = delete;
  CustomOpDef& operator=(const CustomOpDef&) = delete;
};

// What one call leaves on its tape entry (Node attrs): the definition, kept alive by the entry,
// and what backward needs besides the saved tensors, which the entry keeps itself.
struct CustomCall {
  std::shared_ptr<const CustomOpDef> def;
  std::vector<std::string> saved_names;  // per slot; "" for save_for_backward
  std::vector<bool> saved_defined;       // per slot
  std::map<std::string, std::any> values;
  int num_outputs = 0;
  std::vector<int> recorded_outputs;  // the user's output index of each recorded output
};

struct CustomOpAccess {
  static std::vector<Tensor> backward(const BackwardContext& ctx, const std::vector<Tensor>& grad_outputs);
};

}  // namespace detail

namespace {

// input 1 ("weight")
std::string input_label(const detail::CustomOpDef& def, size_t i) {
  return "input " + std::to_string(i) + " (\"" + def.input_names.at(i) + "\")";
}

}  // namespace

// ---------------------------------------------------------------------------------------
// FunctionContext

const std::string& FunctionContext::op_name() const { return def_->name; }
int FunctionContext::num_inputs() const { return static_cast<int>(def_->input_names.size()); }

const std::string& FunctionContext::input_name(int input) const {
  TG_CHECK(input >= 0 && input < num_inputs(), op_name(), ": input ", input, " is out of range for an op with ",
           num_inputs(), " inputs (", def_->inputs_joined, ")");
  return def_->input_names[input];
}

int FunctionContext::input_index(const std::string& name) const {
  for (size_t i = 0; i < def_->input_names.size(); ++i)
    if (def_->input_names[i] == name) return static_cast<int>(i);
  TG_ERROR(op_name(), ": no input named \"", name, "\" (the inputs are ", def_->inputs_joined, ")");
}

bool FunctionContext::needs_input_grad(int input) const {
  input_name(input);  // range check
  if (backward_) return backward_->needs_grad(input);
  return recorder_ != nullptr && recorder_->needs_grad(input);
}

bool FunctionContext::needs_input_grad(const std::string& input_name) const {
  return needs_input_grad(input_index(input_name));
}

const Shape& FunctionContext::input_shape(int input) const {
  input_name(input);
  if (backward_) return backward_->input_shape(input);
  const Tensor& t = (*inputs_)[input];
  TG_CHECK(t.defined(), op_name(), ": input_shape: ", input_label(*def_, input), " is undefined");
  return t.shape();
}

DType FunctionContext::input_dtype(int input) const {
  input_name(input);
  if (backward_) return backward_->input_dtype(input);
  const Tensor& t = (*inputs_)[input];
  TG_CHECK(t.defined(), op_name(), ": input_dtype: ", input_label(*def_, input), " is undefined");
  return t.dtype();
}

void FunctionContext::check_forward(const char* what) const {
  TG_CHECK(!backward_, op_name(), " backward: ctx.", what, " is for forward");
}

void FunctionContext::check_backward(const char* what) const {
  TG_CHECK(backward_, op_name(), " forward: ctx.", what, " is for backward (the tensors are saved after forward returns)");
}

void FunctionContext::save(const std::string& name, const Tensor& t) {
  check_forward("save");
  TG_CHECK(!name.empty(), op_name(), " forward: ctx.save needs a name (or use save_for_backward)");
  for (const std::string& n : call_->saved_names)
    TG_CHECK(n != name, op_name(), " forward: a tensor named \"", name, "\" was already saved");
  call_->saved_names.push_back(name);
  call_->saved_defined.push_back(t.defined());
  to_save_.push_back(t);
}

void FunctionContext::save_for_backward(const std::vector<Tensor>& tensors) {
  check_forward("save_for_backward");
  for (const Tensor& t : tensors) {
    call_->saved_names.push_back("");
    call_->saved_defined.push_back(t.defined());
    to_save_.push_back(t);
  }
}

Tensor FunctionContext::saved(int slot) const {
  check_backward("saved");
  TG_CHECK(slot >= 0 && slot < static_cast<int>(call_->saved_names.size()), op_name(), " backward: no saved tensor in slot ",
           slot, " (forward saved ", call_->saved_names.size(), ")");
  static const Tensor undefined;
  if (!call_->saved_defined[slot]) return undefined;
  try {
    return backward_->saved(slot);
  } catch (const Error& e) {
    const std::string& name = call_->saved_names[slot];
    throw Error(op_name() + " backward: saved tensor " +
                (name.empty() ? std::to_string(slot) : "\"" + name + "\"") + ": " + e.what());
  }
}

Tensor FunctionContext::saved(const std::string& name) const {
  check_backward("saved");
  for (size_t i = 0; i < call_->saved_names.size(); ++i)
    if (call_->saved_names[i] == name) return saved(static_cast<int>(i));
  std::string names;
  for (const std::string& n : call_->saved_names)
    if (!n.empty()) names += (names.empty() ? "\"" : ", \"") + n + "\"";
  TG_ERROR(op_name(), " backward: no tensor was saved as \"", name, "\" (saved by name: ",
           names.empty() ? "none" : names, ")");
}

std::vector<Tensor> FunctionContext::saved_tensors() const {
  check_backward("saved_tensors");
  std::vector<Tensor> out;
  for (size_t i = 0; i < call_->saved_names.size(); ++i) out.push_back(saved(static_cast<int>(i)));
  return out;
}

void FunctionContext::set_any(const std::string& key, std::any value) {
  check_forward("set");
  call_->values[key] = std::move(value);
}

bool FunctionContext::has(const std::string& key) const { return call_->values.count(key) != 0; }

const std::any& FunctionContext::get_any(const std::string& key) const {
  auto it = call_->values.find(key);
  TG_CHECK(it != call_->values.end(), op_name(), ": ctx.get: no value was set as \"", key, "\"");
  return it->second;
}

void FunctionContext::wrong_type(const std::string& key) const {
  TG_ERROR(op_name(), ": ctx.get: the value \"", key, "\" was set with another type (",
           get_any(key).type().name(), ")");
}

// ---------------------------------------------------------------------------------------
// Backward: the user's callable, and the checks of what it returns. The engine checks again,
// but its messages are for ops of ours ("internal error"); these name the user's op and input.

std::vector<Tensor> detail::CustomOpAccess::backward(const BackwardContext& ctx,
                                                     const std::vector<Tensor>& grad_outputs) {
  const CustomCall& call = ctx.attrs<CustomCall>();
  const CustomOpDef& def = *call.def;
  std::vector<Tensor> user_grad_outputs(call.num_outputs);
  for (size_t k = 0; k < grad_outputs.size() && k < call.recorded_outputs.size(); ++k)
    user_grad_outputs[call.recorded_outputs[k]] = grad_outputs[k];

  FunctionContext fctx;
  fctx.def_ = &def;
  fctx.call_ = const_cast<CustomCall*>(&call);  // backward only reads (set/save refuse)
  fctx.backward_ = &ctx;
  std::vector<Tensor> grads = def.backward(fctx, user_grad_outputs);

  const size_t n = def.input_names.size();
  TG_CHECK(grads.size() == n, def.name, " backward: returned ", grads.size(), grads.size() == 1 ? " gradient" : " gradients",
           " for ", n, n == 1 ? " input" : " inputs", " (", def.inputs_joined,
           "); return one per input, an undefined Tensor() where ctx.needs_input_grad(i) is false");
  for (size_t i = 0; i < n; ++i) {
    if (!ctx.needs_grad(static_cast<int>(i))) {
      grads[i] = Tensor();  // not asked for: ignored, as PyTorch does
      continue;
    }
    const Tensor& g = grads[i];
    TG_CHECK(g.defined(), def.name, " backward: no gradient for ", input_label(def, i),
             ", which needs one (ctx.needs_input_grad(", i, ") is true)");
    const Shape& shape = ctx.input_shape(static_cast<int>(i));
    DType dtype = ctx.input_dtype(static_cast<int>(i));
    TG_CHECK(g.shape() == shape, def.name, " backward: gradient of ", input_label(def, i), " has shape ",
             format_shape(g.shape()), ", expected ", format_shape(shape));
    TG_CHECK(g.dtype() == dtype, def.name, " backward: gradient of ", input_label(def, i), " has dtype ",
             dtype_name(g.dtype()), ", expected ", dtype_name(dtype));
  }
  return grads;
}

namespace {

std::vector<Tensor> custom_op_backward(const BackwardContext& ctx, const std::vector<Tensor>& grad_outputs) {
  return detail::CustomOpAccess::backward(ctx, grad_outputs);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// CustomOp

CustomOp::CustomOp(std::string name, std::vector<std::string> input_names, CustomForwardFn forward,
                   CustomBackwardFn backward) {
  TG_CHECK(!name.empty(), "CustomOp: the op needs a name");
  // Names go into one-line tape dumps, traces, DOT labels and C strings: no control characters
  // (a newline split an entry, a NUL cut the name), and no spaces at their ends (lost in labels;
  // an input named " " was counted as no name at all, and every call failed).
  auto printable = [](const std::string& n) {
    return std::none_of(n.begin(), n.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }) &&
           n.front() != ' ' && n.back() != ' ';
  };
  TG_CHECK(printable(name), "CustomOp \"", name, "\": a name may not hold control characters or begin or end with a space");
  TG_CHECK(forward != nullptr, "CustomOp ", name, ": forward is empty");
  TG_CHECK(backward != nullptr, "CustomOp ", name, ": backward is empty");
  for (size_t i = 0; i < input_names.size(); ++i) {
    const std::string& n = input_names[i];
    TG_CHECK(!n.empty(), "CustomOp ", name, ": input ", i, " has an empty name");
    TG_CHECK(printable(n), "CustomOp ", name, ": input ", i, " is named \"", n,
             "\"; a name may not hold control characters or begin or end with a space");
    // The names are joined with ", " into OpDef::inputs, where a comma separates names and a
    // trailing "..." marks a list.
    TG_CHECK(n.find(',') == std::string::npos && (n.size() < 3 || n.compare(n.size() - 3, 3, "...") != 0),
             "CustomOp ", name, ": input ", i, " is named \"", n, "\"; a name may not contain ',' or end in '...'");
    for (size_t j = 0; j < i; ++j)
      TG_CHECK(input_names[i] != input_names[j], "CustomOp ", name, ": two inputs are named \"", input_names[i], "\"");
  }
  auto def = std::make_shared<detail::CustomOpDef>();
  def->name = std::move(name);
  def->backward_name = def->name + "_backward";
  for (const std::string& n : input_names) def->inputs_joined += (def->inputs_joined.empty() ? "" : ", ") + n;
  def->input_names = std::move(input_names);
  def->forward = std::move(forward);
  def->backward = std::move(backward);
  def->op = OpDef{def->name.c_str(), def->backward_name.c_str(), def->inputs_joined.c_str(), custom_op_backward,
                  nullptr};
  def_ = std::move(def);
}

std::vector<Tensor> CustomOp::apply(const std::vector<Tensor>& inputs) const {
  const detail::CustomOpDef& def = *def_;
  TG_CHECK(inputs.size() == def.input_names.size(), def.name, ": expected ", def.input_names.size(),
           def.input_names.size() == 1 ? " input" : " inputs", " (", def.inputs_joined, "), got ", inputs.size());

  Recorder rec(def.op, inputs);  // before the NoGradGuard: it decides whether to record
  detail::CustomCall call;
  call.def = def_;
  FunctionContext ctx;
  ctx.def_ = &def;
  ctx.call_ = &call;
  ctx.inputs_ = &inputs;
  ctx.recorder_ = rec ? &rec : nullptr;

  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = def.forward(ctx, inputs);
  }
  TG_CHECK(!outputs.empty(), def.name, " forward: returned no outputs");
  for (size_t i = 0; i < outputs.size(); ++i)
    TG_CHECK(outputs[i].defined(), def.name, " forward: output ", i, " is undefined");
  if (!rec) return outputs;

  // The outputs are about to get this entry as their grad_fn. A tensor forward returned as it
  // came (an input, a captured parameter, an output given twice) already has a tape state of its
  // own: it is returned as a new handle to the same memory instead.
  std::unordered_set<const TensorImpl*> taken;
  for (const Tensor& t : inputs)
    if (t.defined()) taken.insert(t.impl());
  std::vector<Tensor> recorded;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype())) continue;  // not differentiable: returned unlinked
    if (outputs[i].requires_grad() || !taken.insert(outputs[i].impl()).second) {
      outputs[i] = outputs[i].detach();
      taken.insert(outputs[i].impl());
    }
    recorded.push_back(outputs[i]);
    call.recorded_outputs.push_back(static_cast<int>(i));
  }
  call.num_outputs = static_cast<int>(outputs.size());
  if (recorded.empty()) return outputs;
  rec.save(std::move(ctx.to_save_));
  rec.set_attrs(std::move(call));
  rec.set_outputs(recorded);
  return outputs;
}

Tensor CustomOp::single_output(std::vector<Tensor> outputs) const {
  TG_CHECK(outputs.size() == 1, def_->name, ": has ", outputs.size(), " outputs; call apply() to get all of them");
  return outputs[0];
}

CustomOp& CustomOp::add_sample(std::string name, std::function<std::vector<Tensor>(DType)> make_inputs,
                               std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run) {
  TG_CHECK(make_inputs != nullptr, def_->name, ": add_sample(\"", name, "\"): make_inputs is empty");
  samples_.push_back({std::move(name), std::move(make_inputs), std::move(run)});
  return *this;
}

std::vector<SampleCase> CustomOp::samples() const {
  std::vector<SampleCase> out = samples_;
  for (SampleCase& s : out)
    if (!s.run) s.run = [op = *this](const std::vector<Tensor>& inputs) { return op.apply(inputs); };
  return out;
}

const std::string& CustomOp::name() const { return def_->name; }
const std::vector<std::string>& CustomOp::input_names() const { return def_->input_names; }
const OpDef& CustomOp::op_def() const { return def_->op; }

CustomOp& CustomOp::twice_differentiable(bool yes) {
  def_->op.twice_differentiable = yes;
  return *this;
}

OpCheckResult check_custom_op(const CustomOp& op, const OpCheckOptions& options) {
  OpCheckOptions o = options;
  o.check_second_derivatives = o.check_second_derivatives || op.op_def().twice_differentiable;
  return check_samples(op.name(), op.samples(), o);
}

}  // namespace tg
