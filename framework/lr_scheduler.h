// Learning-rate schedulers, PyTorch's (torch.optim.lr_scheduler) with their exact formulas. A
// scheduler writes each group's lr into the optimizer: at construction (step 0), and at each
// step(), called once per epoch or per iteration after optimizer.step(), as in PyTorch.
//
//   tg::SGD opt(net->parameters(), {0.1, 0.9});
//   tg::CosineAnnealingLR sched(opt, /*T_max=*/epochs);
//   for (int e = 0; e < epochs; ++e) { train_one_epoch(); sched.step(); }
//
// Most schedules are closed forms of base_lr (each group's lr when the scheduler was made) and
// the step count. StepLR and CosineAnnealingLR are recursive in PyTorch (each step's lr is
// computed from the group's current lr, so an lr set from outside carries on) and are here
// too; set_last_epoch uses their closed forms, as PyTorch's step(epoch) does.
//
// state_dict() / load_state_dict() carry what resuming needs to continue to the bit: last_epoch,
// base_lrs, the last lrs (written back into the optimizer on load, so a recursive schedule
// continues from exactly where it was even if the optimizer was not restored) and the
// schedule's own per-group values (OneCycleLR's).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "optim.h"
#include "state_dict.h"

namespace tg {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual std::string name() const { return "LRScheduler"; }
  void step();                         // last_epoch += 1, then sets each group's lr
  int64_t last_epoch() const { return last_epoch_; }
  // Jumps to a step (PyTorch's step(epoch)): sets that step's lrs from the closed form.
  void set_last_epoch(int64_t epoch);
  // The lrs this schedule last wrote, as PyTorch's (an lr set from outside since is not one).
  std::vector<double> get_last_lr() const;
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_epoch" (0-d int64), "base_lrs" and "last_lrs" (float64, one per group), then the
  // schedule's own entries (extra_state()).
  StateDict state_dict() const;
  // Checks everything (names, shapes, the group count) before changing anything, then restores
  // the step, the base lrs and the schedule's own values, and writes the last lrs (and what
  // else the schedule sets, OneCycleLR's momentum) into the optimizer. Unknown keys are an error.
  void load_state_dict(const StateDict& state);

 protected:
  // The closed form: the lr of a group at step `epoch` (0 at construction).
  virtual double lr_at(double base_lr, int64_t epoch) const;
  // The lr that step() sets for `group`, whose lr is now `current_lr`; the closed form unless
  // the schedule is recursive. PyTorch's get_lr().
  virtual double chained_lr(size_t group, double current_lr, int64_t epoch) const;
  // The closed form for one group (set_last_epoch); lr_at(base_lrs()[group], epoch) unless the
  // schedule needs more than the base lr (OneCycleLR).
  virtual double closed_form_lr(size_t group, int64_t epoch) const;
  // Runs after the lrs of `epoch` are set (OneCycleLR sets the momentum there).
  virtual void after_lrs_set(int64_t /*epoch*/) {}
  // Checked before step() changes anything (OneCycleLR refuses to step past total_steps).
  virtual void check_step(int64_t /*epoch*/) const {}
  // The schedule's own state entries; load_extra_state gets back exactly the keys
  // extra_state() gives (checked by load_state_dict) and must not throw once they are there.
  virtual StateDict extra_state() const { return {}; }
  virtual void load_extra_state(const StateDict& /*entries*/) {}

  // Derived constructors call it once their parameters are set: step 0 (PyTorch's _initial_step).
  void apply(bool chained = true);
  Optimizer& optimizer() const { return optimizer_; }
  void set_base_lrs(std::vector<double> lrs) { base_lrs_ = std::move(lrs); }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;  // what the schedule last wrote (get_last_lr)
  int64_t last_epoch_ = 0;
};

