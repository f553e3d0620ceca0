// Learning-rate schedulers. Each computes a group's lr in closed form from the lr the group had
// when the scheduler was made (base_lr) and the step count, and writes it into the optimizer:
// call step() once per epoch or per iteration, after optimizer.step(), as in PyTorch.
#pragma once

#include <functional>
#include <vector>

#include "optim.h"

namespace tg {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();                        // last_epoch += 1, then sets each group's lr
  int64_t last_epoch() const { return last_epoch_; }
  void set_last_epoch(int64_t epoch);  // for resuming: sets the lrs of that step
  std::vector<double> get_last_lr() const;
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  // The lr of a group at step `epoch` (0 at construction).
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;
  void apply();  // derived constructors call it once their parameters are set

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * factor(epoch): PyTorch's LambdaLR.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  double lr_at(double base_lr, int64_t epoch) const override { return base_lr * factor_(epoch); }

 private:
  std::function<double(int64_t)> factor_;
};

// lr = base_lr * gamma^(epoch / step_size): PyTorch's StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// The factor of a linear warmup from 0 over `warmup_steps`, then a cosine decay to
// min_factor at `total_steps` (held there after): the transformer schedule
// (HuggingFace's get_cosine_schedule_with_warmup when min_factor = 0).
double warmup_cosine_factor(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);

class WarmupCosineLR : public LambdaLR {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
};

}  // namespace tg
