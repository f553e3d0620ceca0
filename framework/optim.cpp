// Update kernels (raw pointers, one element at a time, the operations in PyTorch's order so
// float64 trajectories match torch.optim to rounding) and the optimizer bookkeeping around them.
//
//   SGD:   d = g + wd*p;  buf = first ? d : momentum*buf + (1-dampening)*d
//          d = nesterov ? d + momentum*buf : buf;  p -= lr*d
//   Adam:  g += wd*p (Adam only);  p *= 1 - lr*wd (AdamW only)
//          m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//          p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
//   RMSprop: g += wd*p;  sq = alpha*sq + (1-alpha)*g*g
//          avg = sqrt(sq) + eps, centered: ga = alpha*ga + (1-alpha)*g, avg = sqrt(sq - ga*ga) + eps
//          momentum: buf = momentum*buf + g/avg, p -= lr*buf;  else p -= lr*g/avg
//
// 16-bit (bfloat16, float16) parameters: the kernels run in float32 on a float32 copy of the
// parameter, with the gradient widened to float32 element by element and the state (momentum,
// moments) in float32, and the parameter is that copy rounded once. With float32_master_weights
// (the default) the copy is kept across steps as state "master_param", so updates below half the
// parameter's ulp accumulate instead of rounding away: the master follows exactly the trajectory
// a float32 parameter with the same gradients would.
#include "optim.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "grad_mode.h"
#include "parallel.h"

namespace tg {

namespace {

// "a, b and c", for messages.
std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return out;
}

template <class T, class G>
void sgd_kernel(T* p, const G* g, T* buf, int64_t n, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, bool first) {
  const T lr_t = static_cast<T>(lr), mom = static_cast<T>(momentum), damp = static_cast<T>(1 - dampening),
          wd = static_cast<T>(weight_decay);
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = static_cast<T>(g[i]);
    T d = weight_decay != 0 ? gi + wd * p[i] : gi;
    if (buf) {
      buf[i] = first ? d : buf[i] * mom + damp * d;
      d = nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + (-lr_t) * d;
  }
}

template <class T, class G>
void adam_kernel(T* p, const G* g, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
                 double weight_decay, bool decoupled, double step) {
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const T step_size = static_cast<T>(lr / bias_correction1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2), one_b1 = static_cast<T>(1 - beta1),
          one_b2 = static_cast<T>(1 - beta2), eps_t = static_cast<T>(eps), wd = static_cast<T>(weight_decay),
          decay = static_cast<T>(1 - lr * weight_decay);
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    T gi = static_cast<T>(g[i]);
    if (weight_decay != 0) {
      if (decoupled)
        p[i] = p[i] * decay;
      else
        gi = gi + wd * p[i];
    }
    // PyTorch's order: addcmul_(g, g, value) is (value * g) * g, addcdiv_(m, d, value) (value * m) / d
    m[i] = m[i] * b1 + one_b1 * gi;
    v[i] = v[i] * b2 + (one_b2 * gi) * gi;
    const T denom = std::sqrt(v[i]) / bc2_sqrt + eps_t;
    p[i] = p[i] + ((-step_size) * m[i]) / denom;
  }
}

// grad_avg (centered) and buf (momentum) are null when unused.
template <class T, class G>
void rmsprop_kernel(T* p, const G* g, T* square_avg, T* grad_avg, T* buf, int64_t n, double lr, double alpha,
                    double eps, double weight_decay, double momentum) {
  const T a = static_cast<T>(alpha), one_a = static_cast<T>(1 - alpha), eps_t = static_cast<T>(eps),
          wd = static_cast<T>(weight_decay), mom = static_cast<T>(momentum), neg_lr = static_cast<T>(-lr);
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = weight_decay != 0 ? static_cast<T>(g[i]) + wd * p[i] : static_cast<T>(g[i]);
    square_avg[i] = square_avg[i] * a + one_a * gi * gi;  // addcmul_: self + (value * t1) * t2
    T avg;
    if (grad_avg) {
      grad_avg[i] = grad_avg[i] * a + one_a * gi;
      // addcmul(square_avg, grad_avg, grad_avg, value=-1) as PyTorch's kernel computes it, one
      // fused multiply-add: a huge gradient makes square_avg Inf and grad_avg^2 overflow, and the
      // unrounded product keeps Inf - (finite) = Inf (the step is then 0, as PyTorch's) where
      // rounding it first would give Inf - Inf = NaN
      avg = std::sqrt(std::fma(-grad_avg[i], grad_avg[i], square_avg[i]));
    } else {
      avg = std::sqrt(square_avg[i]);
    }
    avg = avg + eps_t;
    if (buf) {
      buf[i] = buf[i] * mom + gi / avg;
      p[i] = p[i] + neg_lr * buf[i];
    } else {
      p[i] = p[i] + neg_lr * gi / avg;  // addcdiv_: self + (value * t1) / t2
    }
  }
}

