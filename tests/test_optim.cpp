// Optimizers against torch.optim trajectories (tools/fixtures/optim.py), their state dicts,
// clip_grad_norm_, clip_grad_value_ and the schedulers (more in test_lr_scheduler.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>

#include "golden.h"
#include "test_util.h"

using namespace tg;
using tg::testing::expect_close;
using tg::testing::GoldenCase;
using tg::testing::load_golden_cases;

namespace {

// float64 updates that follow PyTorch's operation order agree to rounding: a few ulps per
// step, compounded over 6 steps, stays far below 1e-12 relative. The absolute floor covers
// entries that pass near zero, where relative error is meaningless.
constexpr double kRtol = 1e-12;
constexpr double kAtol = 1e-14;

std::unique_ptr<Optimizer> make_optimizer(const GoldenCase& c, std::vector<Tensor> params) {
  const auto& o = c.json["options"];
  const std::string kind = c.json["kind"];
  if (kind == "SGD") {
    SGDOptions s;
    s.lr = o.value("lr", s.lr);
    s.momentum = o.value("momentum", 0.0);
    s.dampening = o.value("dampening", 0.0);
    s.weight_decay = o.value("weight_decay", 0.0);
    s.nesterov = o.value("nesterov", false);
    return std::make_unique<SGD>(params, s);
  }
  if (kind == "RMSprop") {
    RMSpropOptions r;
    r.lr = o.value("lr", r.lr);
    r.alpha = o.value("alpha", r.alpha);
    r.eps = o.value("eps", r.eps);
    r.weight_decay = o.value("weight_decay", r.weight_decay);
    r.momentum = o.value("momentum", r.momentum);
    r.centered = o.value("centered", r.centered);
    return std::make_unique<RMSprop>(params, r);
  }
  AdamOptions a = kind == "AdamW" ? AdamW::with_default_decay() : AdamOptions{};
  a.lr = o.value("lr", a.lr);
  a.beta1 = o.value("beta1", a.beta1);
  a.beta2 = o.value("beta2", a.beta2);
  a.eps = o.value("eps", a.eps);
  a.weight_decay = o.value("weight_decay", a.weight_decay);
  if (kind == "AdamW") return std::make_unique<AdamW>(params, a);
  return std::make_unique<Adam>(params, a);
}

bool skipped(const GoldenCase& c, int step, int param) {
  for (auto& s : c.json["skip"])
    if (s[0] == step && s[1] == param) return true;
  return false;
}

std::vector<Tensor> fresh_params(const GoldenCase& c) {
  return {c.tensor("param0").clone().requires_grad_(), c.tensor("param1").clone().requires_grad_()};
}

// The largest |ours - PyTorch's| / |PyTorch's| seen by run_steps, per optimizer kind (reported).
std::map<std::string, double> worst_relative;

void track_worst(const std::string& kind, const Tensor& actual, const Tensor& expected) {
  const std::vector<double> a = actual.to(DType::Float64).to_vector<double>();
  const std::vector<double> e = expected.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::abs(e[i]) > kAtol) worst_relative[kind] = std::max(worst_relative[kind], std::abs(a[i] - e[i]) / std::abs(e[i]));
}

// Runs steps [from, to) of the case and checks each against the trajectory.
void run_steps(const GoldenCase& c, Optimizer& opt, std::vector<Tensor>& params, int from, int to) {
  for (int step = from; step < to; ++step) {
    for (int i = 0; i < 2; ++i) {
      params[i].zero_grad();
      if (!skipped(c, step, i)) params[i].set_grad(c.tensor("grads" + std::to_string(i)).select(0, step).clone());
    }
    opt.step();
    for (int i = 0; i < 2; ++i) track_worst(c.json["kind"], params[i], c.tensor("trajectory" + std::to_string(i)).select(0, step));
    for (int i = 0; i < 2; ++i)
      expect_close(params[i], c.tensor("trajectory" + std::to_string(i)).select(0, step), kRtol, kAtol,
                   c.name() + " step " + std::to_string(step) + " param " + std::to_string(i));
    // Each state buffer after the step ("state.<i>.<key>"), by PyTorch's names.
    for (auto& [key, file] : c.json["state_steps"].items()) {
      const size_t i = std::stoul(key.substr(6, 1));
      const std::string buffer = key.substr(8);
      ASSERT_TRUE(opt.state(i).count(buffer)) << c.name() << " step " << step << ": no " << key;
      const Tensor expected = load_npy(tg::testing::data_path("optim/" + file.get<std::string>())).select(0, step);
      expect_close(opt.state(i).at(buffer), expected, kRtol, kAtol, c.name() + " step " + std::to_string(step) + " " + key);
    }
  }
}

