// Optimizers: SGD, Adam, AdamW, RMSprop, with PyTorch's exact update formulas (torch.optim, the
// single-tensor path), and clip_grad_norm_ / clip_grad_value_. Updates run under NoGradGuard, in place on the
// parameters' storage, and bump their versions (a stale saved tensor is then caught).
//
// Parameters are grouped as in PyTorch: each group has its own hyperparameters (a scheduler
// changes a group's "lr"). Parameters are numbered across groups in order; that number names
// their state: "state.3.exp_avg". Hyperparameters are "param_groups.0.lr" (0-d float64).
//
//   tg::SGD opt(model->parameters(), {/*lr=*/0.1, /*momentum=*/0.9});
//   for (...) { model->zero_grad(); loss.backward(); opt.step(); }
//
// bfloat16 and float16 parameters: the update is computed in float32 and its state (momentum,
// Adam's moments) is float32. With the option float32_master_weights (on by default; it only
// matters for 16-bit parameters) the optimizer keeps a float32 master copy of each 16-bit
// parameter, state "master_param" (saved and loaded with the rest of the state): each step
// updates the master and the parameter becomes the master rounded once, so updates smaller
// than half the parameter's ulp (lr * grad below 2^-9 of the value for bfloat16) add up
// instead of being rounded away. Without it a 16-bit parameter is widened, updated and
// rounded each step, and such updates are lost. If the parameter was written between steps
// (a checkpoint loaded into the model), the elements that no longer match their master
// restart from the parameter.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "state_dict.h"
#include "tensor.h"

namespace tg {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;
  virtual void step() = 0;
  void zero_grad();  // drops every parameter's gradient (set_to_none)

  size_t num_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  std::vector<Tensor> all_params() const;
  double get(size_t group, const std::string& hyper) const;  // throws on an unknown name
  bool has(size_t group, const std::string& hyper) const;     // whether get would find it
  void set(size_t group, const std::string& hyper, double value);
  double lr(size_t group = 0) const { return get(group, "lr"); }
  void set_lr(double lr);  // every group

  // "state.<i>.<key>" for each parameter's buffers (copies), then "param_groups.<g>.<hyper>".
  StateDict state_dict() const;
  // Restores buffers and hyperparameters; the parameter count and each buffer's shape must
  // match this optimizer's, buffers must be floating, hyperparameters must pass the checks
  // the constructor makes (a learning rate >= 0, betas in [0, 1), flags 0 or 1, ...), a
  // "step" must be one whole number >= 0, and a parameter's state
  // must hold every buffer its optimizer keeps (Adam: step, exp_avg, exp_avg_sq) or none (it
  // then starts afresh). Keys this optimizer does not know are an error. Nothing changes when
  // any check fails.
  void load_state_dict(const StateDict& state);

  // The buffers of parameter i ("momentum_buffer", "exp_avg", "step", "master_param" for a 16-bit
  // parameter, ...), empty before its first update.
  const std::map<std::string, Tensor>& state(size_t param_index) const;

 protected:
  struct Group {
    std::vector<Tensor> params;
    std::vector<std::pair<std::string, double>> hyper;  // in a fixed order per optimizer
    double h(const char* key) const;
  };
  Optimizer() = default;
  // Refuses hyperparameters this optimizer's constructor would refuse; run for every group
  // added and every group loaded. An optimizer written outside tapegrad may override it.
  virtual void check_hyperparameters(const Group& /*group*/) const {}
  void add_group(std::vector<Tensor> params, std::vector<std::pair<std::string, double>> hyper);
  // Calls f(group, param, grad, state) for each parameter that has a gradient.
  template <class F>
  void for_each_param_with_grad(F&& f);

  // The buffers every parameter's state holds once it has any (load_state_dict checks them),
  // and those created when an option needs them; "master_param" besides, for 16-bit parameters.
  // load_state_dict refuses any other name.
  virtual std::vector<std::string> required_state() const { return {}; }
  virtual std::vector<std::string> optional_state() const { return {}; }

  std::vector<Group> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // by parameter index across groups
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool float32_master_weights = true;  // 16-bit parameters: keep and update a float32 copy
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  SGD(const StateDict& named_params, SGDOptions options);
  void add_param_group(std::vector<Tensor> params, SGDOptions options);
  std::string name() const override { return "SGD"; }
  void step() override;

 protected:
  void check_hyperparameters(const Group& group) const override;
  std::vector<std::string> optional_state() const override { return {"momentum_buffer"}; }
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: L2 added to the gradient; AdamW: decoupled decay
  bool float32_master_weights = true;  // 16-bit parameters: keep and update a float32 copy
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(const StateDict& named_params, AdamOptions options);
  void add_param_group(std::vector<Tensor> params, AdamOptions options);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  void step() override;

 protected:
  explicit Adam(bool decoupled) : decoupled_(decoupled) {}  // for AdamW: no group yet
  void check_hyperparameters(const Group& group) const override;
  std::vector<std::string> required_state() const override { return {"step", "exp_avg", "exp_avg_sq"}; }
  bool decoupled_ = false;
};

// AdamW: weight decay applied to the parameter (p *= 1 - lr * wd) before the Adam update,
// not to the gradient. PyTorch's default weight_decay for AdamW is 1e-2.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = with_default_decay());
  AdamW(const StateDict& named_params, AdamOptions options = with_default_decay());
  static AdamOptions with_default_decay() {
    AdamOptions o;
    o.weight_decay = 1e-2;
    return o;
  }
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // smoothing of the running mean of squared gradients
  double eps = 1e-8;
  double weight_decay = 0;  // L2 added to the gradient
  double momentum = 0;
  bool centered = false;  // divide by an estimate of the gradient's variance instead
  bool float32_master_weights = true;  // 16-bit parameters: keep and update a float32 copy
};

// PyTorch's RMSprop. State per parameter: "step", "square_avg", and "momentum_buffer" when
// momentum > 0, "grad_avg" when centered (PyTorch's names; step is a 0-d float64 here as for
// Adam, a Python int in PyTorch 1.13).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  RMSprop(const StateDict& named_params, RMSpropOptions options = {});
  void add_param_group(std::vector<Tensor> params, RMSpropOptions options);
  std::string name() const override { return "RMSprop"; }
  void step() override;

 protected:
  void check_hyperparameters(const Group& group) const override;
  std::vector<std::string> required_state() const override { return {"step", "square_avg"}; }
  std::vector<std::string> optional_state() const override { return {"momentum_buffer", "grad_avg"}; }
};

// Scales the gradients so that their global norm (the norm of all of them as one vector) is
// at most max_norm: g *= min(1, max_norm / (total + 1e-6)), PyTorch's formula. Returns the
// norm before clipping. norm_type: any p >= 1, or INFINITY for the max-abs norm. The norms
// are accumulated in float64 whatever the gradients' dtype (16-bit gradients included), and a
// 16-bit gradient is scaled in float32 and rounded once.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// Clamps every gradient element into [-clip_value, clip_value] in place (PyTorch's
// torch.nn.utils.clip_grad_value_); NaN stays NaN. Parameters without a gradient are skipped.
// A 16-bit gradient is clamped in float32 and rounded once (a clamped element becomes
// clip_value rounded to its dtype). clip_value must be >= 0 (PyTorch accepts a negative one
// and then sets every element to -clip_value; that is never what a caller means).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace tg