void check_params(const std::vector<Tensor>& params, const char* opt) {
  TG_CHECK(!params.empty(), opt, ": got an empty parameter list");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TG_CHECK(p.defined(), opt, ": parameter ", i, " is undefined");
    TG_CHECK(is_floating(p.dtype()), opt, ": parameter ", i, " must be floating, got ", dtype_name(p.dtype()));
    TG_CHECK(p.is_leaf(), opt, ": can't optimize a non-leaf tensor (parameter ", i, ")");
    TG_CHECK(p.is_contiguous(), opt, ": parameter ", i, " must be contiguous, got strides ",
             format_shape(p.strides()), " for shape ", format_shape(p.shape()));
  }
}

void check_nonneg(const std::string& opt, const char* what, double v) {
  TG_CHECK(v >= 0 && std::isfinite(v), opt, ": invalid ", what, " value: ", v);
}

// A bool option, stored as 0 or 1 among the hyperparameters.
void check_flag(const std::string& opt, const char* what, double v) {
  TG_CHECK(v == 0 || v == 1, opt, ": invalid ", what, " value: ", v, " (a flag: 0 or 1)");
}

std::vector<Tensor> values_of(const StateDict& named) {
  std::vector<Tensor> out;
  for (auto& e : named) out.push_back(e.second);
  return out;
}

// The gradient of p as a contiguous tensor of p's dtype, or undefined when p has none.
Tensor grad_for_update(const Tensor& p, const char* opt) {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  TG_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), opt, ": gradient of shape ", format_shape(g.shape()),
           " ", dtype_name(g.dtype()), " does not match its parameter ", format_shape(p.shape()), " ",
           dtype_name(p.dtype()));
  return g.contiguous();
}

// The dtype of an update's arithmetic and of its state: float32 for 16-bit parameters.
DType state_dtype(DType param) { return is_reduced_floating(param) ? DType::Float32 : param; }

// Elements of the float32 master that no longer round to the 16-bit parameter were written by
// someone else (a checkpoint loaded into the model, a manual edit): they restart from the
// parameter, so a stale master never undoes such a write.
void reseed_stale_master(const Tensor& p, Tensor& master) {
  dispatch_all_floating(p.dtype(), "optimizer", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
      const T* pp = p.data<T>();
      float* m = master.data<float>();
      for (int64_t i = 0, n = p.numel(); i < n; ++i)
        if (T(m[i]).bits != pp[i].bits) m[i] = static_cast<float>(pp[i]);
    }
  });
}

// What the update kernels run on: a float32 or float64 parameter itself; for a 16-bit
// parameter its float32 master (state "master_param", created on the first step) when the
// group keeps one, else a fresh float32 copy. A master left over from before the parameter
// was converted to float32/float64 (Module::to) or the option was turned off is dropped.
Tensor update_target(const Tensor& p, std::map<std::string, Tensor>& st, bool keep_master) {
  if (!is_reduced_floating(p.dtype()) || !keep_master) st.erase("master_param");
  if (!is_reduced_floating(p.dtype())) return p;
  if (!keep_master) return detail::convert(p, DType::Float32);
  auto it = st.find("master_param");
  if (it == st.end()) return st.emplace("master_param", detail::convert(p, DType::Float32)).first->second;
  it->second.bump_version();
  reseed_stale_master(p, it->second);
  return it->second;
}

// After the kernel: a 16-bit parameter becomes its float32 target rounded once.
void finish_update(Tensor& p, const Tensor& target) {
  if (target.impl() != p.impl()) detail::raw_copy_(p, target);
}

// f(g's elements) for an update in T: the gradient as stored (contiguous, the parameter's
// dtype), a 16-bit one (of a 16-bit parameter, updated in float32) read in place and widened
// element by element in the kernel, which is exact: a widened copy was a float32 allocation per
// parameter per step.
template <class T, class F>
void with_grad_elements(const Tensor& g, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (g.dtype() == DType::BFloat16) return f(g.data<BFloat16>());
    if (g.dtype() == DType::Float16) return f(g.data<Float16>());
  }
  f(g.data<T>());
}

}  // namespace