std::vector<GoldenCase> optimizer_cases() {
  std::vector<GoldenCase> out;
  for (auto& c : load_golden_cases("optim"))
    if (c.json["kind"] != "clip_grad_norm_" && c.json["kind"] != "clip_grad_value_") out.push_back(c);
  return out;
}

}  // namespace

TEST(Optim, TrajectoriesMatchPyTorch) {
  auto cases = optimizer_cases();
  ASSERT_EQ(cases.size(), 15u);  // 3 SGD, 4 Adam/AdamW, 8 RMSprop (every momentum/centered/decay mix)
  for (auto& c : cases) {
    SCOPED_TRACE(c.name());
    std::vector<Tensor> params = fresh_params(c);
    auto opt = make_optimizer(c, params);
    run_steps(c, *opt, params, 0, c.json["steps"]);
    // The final state carries PyTorch's names and values (step, exp_avg, momentum_buffer, ...).
    StateDict state = opt->state_dict();
    for (auto& [key, file] : c.json["state"].items()) {
      bool found = false;
      for (auto& [name, value] : state)
        if (name == key) {
          found = true;
          expect_close(value, load_npy(tg::testing::data_path("optim/" + file.get<std::string>())), kRtol, kAtol,
                       c.name() + " " + key);
        }
      EXPECT_TRUE(found) << c.name() << ": state dict lacks " << key;
    }
  }
  for (auto& [kind, worst] : worst_relative)
    std::printf("[ measured ] %s float64 trajectories vs torch.optim: worst relative error %.3g\n", kind.c_str(), worst);
}

TEST(Optim, StateDictRoundTripResumesTheTrajectory) {
  for (auto& c : optimizer_cases()) {
    SCOPED_TRACE(c.name());
    std::vector<Tensor> params = fresh_params(c);
    auto opt = make_optimizer(c, params);
    run_steps(c, *opt, params, 0, 3);
    StateDict saved = opt->state_dict();
    // A new optimizer over copies of the parameters, with default hyperparameters that the
    // state dict must overwrite.
    std::vector<Tensor> resumed = {params[0].detach().clone().requires_grad_(), params[1].detach().clone().requires_grad_()};
    std::unique_ptr<Optimizer> fresh;
    if (c.json["kind"] == "SGD") {
      SGDOptions o;
      o.momentum = c.json["options"].value("momentum", 0.0) > 0 ? 0.5 : 0.0;  // momentum 0 vs not changes the state layout
      o.nesterov = false;
      fresh = std::make_unique<SGD>(resumed, o);
    } else if (c.json["kind"] == "RMSprop") {
      fresh = std::make_unique<RMSprop>(resumed);  // default options: the dict sets them all
    } else if (c.json["kind"] == "AdamW") {
      fresh = std::make_unique<AdamW>(resumed);
    } else {
      fresh = std::make_unique<Adam>(resumed, AdamOptions{});
    }
    fresh->load_state_dict(saved);
    EXPECT_EQ(fresh->lr(), c.json["options"]["lr"].get<double>());
    run_steps(c, *fresh, resumed, 3, c.json["steps"]);
  }
}

