// CosineAnnealingLR and OneCycleLR against torch.optim.lr_scheduler's lr and momentum sequences
// (tools/fixtures/lr_scheduler.py), their state dicts, and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "golden.h"

using namespace tg;
using tg::testing::GoldenCase;
using tg::testing::load_golden_cases;

namespace {

struct SchedRun {
  std::vector<Tensor> params = {zeros({2}).requires_grad_(), zeros({3}).requires_grad_()};
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<LRScheduler> sched;
  std::string momentum_key;
};

std::unique_ptr<Optimizer> make_optimizer(const GoldenCase& c, const std::vector<Tensor>& params) {
  const std::vector<double> lrs = c.json["lrs"];
  if (c.json["optimizer"] == "SGD") {
    auto opt = std::make_unique<SGD>(std::vector<Tensor>{params[0]}, SGDOptions{lrs[0], c.json["momentum"]});
    opt->add_param_group({params[1]}, SGDOptions{lrs[1], c.json["momentum"]});
    return opt;
  }
  AdamOptions a;
  a.lr = lrs[0];
  auto opt = std::make_unique<Adam>(std::vector<Tensor>{params[0]}, a);
  a.lr = lrs[1];
  opt->add_param_group({params[1]}, a);
  return opt;
}

std::unique_ptr<LRScheduler> make_scheduler(const GoldenCase& c, Optimizer& opt) {
  const auto& a = c.json["args"];
  if (c.json["scheduler"] == "CosineAnnealingLR")
    return std::make_unique<CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(), a.value("eta_min", 0.0));
  return std::make_unique<OneCycleLR>(opt, a["max_lr"].get<double>(), a["total_steps"].get<int64_t>(),
                                      a.value("pct_start", 0.3), a.value("anneal_strategy", std::string("cos")),
                                      a.value("div_factor", 25.0), a.value("final_div_factor", 1e4),
                                      a.value("three_phase", false), a.value("cycle_momentum", true),
                                      a.value("base_momentum", 0.85), a.value("max_momentum", 0.95));
}

SchedRun make(const GoldenCase& c) {
  SchedRun s;
  s.opt = make_optimizer(c, s.params);
  s.sched = make_scheduler(c, *s.opt);
  s.momentum_key = c.json["optimizer"] == "SGD" ? "momentum" : "beta1";
  return s;
}

// The lrs and momentums at `step` must be PyTorch's to the bit: the formulas are the same
// float64 operations in the same order, and std::cos is the same libm as Python's math.cos.
void expect_step(const GoldenCase& c, const SchedRun& s, int64_t step) {
  const Tensor lrs = c.tensor("lrs"), moms = c.tensor("momentums");
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(s.opt->lr(g), lrs.at<double>({step, g})) << c.name() << " step " << step << " group " << g;
    EXPECT_EQ(s.opt->get(g, s.momentum_key), moms.at<double>({step, g}))
        << c.name() << " momentum, step " << step << " group " << g;
  }
}

}  // namespace

TEST(LRSchedulerGolden, SequencesMatchPyTorchBitForBit) {
  auto cases = load_golden_cases("lr_scheduler");
  ASSERT_EQ(cases.size(), 6u);
  for (auto& c : cases) {
    SCOPED_TRACE(c.name());
    SchedRun s = make(c);
    const int64_t steps = c.json["steps"];
    expect_step(c, s, 0);
    for (int64_t step = 1; step <= steps; ++step) {
      s.opt->step();
      s.sched->step();
      expect_step(c, s, step);
    }
    EXPECT_EQ(s.sched->last_epoch(), steps);
  }
}

TEST(LRSchedulerGolden, ResumedFromStateDictContinuesBitForBit) {
  for (auto& c : load_golden_cases("lr_scheduler")) {
    SCOPED_TRACE(c.name());
    SchedRun s = make(c);
    const int64_t steps = c.json["steps"], half = steps / 2 + 1;
    for (int64_t step = 1; step <= half; ++step) s.sched->step();
    const StateDict saved = s.sched->state_dict();
    // A fresh optimizer (its own lrs, and momentum at the constructor's value) and scheduler:
    // the scheduler's state alone puts the run back where it was, the recursive cosine included.
    SchedRun r = make(c);
    r.sched->load_state_dict(saved);
    EXPECT_EQ(r.sched->last_epoch(), half);
    expect_step(c, r, half);
    for (int64_t step = half + 1; step <= steps; ++step) {
      r.sched->step();
      expect_step(c, r, step);
    }
  }
}

