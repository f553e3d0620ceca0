// User-defined ops: a forward and a hand-written backward as C++ callables, the counterpart of
// torch.autograd.Function (and of torch.library.custom_op with register_autograd).
//
//   // y = scale * softplus(x), with its own backward; `scale` is captured.
//   double scale = 2.0;
//   tg::CustomOp scaled_softplus(
//       "scaled_softplus", {"x"},
//       [scale](tg::FunctionContext& ctx, const std::vector<tg::Tensor>& in) {
//         ctx.save("x", in[0]);                               // for backward, by name
//         return std::vector<tg::Tensor>{tg::mul(tg::log(tg::add(tg::exp(in[0]), 1.0)), scale)};
//       },
//       [scale](tg::FunctionContext& ctx, const std::vector<tg::Tensor>& grad_out) {
//         const tg::Tensor& x = ctx.saved("x");
//         return std::vector<tg::Tensor>{tg::mul(grad_out[0], tg::mul(tg::sigmoid(x), scale))};
//       });
//   scaled_softplus.add_sample("vector", [](tg::DType dt) {
//     return std::vector<tg::Tensor>{tg::randn({5}, dt).requires_grad_()};
//   });
//   tg::Tensor y = scaled_softplus(x);                        // on the tape, as any op
//   tg::OpCheckResult check = tg::check_custom_op(scaled_softplus);  // the registry's checks
//
// Forward runs without recording (the framework holds a NoGradGuard around it), so any op may
// compute it; its outputs are then linked to one tape entry, which keeps the op's definition
// (and the callables' captures) alive until the entry dies, whatever happens to the CustomOp
// object. Backward receives one gradient per output (zeros where none arrived; an undefined
// Tensor for a non-floating output, which is not differentiable) and returns one gradient per
// input, in input order: a tensor of the input's shape and dtype where ctx.needs_input_grad(i),
// an undefined Tensor() where not (anything returned there is ignored). Returning the wrong
// number of gradients, a wrong shape or dtype, or nothing where a gradient is needed is an
// error that names the op and the input. A backward written with tapegrad's ops records those
// ops when the engine runs it with grad mode on (double backward), as PyTorch's does.
//
// Saved tensors are kept as tape entries keep theirs: changing one in place after forward is
// an error at backward, and they are freed after backward unless retain_graph is set.
// Pass tensors the op depends on as inputs rather than capturing them in the callables: a
// capture is invisible to the tape (no gradient reaches it), and a captured tensor with history
// would be kept alive by the definition, with all its tape.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "op_check.h"
#include "registry.h"
#include "tensor.h"

namespace tg {

class BackwardContext;
class Recorder;
class FunctionContext;

namespace detail {
struct CustomOpDef;
struct CustomCall;
struct CustomOpAccess;
}  // namespace detail

// forward(ctx, inputs) -> outputs; backward(ctx, grad_outputs) -> grad_inputs.
using CustomForwardFn = std::function<std::vector<Tensor>(FunctionContext& ctx, const std::vector<Tensor>& inputs)>;
using CustomBackwardFn =
    std::function<std::vector<Tensor>(FunctionContext& ctx, const std::vector<Tensor>& grad_outputs)>;

// `ctx`: what forward leaves for backward. One per call of the op.
class FunctionContext {
 public:
  // Forward and backward.
  const std::string& op_name() const;
  int num_inputs() const;
  const std::string& input_name(int input) const;
  // Whether input i's gradient will be asked for (false for every input when not recording).
  // Forward may use it to save only what those gradients need.
  bool needs_input_grad(int input) const;
  bool needs_input_grad(const std::string& input_name) const;
  const Shape& input_shape(int input) const;
  DType input_dtype(int input) const;

  // Forward: tensors for backward. Each takes the next slot; undefined tensors are allowed.
  void save(const std::string& name, const Tensor& t);        // by name (and slot)
  void save_for_backward(const std::vector<Tensor>& tensors);  // by slot, as in PyTorch
  // Forward: a non-tensor value for backward (a scale, a flag, a shape).
  template <class T>
  void set(const std::string& key, T value) {
    set_any(key, std::any(std::move(value)));
  }