// lr = base_lr * factor(epoch): PyTorch's LambdaLR.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);
  std::string name() const override { return "LambdaLR"; }

 protected:
  double lr_at(double base_lr, int64_t epoch) const override { return base_lr * factor_(epoch); }

 private:
  std::function<double(int64_t)> factor_;
};

// PyTorch's StepLR: the lr times gamma every step_size steps (closed form base_lr *
// gamma^(epoch / step_size) when nothing else changes it).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  double lr_at(double base_lr, int64_t epoch) const override;
  double chained_lr(size_t group, double current_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// PyTorch's CosineAnnealingLR: lr goes from base_lr down to eta_min over T_max steps along half
// a cosine, eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, and (as
// PyTorch's) back up after T_max, periodically. step() uses PyTorch's recursive get_lr(): each lr
// is computed from the group's current one, so it is what a PyTorch user sees calling step()
// every epoch, to the bit; it differs from the closed form above by rounding (measured: up to
// 4.4e-16 absolute over 45 steps of T_max = 10, tens of ulps where the lr nears eta_min) and,
// like PyTorch's, follows an lr changed from outside. set_last_epoch(e) uses the closed form
// (PyTorch's _get_closed_form_lr, what step(epoch) gives there).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double lr_at(double base_lr, int64_t epoch) const override;
  double chained_lr(size_t group, double current_lr, int64_t epoch) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// PyTorch's OneCycleLR (with total_steps; PyTorch's epochs * steps_per_epoch is that product).
// The lr rises from max_lr / div_factor to max_lr over the first pct_start of total_steps, then
// anneals to max_lr / div_factor / final_div_factor ("cos" or "linear"); three_phase: up, back
// down to the initial lr symmetrically, then to the minimum. Call step() once per batch; stepping
// past total_steps is an error, as in PyTorch.
//
// cycle_momentum (PyTorch's default, on) cycles the momentum inversely, between max_momentum and
// base_momentum, as PyTorch does: Adam's and AdamW's "beta1", SGD's and RMSprop's "momentum".
// As in PyTorch, that turns momentum on for an SGD made without it (it starts at 0.95);
// cycle_momentum = false leaves the momentum alone. An optimizer with neither hyperparameter
// needs cycle_momentum = false.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start = 0.3,
             const std::string& anneal_strategy = "cos", double div_factor = 25, double final_div_factor = 1e4,
             bool three_phase = false, bool cycle_momentum = true, double base_momentum = 0.85,
             double max_momentum = 0.95);
  std::string name() const override { return "OneCycleLR"; }
  int64_t total_steps() const { return total_steps_; }

 protected:
  double closed_form_lr(size_t group, int64_t epoch) const override;
  double chained_lr(size_t group, double, int64_t epoch) const override { return closed_form_lr(group, epoch); }
  void after_lrs_set(int64_t epoch) override;
  void check_step(int64_t epoch) const override;
  StateDict extra_state() const override;
  void load_extra_state(const StateDict& entries) override;

 private:
  struct Phase {
    double end_step;
    int start, end;  // indices into a group's {initial, max, min} lr and {max, base} momentum
    int start_momentum, end_momentum;
  };
  // Which phase `epoch` is in and how far along it (PyTorch's get_lr loop).
  std::pair<const Phase*, double> phase_at(int64_t epoch) const;
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  bool cos_;
  bool cycle_momentum_;
  std::string momentum_key_;  // "beta1" or "momentum"
  std::vector<Phase> phases_;
  std::vector<std::vector<double>> lrs_;        // per group: initial, max, min
  std::vector<std::vector<double>> momentums_;  // per group: max, base
};

// The factor of a linear warmup from 0 over `warmup_steps`, then a cosine decay to
// min_factor at `total_steps` (held there after): the transformer schedule
// (HuggingFace's get_cosine_schedule_with_warmup when min_factor = 0).
double warmup_cosine_factor(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);

class WarmupCosineLR : public LambdaLR {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
  std::string name() const override { return "WarmupCosineLR"; }
};

}  // namespace tg