TEST(LRScheduler, StateDictNamesAndErrors) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1, 0.9});
  OneCycleLR sched(opt, 1.0, 10);
  std::vector<std::string> names;
  for (auto& e : sched.state_dict()) names.push_back(e.first);
  EXPECT_EQ(names, (std::vector<std::string>{"last_epoch", "base_lrs", "last_lrs", "lrs", "momentums"}));
  const StateDict good = sched.state_dict();
  auto without = [&](const std::string& key) {
    StateDict out;
    for (auto& e : good)
      if (e.first != key) out.push_back(e);
    return out;
  };
  sched.step();
  const double lr = opt.lr();
  EXPECT_THROW(sched.load_state_dict(without("lrs")), Error);
  StateDict extra = good;
  extra.emplace_back("T_max", scalar_tensor(3.0));
  EXPECT_THROW(sched.load_state_dict(extra), Error);
  StateDict wrong_groups = without("base_lrs");
  wrong_groups.emplace_back("base_lrs", zeros({2}, DType::Float64));
  EXPECT_THROW(sched.load_state_dict(wrong_groups), Error);
  StateDict past_the_end = without("last_epoch");
  past_the_end.emplace_back("last_epoch", scalar_tensor(11, DType::Int64));
  EXPECT_THROW(sched.load_state_dict(past_the_end), Error);
  EXPECT_EQ(sched.last_epoch(), 1);  // a rejected dict changes nothing
  EXPECT_EQ(opt.lr(), lr);
  try {
    sched.load_state_dict(without("last_lrs"));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OneCycleLR.load_state_dict: missing \"last_lrs\""), std::string::npos) << e.what();
  }
}

TEST(LRScheduler, OneCycleErrors) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1});
  EXPECT_THROW(OneCycleLR(opt, 1.0, 0), Error);
  EXPECT_THROW(OneCycleLR(opt, 1.0, 10, 1.5), Error);
  EXPECT_THROW(OneCycleLR(opt, 1.0, 10, 0.3, "exp"), Error);
  EXPECT_THROW(OneCycleLR(opt, 1.0, 10, 0.1), Error);  // pct_start * total_steps = 1: a phase of no length
  OneCycleLR sched(opt, 1.0, 3);
  for (int i = 0; i < 3; ++i) sched.step();  // total_steps calls are allowed (PyTorch's rule)
  try {
    sched.step();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OneCycleLR: step() called 4 times, more than total_steps (3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(sched.last_epoch(), 3);
  // An optimizer without momentum or beta1 needs cycle_momentum = false.
  struct Plain : Optimizer {
    explicit Plain(Tensor t) { add_group({t}, {{"lr", 0.1}}); }
    std::string name() const override { return "Plain"; }
    void step() override {}
  } plain(zeros({1}).requires_grad_());
  EXPECT_THROW(OneCycleLR(plain, 1.0, 10), Error);
  OneCycleLR no_momentum(plain, 1.0, 10, 0.3, "cos", 25, 1e4, false, /*cycle_momentum=*/false);
  EXPECT_NEAR(plain.lr(), 0.04, 1e-15);  // max_lr / div_factor through the cosine's rounding
}

// A constructor that refuses its arguments leaves the optimizer as it was (WarmupCosineLR wrote
// its first lr, OneCycleLR its momentum, before their checks).
TEST(LRScheduler, ARefusedConstructorChangesNothing) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1, 0.5});
  EXPECT_THROW(WarmupCosineLR(opt, 5, 2), Error);
  EXPECT_THROW(WarmupCosineLR(opt, -1, 10), Error);
  EXPECT_THROW(WarmupCosineLR(opt, 1, 10, 2.0), Error);
  EXPECT_EQ(opt.lr(), 0.1);
  EXPECT_THROW(OneCycleLR(opt, 0.5, 10, 0.1), Error);  // a first phase of no length
  EXPECT_EQ(opt.get(0, "momentum"), 0.5);
  EXPECT_EQ(opt.lr(), 0.1);
}

// get_last_lr() is what the schedule last wrote, as PyTorch's, also after an lr set from outside
// (and what its state_dict saves as last_lrs).
TEST(LRScheduler, LastLrIsTheSchedulesNotTheOptimizers) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1});
  StepLR sched(opt, 1, 0.5);
  sched.step();
  EXPECT_EQ(sched.get_last_lr(), std::vector<double>{0.05});
  opt.set_lr(0.5);
  EXPECT_EQ(sched.get_last_lr(), std::vector<double>{0.05});
  for (const auto& [key, value] : sched.state_dict()) {
    if (key == "last_lrs") {
      EXPECT_EQ(value.to_vector<double>(), std::vector<double>{0.05});
    }
  }
  sched.step();  // PyTorch's chained form carries on from the group's lr
  EXPECT_EQ(sched.get_last_lr(), std::vector<double>{0.25});
  EXPECT_EQ(opt.lr(), 0.25);
}

TEST(LRScheduler, CosineClosedFormAndErrors) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1});
  EXPECT_THROW(CosineAnnealingLR(opt, 0), Error);
  EXPECT_THROW(CosineAnnealingLR(opt, 5, -1.0), Error);
  CosineAnnealingLR sched(opt, 4, 0.02);
  sched.set_last_epoch(2);  // the closed form: halfway
  EXPECT_DOUBLE_EQ(opt.lr(), 0.06);
  sched.set_last_epoch(4);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.02);
  // The recursive form follows an lr changed from outside, as PyTorch's does.
  sched.set_last_epoch(1);
  opt.set_lr(1.0);
  sched.step();
  EXPECT_GT(opt.lr(), 0.5);
}
