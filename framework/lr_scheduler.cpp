// The formulas are PyTorch 1.13's (torch/optim/lr_scheduler.py), written in the same operation
// order so that the float64 lrs agree to the bit with what PyTorch computes.
#include "lr_scheduler.h"

#include <cmath>
#include <functional>
#include <set>

namespace tg {

namespace {
constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

Tensor doubles(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape); }

const Tensor& entry(const StateDict& state, const std::string& key, const std::string& who) {
  for (auto& e : state)
    if (e.first == key) return e.second;
  throw Error(who + ".load_state_dict: missing \"" + key + "\"");
}
}  // namespace

// ---- LRScheduler ----

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
  last_lrs_ = base_lrs_;  // until the first apply()
}

double LRScheduler::lr_at(double, int64_t) const {
  throw Error(name() + ": the schedule defines neither lr_at nor closed_form_lr");
}

double LRScheduler::closed_form_lr(size_t group, int64_t epoch) const { return lr_at(base_lrs_[group], epoch); }

double LRScheduler::chained_lr(size_t group, double, int64_t epoch) const { return closed_form_lr(group, epoch); }

void LRScheduler::apply(bool chained) {
  // All lrs first, then the writes: a group's lr never sees another's new value (PyTorch's order).
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    lrs.push_back(chained ? chained_lr(g, optimizer_.lr(g), last_epoch_) : closed_form_lr(g, last_epoch_));
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set(g, "lr", lrs[g]);
  last_lrs_ = lrs;
  after_lrs_set(last_epoch_);
}

void LRScheduler::step() {
  check_step(last_epoch_ + 1);
  ++last_epoch_;
  apply(true);
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, name(), ": last_epoch must be >= 0, got ", epoch);
  check_step(epoch);
  last_epoch_ = epoch;
  apply(false);
}

std::vector<double> LRScheduler::get_last_lr() const { return last_lrs_; }

StateDict LRScheduler::state_dict() const {
  const Shape groups{static_cast<int64_t>(base_lrs_.size())};
  StateDict out = {{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), DType::Int64)},
                   {"base_lrs", doubles(base_lrs_, groups)},
                   {"last_lrs", doubles(get_last_lr(), groups)}};
  for (auto& e : extra_state()) out.push_back(e);
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string who = name();
  const StateDict mine = state_dict();  // the keys and shapes a valid dict has
  std::set<std::string> seen;
  for (auto& [key, value] : state) {
    TG_CHECK(seen.insert(key).second, who, ".load_state_dict: \"", key, "\" appears twice");
    const Tensor* expected = nullptr;
    for (auto& e : mine)
      if (e.first == key) expected = &e.second;
    TG_CHECK(expected != nullptr, who, ".load_state_dict: unexpected key \"", key, "\"");
    TG_CHECK(value.defined() && value.shape() == expected->shape(), who, ".load_state_dict: \"", key,
             "\" has shape ", describe_shape(value), ", expected ", format_shape(expected->shape()));
    TG_CHECK(is_floating(value.dtype()) == is_floating(expected->dtype()), who, ".load_state_dict: \"", key,
             "\" is ", dtype_name(value.dtype()), ", expected ", dtype_name(expected->dtype()));
  }
  const double epoch = entry(state, "last_epoch", who).item();
  TG_CHECK(epoch >= 0 && epoch < 9e15 && epoch == std::floor(epoch), who,
           ".load_state_dict: last_epoch must be a non-negative integer, got ", epoch);
  check_step(static_cast<int64_t>(epoch));
  StateDict extra;
  for (auto& e : mine) {
    const Tensor& value = entry(state, e.first, who);  // every key present
    if (e.first != "last_epoch" && e.first != "base_lrs" && e.first != "last_lrs")
      extra.emplace_back(e.first, value.to(e.second.dtype()).contiguous());
  }
  // Checked: from here on nothing throws.
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lrs_ = entry(state, "base_lrs", who).to(DType::Float64).to_vector<double>();
  load_extra_state(extra);
  const std::vector<double> last = entry(state, "last_lrs", who).to(DType::Float64).to_vector<double>();
  for (size_t g = 0; g < last.size(); ++g) optimizer_.set(g, "lr", last[g]);
  last_lrs_ = last;
  after_lrs_set(last_epoch_);
}