// The README's claim: an optimizer's step records nothing and allocates nothing after the first
// (its state is created then). Every step after it must leave the allocation high-water mark
// where it was, and the parameters leaves without history; for each optimizer and its options
// that keep extra state.
TEST(Optim, StepsAfterTheFirstAllocateAndRecordNothing) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    std::vector<std::pair<std::string, std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>>> makers = {
        {"SGD momentum nesterov decay",
         [](std::vector<Tensor> p) {
           SGDOptions o;
           o.lr = 0.01, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 1e-4;
           return std::unique_ptr<Optimizer>(new SGD(std::move(p), o));
         }},
        {"Adam decay", [](std::vector<Tensor> p) {
           AdamOptions o;
           o.weight_decay = 1e-4;
           return std::unique_ptr<Optimizer>(new Adam(std::move(p), o));
         }},
        {"AdamW", [](std::vector<Tensor> p) { return std::unique_ptr<Optimizer>(new AdamW(std::move(p))); }},
        {"RMSprop centered momentum", [](std::vector<Tensor> p) {
           RMSpropOptions o;
           o.centered = true, o.momentum = 0.9, o.weight_decay = 1e-4;
           return std::unique_ptr<Optimizer>(new RMSprop(std::move(p), o));
         }}};
    for (auto& [what, make] : makers) {
      SCOPED_TRACE(what + " " + dtype_name(dt));
      manual_seed(5);
      std::vector<Tensor> params = {randn({64, 32}, dt).requires_grad_(), randn({32}, dt).requires_grad_()};
      for (Tensor& p : params) p.set_grad(randn(p.shape(), dt));
      std::unique_ptr<Optimizer> opt = make(params);
      opt->step();  // creates the state (and the float32 master copies of bf16 parameters)
      const MemoryStats before = memory_stats();
      reset_peak_memory();
      for (int i = 0; i < 5; ++i) opt->step();
      const MemoryStats after = memory_stats();
      EXPECT_EQ(after.peak_bytes, before.allocated_bytes) << "a step allocated a buffer";
      EXPECT_EQ(after.allocations, before.allocations);
      for (const Tensor& p : params) {
        EXPECT_TRUE(p.is_leaf());
        EXPECT_EQ(p.grad_fn(), nullptr);
      }
    }
  }
}

TEST(Optim, StateDictNames) {
  Tensor a = zeros({2}, DType::Float64).requires_grad_();
  Tensor b = zeros({3}, DType::Float64).requires_grad_();
  Adam opt({a, b}, AdamOptions{});
  b.set_grad(ones({3}, DType::Float64));
  opt.step();  // only b has a gradient: only b gets state
  std::vector<std::string> names;
  for (auto& e : opt.state_dict()) names.push_back(e.first);
  std::vector<std::string> expected = {"state.1.exp_avg",     "state.1.exp_avg_sq",  "state.1.step",
                                       "param_groups.0.lr",   "param_groups.0.beta1", "param_groups.0.beta2",
                                       "param_groups.0.eps",  "param_groups.0.weight_decay",
                                       "param_groups.0.float32_master_weights"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(opt.state_dict()[3].second.dim(), 0);  // hyperparameters are 0-d tensors
}

TEST(Optim, LoadStateDictRejectsBadInput) {
  Tensor a = zeros({2}, DType::Float64).requires_grad_();
  SGD opt({a}, SGDOptions{0.1, 0.9});
  EXPECT_THROW(opt.load_state_dict({{"state.1.momentum_buffer", zeros({2}, DType::Float64)}}), Error);  // no param 1
  EXPECT_THROW(opt.load_state_dict({{"state.0.momentum_buffer", zeros({3}, DType::Float64)}}), Error);  // shape
  EXPECT_THROW(opt.load_state_dict({{"param_groups.0.betas", scalar_tensor(1.0)}}), Error);  // not an SGD knob
  EXPECT_THROW(opt.load_state_dict({{"lr", scalar_tensor(1.0)}}), Error);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);  // a rejected dict changes nothing
}

