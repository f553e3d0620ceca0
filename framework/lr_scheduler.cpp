#include "lr_scheduler.h"

#include <cmath>

namespace tg {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::apply() {
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set(g, "lr", lr_at(base_lrs_[g], last_epoch_));
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, "LRScheduler: last_epoch must be >= 0, got ", epoch);
  last_epoch_ = epoch;
  apply();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  TG_CHECK(factor_ != nullptr, "LambdaLR: the factor function is empty");
  apply();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}

double StepLR::lr_at(double base_lr, int64_t epoch) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

double warmup_cosine_factor(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_factor) {
  if (step < warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
  const double progress = std::min(
      1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
  const double pi = 3.14159265358979323846;
  return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(pi * progress));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor)
    : LambdaLR(optimizer, [=](int64_t step) { return warmup_cosine_factor(step, warmup_steps, total_steps, min_factor); }) {
  TG_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps, "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps, got ",
           warmup_steps, " and ", total_steps);
  TG_CHECK(min_factor >= 0 && min_factor <= 1, "WarmupCosineLR: min_factor must be in [0, 1], got ", min_factor);
}

}  // namespace tg