  // Backward: the saved tensors (undefined where an undefined tensor was saved). Throws when
  // the name or slot was never saved, or when the tensor was changed in place after it was.
  Tensor saved(const std::string& name) const;
  Tensor saved(int slot) const;
  std::vector<Tensor> saved_tensors() const;  // every slot, in order
  // Backward (or later in forward): a value set in forward; throws on a missing key or wrong type.
  template <class T>
  const T& get(const std::string& key) const {
    const T* value = std::any_cast<T>(&get_any(key));
    if (!value) wrong_type(key);
    return *value;
  }
  bool has(const std::string& key) const;

 private:
  friend class CustomOp;
  friend struct detail::CustomOpAccess;
  FunctionContext() = default;

  void set_any(const std::string& key, std::any value);
  const std::any& get_any(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key) const;
  int input_index(const std::string& name) const;
  void check_forward(const char* what) const;
  void check_backward(const char* what) const;

  const detail::CustomOpDef* def_ = nullptr;
  detail::CustomCall* call_ = nullptr;           // forward: being filled; backward: the entry's
  const std::vector<Tensor>* inputs_ = nullptr;  // forward only
  const Recorder* recorder_ = nullptr;           // forward only, null when not recording
  std::vector<Tensor> to_save_;                  // forward only
  const BackwardContext* backward_ = nullptr;    // backward only
};

// A user-defined op. Copies share one definition.
class CustomOp {
 public:
  // `name` appears in the tape, traces and error messages ("my_op backward: ..."); input_names
  // fixes the number of inputs and names them in messages. Inputs may be any tensors (undefined,
  // integer, not requiring grad); only floating ones that require grad get gradients.
  CustomOp(std::string name, std::vector<std::string> input_names, CustomForwardFn forward,
           CustomBackwardFn backward);

  // Runs forward and, when recording (grad mode on and an input requires grad), links the
  // floating outputs to one new tape entry.
  std::vector<Tensor> apply(const std::vector<Tensor>& inputs) const;
  // The single output of an op with one output: op(x, w).
  template <class... Ts>
  Tensor operator()(const Ts&... inputs) const {
    return single_output(apply(std::vector<Tensor>{Tensor(inputs)...}));
  }

  // A sample case for check_custom_op: make_inputs(dtype) builds fresh inputs in that floating
  // dtype, those to check with requires_grad set. The op is run as apply(inputs) unless `run`
  // is given (to call it inside a larger function or return only some outputs). Samples belong
  // to this handle, not to the op's tape entries: `run` may capture a copy of the op (a copy
  // made before this call, without this sample) and nothing keeps itself alive.
  CustomOp& add_sample(std::string name, std::function<std::vector<Tensor>(DType)> make_inputs,
                       std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run = nullptr);
  std::vector<SampleCase> samples() const;

  // Declares that backward computes its gradients with recorded ops (tg::mul, tg::matmul, ...;
  // not raw loops over data<T>()), so that backward(create_graph = true) may differentiate
  // through it again; check_custom_op then gradgradchecks the samples too. Without it,
  // create_graph reaching the op is an error, never a silent zero.
  CustomOp& twice_differentiable(bool yes = true);

  const std::string& name() const;
  const std::vector<std::string>& input_names() const;
  const OpDef& op_def() const;  // what its tape entries point at

 private:
  Tensor single_output(std::vector<Tensor> outputs) const;
  std::shared_ptr<detail::CustomOpDef> def_;
  std::vector<SampleCase> samples_;  // run may be empty: then the op itself
};

// The generic checks of framework/op_check.h (gradcheck in float64 with its repeatability,
// zero-gradient and accumulation checks, float32 against float64, each input alone) on every
// sample case of a user's op. ok is false, with one line per failure, when any fails.
OpCheckResult check_custom_op(const CustomOp& op, const OpCheckOptions& options = {});

}  // namespace tg