TEST(Optim, ValidatesOptions) {
  Tensor a = zeros({2}).requires_grad_();
  SGDOptions nesterov_without_momentum;
  nesterov_without_momentum.nesterov = true;
  EXPECT_THROW(SGD({a}, nesterov_without_momentum), Error);
  AdamOptions bad_beta;
  bad_beta.beta1 = 1.0;
  EXPECT_THROW(Adam({a}, bad_beta), Error);
  EXPECT_THROW(SGD({a, a}, SGDOptions{}), Error);  // the same tensor twice
  EXPECT_THROW(SGD(std::vector<Tensor>{}, SGDOptions{}), Error);
}

TEST(Optim, Float32UpdateAndVersionBump) {
  Tensor p = from_vector(std::vector<float>{1.0f, -2.0f}, {2}).requires_grad_();
  p.set_grad(from_vector(std::vector<float>{0.5f, 0.25f}, {2}));
  SGD opt({p}, SGDOptions{0.1});
  const uint64_t before = p.version();
  opt.step();
  std::vector<float> v = p.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 0.95f);
  EXPECT_FLOAT_EQ(v[1], -2.025f);
  EXPECT_GT(p.version(), before);  // a tensor saved for backward before the update is now stale
}

TEST(Optim, ParamWithoutGradIsLeftAlone) {
  Tensor p = ones({3}, DType::Float64).requires_grad_();
  Adam opt({p}, AdamOptions{});
  opt.step();
  EXPECT_EQ(p.to_vector<double>(), std::vector<double>(3, 1.0));
  EXPECT_TRUE(opt.state(0).empty());
}

TEST(ClipGradNorm, MatchesPyTorch) {
  int n = 0;
  for (auto& c : load_golden_cases("optim")) {
    if (c.json["kind"] != "clip_grad_norm_") continue;
    ++n;
    SCOPED_TRACE(c.name());
    std::vector<Tensor> params = {zeros({3, 4}, DType::Float64).requires_grad_(), zeros({5}, DType::Float64).requires_grad_()};
    for (int i = 0; i < 2; ++i) params[i].set_grad(c.tensor("grad" + std::to_string(i)).clone());
    const double norm_type = c.json["norm_type"].is_string() ? INFINITY : c.json["norm_type"].get<double>();
    const double total = clip_grad_norm_(params, c.json["max_norm"], norm_type);
    // Per-tensor norms summed in a different order than PyTorch's: rounding only.
    EXPECT_NEAR(total, c.json["total_norm"].get<double>(), 1e-12 * total);
    for (int i = 0; i < 2; ++i)
      expect_close(params[i].grad(), c.tensor("clipped" + std::to_string(i)), kRtol, kAtol, c.name());
  }
  EXPECT_EQ(n, 4);
}

TEST(ClipGradValue, MatchesPyTorch) {
  int n = 0;
  for (auto& c : load_golden_cases("optim")) {
    if (c.json["kind"] != "clip_grad_value_") continue;
    ++n;
    SCOPED_TRACE(c.name());
    std::vector<Tensor> params = {zeros({3, 4}, DType::Float64).requires_grad_(), zeros({5}, DType::Float64).requires_grad_()};
    for (int i = 0; i < 2; ++i) params[i].set_grad(c.tensor("grad" + std::to_string(i)).clone());
    clip_grad_value_(params, c.json["clip_value"]);
    // A clamp moves no value but to the bound: exact.
    for (int i = 0; i < 2; ++i) expect_close(params[i].grad(), c.tensor("clipped" + std::to_string(i)), 0, 0, c.name());
  }
  EXPECT_EQ(n, 2);
}

TEST(ClipGradValue, SixteenBitNaNAndBadInput) {
  Tensor p = zeros({4}, DType::BFloat16).requires_grad_();
  p.set_grad(from_vector(std::vector<float>{-3.0f, 0.25f, NAN, 2.0f}, {4}).to(DType::BFloat16));
  Tensor none = zeros({2}).requires_grad_();  // no gradient: skipped
  const uint64_t before = p.grad().version();
  clip_grad_value_({p, none}, 0.3);
  std::vector<float> g = p.grad().to(DType::Float32).to_vector<float>();
  EXPECT_EQ(g[0], static_cast<float>(BFloat16(-0.3f)));  // the bound rounded to bfloat16
  EXPECT_EQ(g[1], 0.25f);
  EXPECT_TRUE(std::isnan(g[2]));  // NaN stays NaN, as PyTorch's clamp
  EXPECT_EQ(g[3], static_cast<float>(BFloat16(0.3f)));
  EXPECT_EQ(p.grad().dtype(), DType::BFloat16);
  EXPECT_GT(p.grad().version(), before);
  EXPECT_FALSE(none.grad().defined());
  EXPECT_THROW(clip_grad_value_({p}, -1.0), Error);
  EXPECT_THROW(clip_grad_value_({p}, NAN), Error);
}