// ---- LambdaLR, StepLR ----

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

// PyTorch's get_lr: the group's current lr, times gamma at each multiple of step_size (the
// same bits as PyTorch's, and an lr set from outside carries on from where it was set).
double StepLR::chained_lr(size_t, double lr, int64_t epoch) const {
  return epoch == 0 || epoch % step_size_ != 0 ? lr : lr * gamma_;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  TG_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  TG_CHECK(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingLR: eta_min must be finite and >= 0, got ", eta_min);
  apply();
}

double CosineAnnealingLR::lr_at(double base_lr, int64_t epoch) const {
  const double e = static_cast<double>(epoch), T = static_cast<double>(T_max_);
  return eta_min_ + (base_lr - eta_min_) * (1 + std::cos(kPi * e / T)) / 2;
}

double CosineAnnealingLR::chained_lr(size_t group, double lr, int64_t epoch) const {
  if (epoch == 0) return lr;  // construction leaves the lr as it is
  const double e = static_cast<double>(epoch), T = static_cast<double>(T_max_);
  const int64_t period = 2 * T_max_;
  if (((epoch - 1 - T_max_) % period + period) % period == 0)  // just past a minimum: the cosine turns up
    return lr + (base_lrs()[group] - eta_min_) * (1 - std::cos(kPi / T)) / 2;
  return (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
}

// ---- OneCycleLR ----

namespace {
enum { kInitial = 0, kMax = 1, kMin = 2 };           // lr indices
enum { kMaxMomentum = 0, kBaseMomentum = 1 };         // momentum indices
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start,
                       const std::string& anneal_strategy, double div_factor, double final_div_factor,
                       bool three_phase, bool cycle_momentum, double base_momentum, double max_momentum)
    : LRScheduler(optimizer), total_steps_(total_steps), cos_(anneal_strategy == "cos"), cycle_momentum_(cycle_momentum) {
  TG_CHECK(total_steps > 0, "OneCycleLR: expected a positive total_steps, got ", total_steps);
  TG_CHECK(pct_start >= 0 && pct_start <= 1, "OneCycleLR: expected pct_start between 0 and 1, got ", pct_start);
  TG_CHECK(anneal_strategy == "cos" || anneal_strategy == "linear",
           "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"", anneal_strategy, "\"");
  TG_CHECK(std::isfinite(max_lr) && max_lr >= 0, "OneCycleLR: expected a finite max_lr >= 0, got ", max_lr);
  TG_CHECK(div_factor > 0 && final_div_factor > 0, "OneCycleLR: expected positive div_factor and final_div_factor, got ",
           div_factor, " and ", final_div_factor);
  const double T = static_cast<double>(total_steps);
  if (three_phase)
    phases_ = {{pct_start * T - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {2 * pct_start * T - 2, kMax, kInitial, kBaseMomentum, kMaxMomentum},
               {T - 1, kInitial, kMin, kMaxMomentum, kMaxMomentum}};
  else
    phases_ = {{pct_start * T - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {T - 1, kMax, kMin, kBaseMomentum, kMaxMomentum}};
  std::vector<double> initial;
  for (size_t g = 0; g < optimizer.num_groups(); ++g) {
    const double init = max_lr / div_factor;
    lrs_.push_back({init, max_lr, init / final_div_factor});
    initial.push_back(init);
  }
  set_base_lrs(initial);
  if (cycle_momentum_) {
    momentum_key_ = optimizer.has(0, "beta1") ? "beta1" : "momentum";
    TG_CHECK(optimizer.has(0, momentum_key_), "OneCycleLR: ", optimizer.name(),
             " has no momentum or beta1 to cycle; pass cycle_momentum = false");
    const double limit = momentum_key_ == "beta1" ? 1 : INFINITY;  // Adam's betas are below 1
    TG_CHECK(base_momentum >= 0 && base_momentum < limit && max_momentum >= 0 && max_momentum < limit,
             "OneCycleLR: invalid base_momentum ", base_momentum, " or max_momentum ", max_momentum, " for ",
             optimizer.name(), "'s ", momentum_key_);
    for (size_t g = 0; g < optimizer.num_groups(); ++g) momentums_.push_back({max_momentum, base_momentum});
  }
  (void)phase_at(last_epoch());  // throws for a phase of no length: before anything is written
  for (size_t g = 0; g < momentums_.size(); ++g) optimizer.set(g, momentum_key_, momentums_[g][kMaxMomentum]);
  apply();
}

void OneCycleLR::check_step(int64_t epoch) const {
  TG_CHECK(epoch <= total_steps_, "OneCycleLR: step() called ", epoch, " times, more than total_steps (",
           total_steps_, ")");
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::phase_at(int64_t epoch) const {
  const double step = static_cast<double>(epoch);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (step <= p.end_step || i + 1 == phases_.size()) {
      // PyTorch divides by zero here (ZeroDivisionError) when a phase has no length.
      TG_CHECK(p.end_step != start, "OneCycleLR: phase ", i + 1, " of the schedule has no length at step ", epoch,
               " (pct_start * total_steps = ", p.end_step + 1, "); choose another pct_start or total_steps");
      return {&p, (step - start) / (p.end_step - start)};
    }
    start = p.end_step;
  }
  return {nullptr, 0};  // not reached: the last phase always matches
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (cos_) {
    const double cos_out = std::cos(kPi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

double OneCycleLR::closed_form_lr(size_t group, int64_t epoch) const {
  auto [phase, pct] = phase_at(epoch);
  return anneal(lrs_[group][phase->start], lrs_[group][phase->end], pct);
}

void OneCycleLR::after_lrs_set(int64_t epoch) {
  if (!cycle_momentum_) return;
  auto [phase, pct] = phase_at(epoch);
  for (size_t g = 0; g < momentums_.size(); ++g)
    optimizer().set(g, momentum_key_,
                    anneal(momentums_[g][phase->start_momentum], momentums_[g][phase->end_momentum], pct));
}

StateDict OneCycleLR::extra_state() const {
  const int64_t groups = static_cast<int64_t>(lrs_.size());
  std::vector<double> lrs, momentums;
  for (auto& g : lrs_) lrs.insert(lrs.end(), g.begin(), g.end());
  for (auto& g : momentums_) momentums.insert(momentums.end(), g.begin(), g.end());
  StateDict out = {{"lrs", doubles(lrs, {groups, 3})}};  // initial, max, min per group
  if (cycle_momentum_) out.emplace_back("momentums", doubles(momentums, {groups, 2}));  // max, base
  return out;
}

void OneCycleLR::load_extra_state(const StateDict& entries) {
  for (auto& [key, value] : entries) {
    const std::vector<double> v = value.to_vector<double>();
    auto& rows = key == "lrs" ? lrs_ : momentums_;
    const size_t width = key == "lrs" ? 3 : 2;
    for (size_t g = 0; g < rows.size(); ++g) rows[g].assign(v.begin() + g * width, v.begin() + (g + 1) * width);
  }
}

// ---- WarmupCosineLR ----

double warmup_cosine_factor(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_factor) {
  if (step < warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
  const double progress = std::min(
      1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
  return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(kPi * progress));
}

namespace {
// The factor, once its arguments are checked: before LambdaLR's constructor writes any lr.
std::function<double(int64_t)> checked_warmup_cosine(int64_t warmup_steps, int64_t total_steps, double min_factor) {
  TG_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps, "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps, got ",
           warmup_steps, " and ", total_steps);
  TG_CHECK(min_factor >= 0 && min_factor <= 1, "WarmupCosineLR: min_factor must be in [0, 1], got ", min_factor);
  return [=](int64_t step) { return warmup_cosine_factor(step, warmup_steps, total_steps, min_factor); };
}
}  // namespace

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor)
    : LambdaLR(optimizer, checked_warmup_cosine(warmup_steps, total_steps, min_factor)) {}

}  // namespace tg