// ---- Optimizer ----

double Optimizer::Group::h(const char* key) const {
  for (auto& e : hyper)
    if (e.first == key) return e.second;
  throw Error(std::string("optimizer: no hyperparameter \"") + key + "\"");
}

void Optimizer::add_group(std::vector<Tensor> params, std::vector<std::pair<std::string, double>> hyper) {
  check_hyperparameters({{}, hyper});
  check_params(params, name().c_str());
  std::set<const TensorImpl*> seen;
  for (auto& g : groups_)
    for (auto& p : g.params) seen.insert(p.impl());
  for (auto& p : params)
    TG_CHECK(seen.insert(p.impl()).second, name(), ": some parameters appear in more than one parameter group");
  state_.resize(state_.size() + params.size());
  groups_.push_back({std::move(params), std::move(hyper)});
}

template <class F>
void Optimizer::for_each_param_with_grad(F&& f) {
  NoGradGuard no_grad;
  size_t index = 0;
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      Tensor g = grad_for_update(p, name().c_str());
      if (g.defined()) {
        f(group, p, g, state_[index]);
        p.bump_version();
      }
      ++index;
    }
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad();
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  TG_CHECK(group < groups_.size(), name(), ": param group ", group, " is out of range for ", groups_.size(), " groups");
  return groups_[group].params;
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> out;
  for (auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

double Optimizer::get(size_t group, const std::string& key) const {
  params(group);  // range check
  for (auto& e : groups_[group].hyper)
    if (e.first == key) return e.second;
  throw Error(name() + ": no hyperparameter \"" + key + "\" in param group " + std::to_string(group));
}

bool Optimizer::has(size_t group, const std::string& key) const {
  params(group);
  for (auto& e : groups_[group].hyper)
    if (e.first == key) return true;
  return false;
}

void Optimizer::set(size_t group, const std::string& key, double value) {
  params(group);
  for (auto& e : groups_[group].hyper)
    if (e.first == key) {
      e.second = value;
      return;
    }
  throw Error(name() + ": no hyperparameter \"" + key + "\" in param group " + std::to_string(group));
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set(g, "lr", lr);
}

const std::map<std::string, Tensor>& Optimizer::state(size_t i) const {
  TG_CHECK(i < state_.size(), name(), ": parameter index ", i, " is out of range for ", state_.size(), " parameters");
  return state_[i];
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (auto& e : state_[i]) out.emplace_back("state." + std::to_string(i) + "." + e.first, e.second.clone());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (auto& e : groups_[g].hyper)
      out.emplace_back("param_groups." + std::to_string(g) + "." + e.first, scalar_tensor(e.second, DType::Float64));
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::vector<Tensor> params = all_params();
  // Parse and check everything before changing anything: a bad dict leaves the optimizer as it was.
  std::vector<std::map<std::string, Tensor>> new_state(state_.size());
  std::vector<Group> new_groups = groups_;
  std::vector<std::string> known_buffers = required_state(), optional = optional_state();
  known_buffers.insert(known_buffers.end(), optional.begin(), optional.end());
  known_buffers.push_back("master_param");
  std::set<std::string> seen;
  for (const auto& entry : state) {
    // Named references, not a structured binding: C++17 lambdas (parse_index) cannot capture one.
    const std::string& key = entry.first;
    const Tensor& value = entry.second;
    TG_CHECK(seen.insert(key).second, name(), ".load_state_dict: \"", key, "\" appears twice");
    TG_CHECK(value.defined(), name(), ".load_state_dict: \"", key, "\" is undefined");
    auto parse_index = [&](const std::string& rest, size_t limit, const char* what) -> std::pair<size_t, std::string> {
      size_t dot = rest.find('.');
      // digits without a leading zero: "state.00.exp_avg" would be a second name of state.0's
      TG_CHECK(dot != std::string::npos && dot > 0 && rest.find_first_not_of("0123456789") == dot &&
                   (dot == 1 || rest[0] != '0'),
               name(), ".load_state_dict: malformed key \"", key, "\"");
      TG_CHECK(dot <= 18, name(), ".load_state_dict: ", what, " index in \"", key, "\" is out of range for ", limit);
      const size_t i = std::stoul(rest.substr(0, dot));  // at most 18 digits: fits
      TG_CHECK(i < limit, name(), ".load_state_dict: ", what, " ", i, " in \"", key, "\" is out of range for ", limit);
      return {i, rest.substr(dot + 1)};
    };
    if (key.rfind("state.", 0) == 0) {
      auto [i, buffer] = parse_index(key.substr(6), params.size(), "parameter");
      TG_CHECK(std::find(known_buffers.begin(), known_buffers.end(), buffer) != known_buffers.end(), name(),
               ".load_state_dict: unknown buffer \"", key, "\" (", name(), " keeps ", join_keys(known_buffers), ")");
      const bool is_step = buffer == "step";
      if (is_step) {  // a count of updates: bias corrections divide by 1 - beta^step
        TG_CHECK(value.numel() == 1, name(), ".load_state_dict: \"", key,
                 "\" must be one non-negative whole number, got shape ", format_shape(value.shape()));
        const double n = detail::convert(value, DType::Float64).item();
        TG_CHECK(std::isfinite(n) && n >= 0 && n == std::floor(n), name(), ".load_state_dict: \"", key,
                 "\" must be one non-negative whole number, got ", n);
      }
      TG_CHECK(is_step || value.shape() == params[i].shape(), name(), ".load_state_dict: \"", key, "\" has shape ",
               format_shape(value.shape()), ", expected ", format_shape(params[i].shape()));
      // A master copy exists for 16-bit parameters only; every state buffer is float32 for them.
      TG_CHECK(buffer != "master_param" || is_reduced_floating(params[i].dtype()), name(), ".load_state_dict: \"",
               key, "\" is a float32 master copy, but parameter ", i, " is ", dtype_name(params[i].dtype()),
               ", which needs none");
      TG_CHECK(is_step || is_floating(value.dtype()), name(), ".load_state_dict: \"", key, "\" is ",
               dtype_name(value.dtype()), "; a state buffer is floating (a wrong checkpoint, not a conversion)");
      const DType dt = is_step ? DType::Float64 : state_dtype(params[i].dtype());
      new_state[i][buffer] = detail::convert(is_step ? value.reshape({}) : value, dt).contiguous().clone();
    } else if (key.rfind("param_groups.", 0) == 0) {
      auto [g, hyper] = parse_index(key.substr(13), groups_.size(), "param group");
      TG_CHECK(value.numel() == 1, name(), ".load_state_dict: \"", key, "\" must hold one value, got shape ",
               format_shape(value.shape()));
      bool known = false;
      for (auto& e : new_groups[g].hyper)
        if (e.first == hyper) {
          e.second = value.item();
          known = true;
        }
      TG_CHECK(known, name(), ".load_state_dict: unknown hyperparameter \"", key, "\"");
    } else {
      throw Error(name() + ".load_state_dict: unexpected key \"" + key + "\"");
    }
  }
  // A parameter's state is whole or absent (absent: it starts afresh, as in PyTorch): a missing
  // buffer would be re-created as zeros beside loaded ones, or fail at the next step.
  const std::vector<std::string> required = required_state();
  for (size_t i = 0; i < new_state.size(); ++i) {
    if (new_state[i].empty()) continue;
    for (const std::string& k : required)
      TG_CHECK(new_state[i].count(k), name(), ".load_state_dict: the state of parameter ", i, " has no \"state.", i,
               ".", k, "\" (its state is ", join_keys(required), ", all or none)");
  }
  for (size_t g = 0; g < new_groups.size(); ++g) {
    try {
      check_hyperparameters(new_groups[g]);
    } catch (const Error& e) {
      TG_ERROR(name(), ".load_state_dict: param_groups.", g, ": ", e.what());
    }
  }
  state_ = std::move(new_state);
  groups_ = std::move(new_groups);
}

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, SGDOptions o) { add_param_group(std::move(params), o); }
SGD::SGD(const StateDict& named, SGDOptions o) : SGD(values_of(named), o) {}