TEST(RMSprop, ValidatesOptionsAndNamesItsState) {
  Tensor a = zeros({2}, DType::Float64).requires_grad_();
  for (auto bad : {&RMSpropOptions::lr, &RMSpropOptions::alpha, &RMSpropOptions::eps, &RMSpropOptions::momentum,
                   &RMSpropOptions::weight_decay}) {
    RMSpropOptions o;
    o.*bad = -0.5;
    EXPECT_THROW(RMSprop({a}, o), Error);
  }
  RMSpropOptions o;
  o.momentum = 0.9;
  o.centered = true;
  RMSprop opt({a}, o);
  a.set_grad(ones({2}, DType::Float64));
  opt.step();
  std::vector<std::string> names;
  for (auto& e : opt.state_dict()) names.push_back(e.first);
  std::vector<std::string> expected = {"state.0.grad_avg",        "state.0.momentum_buffer",
                                       "state.0.square_avg",      "state.0.step",
                                       "param_groups.0.lr",       "param_groups.0.alpha",
                                       "param_groups.0.eps",      "param_groups.0.weight_decay",
                                       "param_groups.0.momentum", "param_groups.0.centered",
                                       "param_groups.0.float32_master_weights"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(opt.state(0).at("step").item(), 1.0);
}

// A gradient whose square overflows float32: square_avg becomes Inf and the step 0 (PyTorch 1.13:
// the parameter stays), centered or not; the centered variance Inf - grad_avg^2 is one fused
// multiply-add, as in PyTorch's addcmul, so it stays Inf instead of Inf - Inf = NaN.
TEST(RMSprop, AGradientWhoseSquareOverflowsLeavesTheParameter) {
  for (bool centered : {false, true}) {
    for (double momentum : {0.0, 0.9}) {
      SCOPED_TRACE(std::string(centered ? "centered" : "plain") + ", momentum " + std::to_string(momentum));
      Tensor p = from_vector(std::vector<float>{1.0f, 2.0f}, {2}).requires_grad_();
      RMSpropOptions o;
      o.lr = 0.01;
      o.centered = centered;
      o.momentum = momentum;
      RMSprop opt({p}, o);
      p.set_grad(from_vector(std::vector<float>{1e30f, 1.0f}, {2}));
      opt.step();
      const std::vector<float> v = p.to_vector<float>();
      EXPECT_EQ(v[0], 1.0f);
      // PyTorch: 1.8999999761581421 (plain), 1.8994961977005005 (centered)
      EXPECT_FLOAT_EQ(v[1], centered ? 1.8994961977005005f : 1.8999999761581421f);
    }
  }
}

TEST(Schedulers, StepLR) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{1.0});
  StepLR sched(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 7; ++i) {
    lrs.push_back(opt.lr());
    sched.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.25}));
}

// PyTorch's StepLR multiplies the current lr (torch 1.13's sequence, by repr): the closed form
// base * gamma^k is an ulp off at 45 of 61 steps of some schedules, and ignored an lr set from
// outside.
TEST(Schedulers, StepLRIsPyTorchsRecursionToTheBit) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1});
  StepLR sched(opt, 3, 0.1);
  std::vector<double> lrs;
  for (int i = 0; i < 13; ++i) {
    lrs.push_back(opt.lr());
    sched.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002,
                                      0.0010000000000000002, 0.0010000000000000002, 0.0010000000000000002,
                                      0.00010000000000000003, 0.00010000000000000003, 0.00010000000000000003,
                                      1.0000000000000004e-05}));
  SGD other({p}, SGDOptions{0.1});
  StepLR halving(other, 2, 0.5);
  lrs.clear();
  for (int i = 0; i < 7; ++i) {
    if (i == 3) other.set_lr(1.0);
    lrs.push_back(other.lr());
    halving.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.1, 0.05, 1.0, 0.5, 0.5, 0.25}));
  halving.set_last_epoch(4);  // a jump takes the closed form, as PyTorch's step(epoch)
  EXPECT_EQ(other.lr(), 0.025);
}

TEST(Schedulers, WarmupCosine) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{2.0});
  WarmupCosineLR sched(opt, 4, 12);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.0);  // warmup starts from zero
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);  // 2 * 1/4
  sched.set_last_epoch(4);
  EXPECT_DOUBLE_EQ(opt.lr(), 2.0);  // peak
  sched.set_last_epoch(8);
  EXPECT_NEAR(opt.lr(), 1.0, 1e-15);  // half way down the cosine: 2 * 0.5 * (1 + cos(pi/2))
  sched.set_last_epoch(12);
  EXPECT_NEAR(opt.lr(), 0.0, 1e-15);
  sched.set_last_epoch(20);
  EXPECT_NEAR(opt.lr(), 0.0, 1e-15);  // held at the floor after total_steps
  EXPECT_NEAR(warmup_cosine_factor(8, 4, 12, 0.1), 0.55, 1e-15);  // min_factor lifts the floor
}

TEST(Schedulers, LambdaLRPerGroup) {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  SGD opt({a}, SGDOptions{1.0});
  opt.add_param_group({b}, SGDOptions{0.1});
  LambdaLR sched(opt, [](int64_t e) { return 1.0 / (1 + e); });
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.5);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.05);
}

// The max-abs norm of gradients holding a NaN is NaN (PyTorch's), not the largest finite value:
// std::max dropped the NaN, and "skip the step when the norm is not finite" never saw it.
TEST(Optim, ClipGradNormInfinityNormIsNanWhenAGradientIs) {
  Tensor a = zeros({3}, DType::Float64).requires_grad_(), b = zeros({2}, DType::Float64).requires_grad_();
  for (bool nan_first : {false, true}) {
    a.set_grad(from_vector(nan_first ? std::vector<double>{NAN, 0.3, 2.5} : std::vector<double>{0.3, NAN, 2.5}, {3}));
    b.set_grad(from_vector(std::vector<double>{4.0, -0.1}, {2}));
    EXPECT_TRUE(std::isnan(clip_grad_norm_({a, b}, 1.0, INFINITY)));
    for (double v : b.grad().to_vector<double>()) EXPECT_TRUE(std::isnan(v));  // scaled by NaN, as PyTorch
  }
  a.set_grad(from_vector(std::vector<double>{0.3, -8, 2.5}, {3}));
  b.set_grad(from_vector(std::vector<double>{4.0, -0.1}, {2}));
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0, INFINITY), 8.0);
}