void SGD::check_hyperparameters(const Group& g) const {
  check_nonneg("SGD", "learning rate", g.h("lr"));
  check_nonneg("SGD", "momentum", g.h("momentum"));
  check_nonneg("SGD", "weight_decay", g.h("weight_decay"));
  TG_CHECK(std::isfinite(g.h("dampening")), "SGD: invalid dampening value: ", g.h("dampening"));
  check_flag("SGD", "nesterov", g.h("nesterov"));
  check_flag("SGD", "float32_master_weights", g.h("float32_master_weights"));
  TG_CHECK(g.h("nesterov") == 0 || (g.h("momentum") > 0 && g.h("dampening") == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::add_param_group(std::vector<Tensor> params, SGDOptions o) {
  add_group(std::move(params), {{"lr", o.lr},
                                {"momentum", o.momentum},
                                {"dampening", o.dampening},
                                {"weight_decay", o.weight_decay},
                                {"nesterov", o.nesterov ? 1.0 : 0.0},
                                {"float32_master_weights", o.float32_master_weights ? 1.0 : 0.0}});
}

void SGD::step() {
  for_each_param_with_grad([](const Group& group, Tensor& p, const Tensor& g, std::map<std::string, Tensor>& st) {
    const double momentum = group.h("momentum");
    Tensor w = update_target(p, st, group.h("float32_master_weights") != 0);
    bool first = false;
    Tensor buf;
    if (momentum != 0) {
      auto it = st.find("momentum_buffer");
      first = it == st.end();
      if (first) it = st.emplace("momentum_buffer", Tensor::empty(p.shape(), w.dtype())).first;
      buf = it->second;
      buf.bump_version();
    }
    dispatch_floating(w.dtype(), "SGD", [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_grad_elements<T>(g, [&](const auto* gp) {
        sgd_kernel(w.data<T>(), gp, buf.defined() ? buf.data<T>() : nullptr, p.numel(), group.h("lr"), momentum,
                   group.h("dampening"), group.h("weight_decay"), group.h("nesterov") != 0, first);
      });
    });
    finish_update(p, w);
  });
}

// ---- Adam, AdamW ----

Adam::Adam(std::vector<Tensor> params, AdamOptions o) { add_param_group(std::move(params), o); }
Adam::Adam(const StateDict& named, AdamOptions o) : Adam(values_of(named), o) {}

void Adam::check_hyperparameters(const Group& g) const {
  const std::string n = name();
  check_nonneg(n, "learning rate", g.h("lr"));
  check_nonneg(n, "epsilon", g.h("eps"));
  TG_CHECK(g.h("beta1") >= 0 && g.h("beta1") < 1, n, ": invalid beta parameter at index 0: ", g.h("beta1"));
  TG_CHECK(g.h("beta2") >= 0 && g.h("beta2") < 1, n, ": invalid beta parameter at index 1: ", g.h("beta2"));
  check_nonneg(n, "weight_decay", g.h("weight_decay"));
  check_flag(n, "float32_master_weights", g.h("float32_master_weights"));
}

void Adam::add_param_group(std::vector<Tensor> params, AdamOptions o) {
  add_group(std::move(params), {{"lr", o.lr},
                                {"beta1", o.beta1},
                                {"beta2", o.beta2},
                                {"eps", o.eps},
                                {"weight_decay", o.weight_decay},
                                {"float32_master_weights", o.float32_master_weights ? 1.0 : 0.0}});
}

void Adam::step() {
  const bool decoupled = decoupled_;
  for_each_param_with_grad([decoupled](const Group& group, Tensor& p, const Tensor& g,
                                       std::map<std::string, Tensor>& st) {
    Tensor w = update_target(p, st, group.h("float32_master_weights") != 0);
    if (!st.count("step")) {
      st["step"] = scalar_tensor(0.0, DType::Float64);
      st["exp_avg"] = zeros(p.shape(), w.dtype());
      st["exp_avg_sq"] = zeros(p.shape(), w.dtype());
    }
    Tensor& step_t = st["step"];
    const double step = step_t.item() + 1;
    step_t.fill_(step);
    Tensor& m = st["exp_avg"];
    Tensor& v = st["exp_avg_sq"];
    m.bump_version();
    v.bump_version();
    dispatch_floating(w.dtype(), decoupled ? "AdamW" : "Adam", [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_grad_elements<T>(g, [&](const auto* gp) {
        adam_kernel(w.data<T>(), gp, m.data<T>(), v.data<T>(), p.numel(), group.h("lr"), group.h("beta1"),
                    group.h("beta2"), group.h("eps"), group.h("weight_decay"), decoupled, step);
      });
    });
    finish_update(p, w);
  });
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions o) : Adam(true) { add_param_group(std::move(params), o); }
AdamW::AdamW(const StateDict& named, AdamOptions o) : AdamW(values_of(named), o) {}

// ---- RMSprop ----

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions o) { add_param_group(std::move(params), o); }
RMSprop::RMSprop(const StateDict& named, RMSpropOptions o) : RMSprop(values_of(named), o) {}

void RMSprop::check_hyperparameters(const Group& g) const {
  check_nonneg("RMSprop", "learning rate", g.h("lr"));
  check_nonneg("RMSprop", "epsilon", g.h("eps"));
  check_nonneg("RMSprop", "momentum", g.h("momentum"));
  check_nonneg("RMSprop", "weight_decay", g.h("weight_decay"));
  check_nonneg("RMSprop", "alpha", g.h("alpha"));
  check_flag("RMSprop", "centered", g.h("centered"));
  check_flag("RMSprop", "float32_master_weights", g.h("float32_master_weights"));
}

void RMSprop::add_param_group(std::vector<Tensor> params, RMSpropOptions o) {
  add_group(std::move(params), {{"lr", o.lr},
                                {"alpha", o.alpha},
                                {"eps", o.eps},
                                {"weight_decay", o.weight_decay},
                                {"momentum", o.momentum},
                                {"centered", o.centered ? 1.0 : 0.0},
                                {"float32_master_weights", o.float32_master_weights ? 1.0 : 0.0}});
}

void RMSprop::step() {
  for_each_param_with_grad([](const Group& group, Tensor& p, const Tensor& g, std::map<std::string, Tensor>& st) {
    Tensor w = update_target(p, st, group.h("float32_master_weights") != 0);
    const double momentum = group.h("momentum");
    const bool centered = group.h("centered") != 0;
    if (!st.count("step")) st["step"] = scalar_tensor(0.0, DType::Float64);
    // Buffers start at zero when first needed: a scheduler (OneCycleLR) may turn momentum on later.
    auto buffer = [&](const char* key) {
      auto it = st.find(key);
      if (it == st.end()) it = st.emplace(key, zeros(p.shape(), w.dtype())).first;
      it->second.bump_version();
      return it->second;
    };
    Tensor square_avg = buffer("square_avg");
    Tensor grad_avg = centered ? buffer("grad_avg") : Tensor();
    Tensor buf = momentum > 0 ? buffer("momentum_buffer") : Tensor();
    st["step"].fill_(st["step"].item() + 1);
    dispatch_floating(w.dtype(), "RMSprop", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
      with_grad_elements<T>(g, [&](const auto* gp) {
        rmsprop_kernel(w.data<T>(), gp, square_avg.data<T>(), ptr(grad_avg), ptr(buf), p.numel(), group.h("lr"),
                       group.h("alpha"), group.h("eps"), group.h("weight_decay"), momentum);
      });
    });
    finish_update(p, w);
  });
}

// ---- clip_grad_norm_, clip_grad_value_ ----

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  TG_CHECK(norm_type >= 1 || std::isinf(norm_type), "clip_grad_norm_: norm_type must be >= 1, inf or -inf, got ",
           norm_type);
  std::vector<Tensor> grads;
  for (auto& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // Each gradient's norm, accumulated in double, then the norm of those norms (PyTorch's order).
  // inf: the largest |x|; -inf: the smallest (PyTorch's); both start from the other end.
  const bool smallest = norm_type == -INFINITY;
  double total = smallest ? INFINITY : 0;
  for (auto& g : grads) {
    std::vector<double> values = g.to(DType::Float64).to_vector<double>();
    double norm = smallest ? INFINITY : 0;
    if (std::isinf(norm_type)) {
      // NaN wins, as in PyTorch's max / min (std::max(a, NaN) would return a, hiding the NaN)
      auto pick = [smallest](double a, double b) {
        return std::isnan(a) || std::isnan(b) ? NAN : smallest ? std::min(a, b) : std::max(a, b);
      };
      for (double x : values) norm = pick(norm, std::abs(x));
      total = pick(total, norm);
    } else if (norm_type == 2.0) {
      for (double x : values) norm += x * x;
      total += norm;  // the sum of squared per-tensor norms
    } else {
      for (double x : values) norm += std::pow(std::abs(x), norm_type);
      total += norm;
    }
  }
  if (!std::isinf(norm_type)) total = norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
  const double clip_coef = std::min(max_norm / (total + 1e-6), 1.0);
  NoGradGuard no_grad;
  for (auto& g : grads) g.mul_(clip_coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  TG_CHECK(clip_value >= 0, "clip_grad_value_: expected clip_value >= 0, got ", clip_value);
  for (auto& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    Tensor w = detail::widen(g).contiguous();  // g itself when float32/float64 and contiguous
    dispatch_floating(w.dtype(), "clip_grad_value_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T hi = static_cast<T>(clip_value), lo = -hi;
      T* x = w.data<T>();
      for (int64_t i = 0, n = w.numel(); i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);  // NaN stays
    });
    if (w.impl() != g.impl())
      detail::raw_copy_(g, w);
    else
      g.bump_version();
  }
}

}  // namespace tg