// A state dict that lies (from a file): every part is checked before anything changes, and the
// answer is a tg::Error naming the key, never std::out_of_range or NaN parameters later.
TEST(Optim, LoadStateDictRefusesBrokenStepsAndPartialStates) {
  Tensor p = from_vector(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Adam opt({p}, AdamOptions{});
  p.set_grad(from_vector(std::vector<double>{1, 1, 1}, {3}));
  opt.step();
  const StateDict good = opt.state_dict();
  auto without = [&](const std::string& key) {
    StateDict d;
    for (const auto& e : good)
      if (e.first != key) d.emplace_back(e.first, e.second);
    return d;
  };
  auto with = [&](const std::string& key, const Tensor& value) {
    StateDict d = good;
    for (auto& e : d)
      if (e.first == key) e.second = value;
    return d;
  };
  const std::vector<std::pair<StateDict, std::string>> cases = {
      {without("state.0.exp_avg"), "Adam.load_state_dict: the state of parameter 0 has no \"state.0.exp_avg\" (its "
                                   "state is step, exp_avg and exp_avg_sq, all or none)"},
      {without("state.0.step"), "has no \"state.0.step\""},
      {with("state.0.step", zeros({0}, DType::Float64)), "\"state.0.step\" must be one non-negative whole number, got "
                                                         "shape [0]"},
      {with("state.0.step", scalar_tensor(-1.0, DType::Float64)), "must be one non-negative whole number, got -1"},
      {with("state.0.step", scalar_tensor(1.5, DType::Float64)), "must be one non-negative whole number, got 1.5"},
      {with("state.0.step", scalar_tensor(NAN, DType::Float64)), "must be one non-negative whole number, got nan"},
      {{{"state.99999999999999999999999.step", scalar_tensor(1.0, DType::Float64)}},
       "Adam.load_state_dict: parameter index in \"state.99999999999999999999999.step\" is out of range for 1"},
      // An integer moment is a wrong checkpoint (it was converted silently), and hyperparameters
      // pass the constructor's checks (a NaN or negative learning rate loaded silently).
      {with("state.0.exp_avg", zeros({3}, DType::Int64)),
       "\"state.0.exp_avg\" is int64; a state buffer is floating"},
      {with("param_groups.0.lr", scalar_tensor(-1.0, DType::Float64)), "Adam: invalid learning rate value: -1"},
      {with("param_groups.0.lr", scalar_tensor(NAN, DType::Float64)), "Adam: invalid learning rate value: nan"},
      {with("param_groups.0.beta2", scalar_tensor(1.0, DType::Float64)), "Adam: invalid beta parameter at index 1: 1"},
      {with("param_groups.0.float32_master_weights", scalar_tensor(0.5, DType::Float64)),
       "Adam: invalid float32_master_weights value: 0.5 (a flag: 0 or 1)"},
  };
  for (const auto& c : cases) {  // (no structured binding: C++17 lambdas cannot capture one)
    const std::string err = error_of([&] { opt.load_state_dict(c.first); });
    EXPECT_NE(err.find(c.second), std::string::npos) << err;
  }
  // nothing changed: the next step is the one the untouched optimizer takes
  EXPECT_EQ(opt.state(0).at("step").item(), 1.0);
  // a whole state loads, and a parameter without any state starts afresh (as PyTorch)
  opt.load_state_dict(good);
  StateDict empty_state;
  for (const auto& e : good)
    if (e.first.rfind("state.", 0) != 0) empty_state.emplace_back(e.first, e.second);
  opt.load_state_dict(empty_state);
  EXPECT_TRUE(opt.state(0).empty());
}

// Buffer names the optimizer does not keep (a typo, another optimizer's dict) and keys given twice
// are refused as the header says, with nothing changed; they were stored and saved back.
TEST(Optim, LoadStateDictRefusesUnknownBuffersAndRepeatedKeys) {
  Tensor p = zeros({2}, DType::Float64).requires_grad_();
  SGD sgd({p}, SGDOptions{0.1, 0.9});
  const Tensor z = zeros({2}, DType::Float64);
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"state.0.exp_avg", z}}); })
                .find("SGD.load_state_dict: unknown buffer \"state.0.exp_avg\" (SGD keeps momentum_buffer and "
                      "master_param)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"state.0.momentum_buffer", z}, {"state.0.momentum_buffer", z}}); })
                .find("SGD.load_state_dict: \"state.0.momentum_buffer\" appears twice"),
            std::string::npos);
  // A leading zero would be a second spelling of one key (the later one won).
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"state.0.momentum_buffer", z}, {"state.00.momentum_buffer", z}}); })
                .find("SGD.load_state_dict: malformed key \"state.00.momentum_buffer\""),
            std::string::npos);
  EXPECT_TRUE(sgd.state(0).empty());
  // The constructor's cross-checks hold for a loaded group too.
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"param_groups.0.nesterov", scalar_tensor(1.0, DType::Float64)},
                                                {"param_groups.0.momentum", scalar_tensor(0.0, DType::Float64)}}); })
                .find("SGD: Nesterov momentum requires a momentum and zero dampening"),
            std::string::npos);
  EXPECT_EQ(sgd.get(0, "nesterov"), 0.0);
  sgd.load_state_dict({{"state.0.momentum_buffer", z}});  // a name it keeps
  EXPECT_EQ(sgd.state(0).size(), 1u);
  Adam adam({p}, AdamOptions{});
  StateDict typo = {{"state.0.step", scalar_tensor(1.0, DType::Float64)}, {"state.0.exp_avg", z},
                    {"state.0.exp_avg_sq", z}, {"state.0.exp_avgsq", z}};
  EXPECT_NE(error_of([&] { adam.load_state_dict(typo); }).find("unknown buffer \"state.0.exp_avgsq\""),
            std::string::npos);
  EXPECT_TRUE(adam.state(0).empty());
  RMSprop rms({p}, RMSpropOptions{});
  rms.load_state_dict({{"state.0.step", scalar_tensor(1.0, DType::Float64)}, {"state.0.square_avg", z},
                       {"state.0.grad_avg", z}, {"state.0.momentum_buffer", z}});
  EXPECT_EQ(rms.state(0).size(), 4u);
}

// norm_type -inf: the smallest |g| over every gradient, as PyTorch (it was taken as +inf).
TEST(ClipGradNorm, MinusInfinityIsTheSmallestMagnitude) {
  Tensor a = zeros({2}, DType::Float64).requires_grad_(), b = zeros({1}, DType::Float64).requires_grad_();
  a.set_grad(from_vector(std::vector<double>{3, -4}, {2}));
  b.set_grad(from_vector(std::vector<double>{-6}, {1}));
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0, -INFINITY), 3.0);
  const double coef = 1.0 / (3.0 + 1e-6);  // PyTorch's clip coefficient
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3 * coef, -4 * coef}));
  b.set_grad(from_vector(std::vector<double>{NAN}, {1}));
  EXPECT_TRUE(std::isnan(clip_grad_norm_({a, b}, 1.0, -INFINITY)));
  EXPECT_NE(error_of([&] { clip_grad_norm_({a}, 1.0, -2.0); })
                .find("clip_grad_norm_: norm_type must be >= 1, inf or -inf, got -2"),
            std::string::npos);
}

// Adam's moments in PyTorch's operation order (addcmul_: (value * g) * g; addcdiv_: (value * m)
// / d): one float64 step, element values where the two orders round differently.
TEST(Optim, AdamFollowsPyTorchsOperationOrder) {
  Tensor p = from_vector(std::vector<double>{0.04363199256942161, 0}, {2}).requires_grad_();
  p.set_grad(from_vector(std::vector<double>{-1.4282311889764632, 0.4204452380655215}, {2}));
  Adam opt({p}, AdamOptions{0.01});
  opt.step();
  EXPECT_EQ(p.to_vector<double>()[0], 0.05363199249940494);  // torch.optim.Adam(lr=0.01), one step
  EXPECT_EQ(opt.state(0).at("exp_avg_sq").to_vector<double>()[1], 0.0001767741982119732);
}

TEST(Optim, StateDictSurvivesSafetensors) {
  Tensor p = from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  AdamW opt({p});
  p.set_grad(from_vector(std::vector<float>{0.5f, -1, 2}, {3}));
  opt.step();
  const std::string path = ::testing::TempDir() + "/tapegrad_adamw_state.safetensors";
  save_safetensors(path, opt.state_dict());
  Tensor q = p.detach().clone().requires_grad_();
  AdamW restored({q});
  restored.load_state_dict(load_safetensors(path).tensors);
  std::remove(path.c_str());
  // Same state, same next step, to the bit.
  p.set_grad(from_vector(std::vector<float>{1, 1, 1}, {3}));
  q.set_grad(from_vector(std::vector<float>{1, 1, 1}, {3}));
  opt.step();
  restored.step();
  EXPECT_EQ(p.to_vector<float>(), q.to_vector<float>());
  EXPECT_EQ(restored.state(0).at("step").item(), 2.0);
}
