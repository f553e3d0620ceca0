// Optimizers on bfloat16 and float16 parameters. With float32_master_weights (the default) a
// 16-bit parameter follows exactly the trajectory of a float32 parameter given the same
// gradients (its master IS that trajectory, bit for bit) and is that trajectory rounded once;
// without it, updates below half an ulp are lost. State is float32 and the master copy is
// saved and restored with the optimizer's state_dict. clip_grad_norm_ sums 16-bit gradients'
// squares in float64. The reference is tapegrad's own float32 optimizer, which
// tests/test_optim.cpp checks against torch.optim (PyTorch has no master-weight option to
// compare with: its 16-bit optimizers update the 16-bit tensor directly, our option off).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> out;
  if (t.dtype() == DType::BFloat16)
    for (BFloat16 v : t.contiguous().to_vector<BFloat16>()) out.push_back(v.bits);
  else
    for (Float16 v : t.contiguous().to_vector<Float16>()) out.push_back(v.bits);
  return out;
}

// A 16-bit leaf parameter from float values (rounded once), and its float32 twin holding the
// same (16-bit-exact) values.
Tensor param16(const std::vector<float>& v, DType dt) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(dt).detach().requires_grad_();
}
Tensor twin32(const Tensor& p16) { return p16.detach().to(DType::Float32).requires_grad_(); }

using MakeOpt = std::function<std::unique_ptr<Optimizer>(const Tensor&, bool master)>;

// Runs `steps` steps on a 16-bit parameter and on its float32 twin with the same gradients
// (16-bit-exact values from grad_at(step)), and checks the master equals the float32
// parameter bit for bit and the 16-bit parameter is it rounded once.
void expect_master_follows_float32(DType dt, const MakeOpt& make, int steps,
                                   const std::function<std::vector<float>(int)>& grad_at) {
  Tensor p = param16({1.0f, -3.0f, 0.25f, 100.0f, -0.5f}, dt);
  Tensor q = twin32(p);
  auto opt16 = make(p, true);
  auto opt32 = make(q, true);
  for (int s = 0; s < steps; ++s) {
    const Tensor g = from_vector(grad_at(s), {5}).to(dt);
    p.set_grad(g);
    q.set_grad(g.to(DType::Float32));
    opt16->step();
    opt32->step();
  }
  const Tensor& master = opt16->state(0).at("master_param");
  ASSERT_EQ(master.dtype(), DType::Float32);
  EXPECT_EQ(master.to_vector<float>(), q.to_vector<float>());
  EXPECT_EQ(bits16(p), bits16(q.to(dt)));
  for (const auto& [key, t] : opt16->state(0)) {
    if (key != "step") {
      EXPECT_EQ(t.dtype(), DType::Float32) << key;  // moments, momentum: float32
    }
  }
}

std::vector<float> constant_grad(int) { return {1.0f, -1.0f, 0.5f, 2.0f, -0.25f}; }
std::vector<float> varying_grad(int s) {
  const float a = static_cast<float>(s % 7) - 3.0f;
  return {0.5f * a, 1.0f - a, 0.125f * a * a, -2.0f, a / 16.0f};
}

TEST(OptimHalf, TinySgdUpdatesAccumulateInTheMasterAndAreLostWithoutIt) {
  // lr * grad = 1e-4: far below half an ulp of every bfloat16 value here (2^-9 at 1.0).
  auto sgd = [](const Tensor& p, bool master) {
    SGDOptions o{1e-4};
    o.float32_master_weights = master;
    return std::make_unique<SGD>(std::vector<Tensor>{p}, o);
  };
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_master_follows_float32(dt, sgd, 1000, constant_grad);
    // The parameter moved by what 1000 updates add up to: 1.0 - 0.1 = 0.9, rounded once.
    Tensor p = param16({1.0f}, dt);
    auto opt = sgd(p, true);
    for (int s = 0; s < 1000; ++s) {
      p.set_grad(ones({1}, dt));
      opt->step();
    }
    EXPECT_NEAR(p.to(DType::Float32).item(), 0.9, dt == DType::BFloat16 ? 0.004 : 0.0005);  // half an ulp at 0.9
    // Without the master the same 1000 updates leave every element where it was.
    Tensor r = param16({1.0f, -3.0f, 0.25f, 100.0f, -0.5f}, dt);
    const std::vector<uint16_t> start = bits16(r);
    auto plain = sgd(r, false);
    for (int s = 0; s < 1000; ++s) {
      r.set_grad(from_vector(constant_grad(s), {5}).to(dt));
      plain->step();
    }
    EXPECT_EQ(bits16(r), start);
    EXPECT_EQ(plain->state(0).count("master_param"), 0u);
  }
}

TEST(OptimHalf, SgdMomentumAdamAdamWMastersMatchFloat32BitForBit) {
  auto sgd_momentum = [](const Tensor& p, bool) {
    SGDOptions o{0.01, 0.9};
    o.weight_decay = 1e-3;
    o.nesterov = true;
    return std::make_unique<SGD>(std::vector<Tensor>{p}, o);
  };
  auto adam = [](const Tensor& p, bool) {
    AdamOptions o;
    o.lr = 1e-3;
    o.weight_decay = 1e-2;
    return std::make_unique<Adam>(std::vector<Tensor>{p}, o);
  };
  auto adamw = [](const Tensor& p, bool) { return std::make_unique<AdamW>(std::vector<Tensor>{p}); };
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_master_follows_float32(dt, sgd_momentum, 60, varying_grad);
    expect_master_follows_float32(dt, adam, 60, varying_grad);
    expect_master_follows_float32(dt, adamw, 60, varying_grad);
  }
}

TEST(OptimHalf, RMSpropMastersMatchFloat32BitForBit) {
  auto rmsprop = [](const Tensor& p, bool) {
    RMSpropOptions o;
    o.lr = 1e-3;
    o.momentum = 0.9;
    o.centered = true;
    o.weight_decay = 1e-2;
    return std::make_unique<RMSprop>(std::vector<Tensor>{p}, o);
  };
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_master_follows_float32(dt, rmsprop, 60, varying_grad);
  }
}

// Adam descending f(p) = sum(c * (p - t)^2) with gradients computed from each run's own
// parameter: the bfloat16 parameter's gradient is computed from its rounded value and rounded
// itself, so the runs differ by rounding only. Measured and stated below.
TEST(OptimHalf, AdamInBf16WithMasterTracksFloat32Adam) {
  const int64_t n = 64;
  manual_seed(22);
  std::vector<float> start = randn({n}).to_vector<float>(), target = randn({n}).to_vector<float>(),
                     curv = randn({n}).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    start[i] *= 2.0f;
    curv[i] = std::abs(curv[i]) + 0.5f;  // curvatures in [0.5, ~3.5)
  }
  auto grad_of = [&](const std::vector<float>& p) {
    std::vector<float> g(static_cast<size_t>(n));
    for (size_t i = 0; i < g.size(); ++i) g[i] = 2.0f * curv[i] * (p[i] - target[i]);
    return g;
  };
  auto run = [&](DType dt, bool master, int steps) {
    Tensor p = from_vector(start, {n}).to(dt).detach().requires_grad_();
    AdamOptions o;
    o.lr = 2e-3;
    o.float32_master_weights = master;
    Adam opt({p}, o);
    for (int s = 0; s < steps; ++s) {
      p.set_grad(from_vector(grad_of(p.to(DType::Float32).to_vector<float>()), {n}).to(dt));
      opt.step();
    }
    return p.to(DType::Float32).to_vector<float>();
  };
  const int steps = 1500;
  const double lr = 2e-3;
  const std::vector<float> ref = run(DType::Float32, true, steps);
  const std::vector<float> with = run(DType::BFloat16, true, steps);
  const std::vector<float> without = run(DType::BFloat16, false, steps);
  // Tolerance per element: one bfloat16 ulp at the float32 result (the final rounding is half
  // of one) plus 2^-8 of the path length lr * steps. Each step's direction m / (sqrt(v) + eps)
  // comes from gradients of the rounded parameter, rounded themselves (2^-9 relative each),
  // so the two paths drift apart by up to ~2^-8 of the distance Adam can travel (each Adam step
  // is at most about lr). Many elements are still moving after 1500 steps, so this term is real.
  double worst_ratio = 0, worst_abs = 0, mean_with = 0, mean_without = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(ref[i]), 1e-30f)) - 7);
    const double tol = ulp + std::ldexp(lr * steps, -8);
    const double err = std::abs(with[i] - ref[i]);
    worst_ratio = std::max(worst_ratio, err / tol);
    worst_abs = std::max(worst_abs, err);
    mean_with += err / n;
    mean_without += std::abs(without[i] - ref[i]) / n;
  }
  EXPECT_LE(worst_ratio, 1.0) << "worst |bf16 - float32| " << worst_abs;
  // Without the master, steps below half an ulp of the parameter (lr = 2e-3 against 2^-9 |p|:
  // every |p| > 1) are rounded away and those elements stall far from float32's path.
  EXPECT_GT(mean_without, 20 * mean_with);
  std::printf("[ measured ] bf16 Adam vs float32 Adam, %d steps: with master worst %.4g (%.2f of the tolerance), "
              "mean %.3g; without master mean %.3g\n", steps, worst_abs, worst_ratio, mean_with, mean_without);
}

TEST(OptimHalf, StateDictRoundTripCarriesTheMaster) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor p = param16({1.0f, -3.0f, 0.25f, 100.0f, -0.5f}, dt);
    AdamW opt({p});
    for (int s = 0; s < 5; ++s) {
      p.set_grad(from_vector(varying_grad(s), {5}).to(dt));
      opt.step();
    }
    const StateDict saved = opt.state_dict();
    bool has_master = false, has_flag = false;
    for (const auto& [key, t] : saved) {
      if (key == "state.0.master_param") has_master = t.dtype() == DType::Float32;
      if (key == "param_groups.0.float32_master_weights") has_flag = t.item() == 1.0;
    }
    EXPECT_TRUE(has_master);
    EXPECT_TRUE(has_flag);
    // Through a safetensors file, into a fresh optimizer on a copy of the parameter.
    const std::string path = ::testing::TempDir() + "/tapegrad_half_optim.safetensors";
    save_safetensors(path, saved);
    Tensor q = p.detach().clone().requires_grad_();
    AdamW restored({q});
    restored.load_state_dict(load_safetensors(path).tensors);
    std::remove(path.c_str());
    EXPECT_EQ(restored.state(0).at("master_param").to_vector<float>(),
              opt.state(0).at("master_param").to_vector<float>());
    // The next steps are the same to the bit, master and parameter.
    for (int s = 5; s < 10; ++s) {
      p.set_grad(from_vector(varying_grad(s), {5}).to(dt));
      q.set_grad(from_vector(varying_grad(s), {5}).to(dt));
      opt.step();
      restored.step();
    }
    EXPECT_EQ(bits16(p), bits16(q));
    EXPECT_EQ(restored.state(0).at("master_param").to_vector<float>(),
              opt.state(0).at("master_param").to_vector<float>());
  }
  // A master for a float32 parameter is an error; moments given in bfloat16 are widened.
  Tensor f = zeros({5}).requires_grad_();
  SGD sgd({f}, SGDOptions{0.1, 0.9});
  EXPECT_THROW(sgd.load_state_dict({{"state.0.master_param", zeros({5})}}), Error);
  Tensor h = zeros({5}, DType::BFloat16).requires_grad_();
  SGD sgd16({h}, SGDOptions{0.1, 0.9});
  sgd16.load_state_dict({{"state.0.momentum_buffer", ones({5}, DType::BFloat16)}});
  EXPECT_EQ(sgd16.state(0).at("momentum_buffer").dtype(), DType::Float32);
}

TEST(OptimHalf, AParameterWrittenBetweenStepsReseedsItsMaster) {
  Tensor p = param16({1.0f, 2.0f}, DType::BFloat16);
  SGD opt({p}, SGDOptions{1e-4});
  p.set_grad(ones({2}, DType::BFloat16));
  opt.step();  // master = 1 - 1e-4, 2 - 1e-4; p unchanged (below half an ulp)
  {
    NoGradGuard no_grad;
    p.copy_(from_vector(std::vector<float>{1.0f, 5.0f}, {2}));  // e.g. a checkpoint loaded into the model
  }
  opt.step();
  const std::vector<float> m = opt.state(0).at("master_param").to_vector<float>();
  EXPECT_EQ(m[0], (1.0f - 1e-4f) - 1e-4f);  // untouched element: the master carries on
  EXPECT_EQ(m[1], 5.0f - 1e-4f);            // written element: restarted from the new value
  EXPECT_EQ(p.to(DType::Float32).to_vector<float>(), (std::vector<float>{1.0f, 5.0f}));
  // The option is a hyperparameter of the group: turned off, the master is dropped.
  opt.set(0, "float32_master_weights", 0.0);
  opt.step();
  EXPECT_EQ(opt.state(0).count("master_param"), 0u);
}

TEST(OptimHalf, ClipGradNormSumsBf16GradientsInWideArithmetic) {
  // 65536 gradients of 0.01 (bf16: 0.010009765625): a bf16 running sum of their squares (1e-4
  // each) would stop growing near 0.05, far from the 6.57 they add up to; ours is the float64
  // norm of the bf16 values.
  const int64_t n = 65536;
  Tensor a = zeros({n}, DType::BFloat16).requires_grad_();
  Tensor b = zeros({3}, DType::Float16).requires_grad_();
  a.set_grad(full({n}, 0.01, DType::BFloat16));
  b.set_grad(from_vector(std::vector<float>{3.0f, -4.0f, 0.5f}, {3}).to(DType::Float16));
  const double ga = static_cast<double>(static_cast<float>(BFloat16(0.01f)));
  const double expected = std::sqrt(static_cast<double>(n) * ga * ga + 9.0 + 16.0 + 0.25);
  const double total = clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(total, expected, 1e-12 * expected);
  // Each gradient scaled in float32 and rounded once to its dtype.
  const float coef = static_cast<float>(1.0 / (expected + 1e-6));
  EXPECT_EQ(a.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(a.grad().to_vector<BFloat16>()[0].bits, BFloat16(static_cast<float>(ga) * coef).bits);
  EXPECT_EQ(b.grad().to_vector<Float16>()[1].bits, Float16(-4.0f * coef).bits);
}

}  // namespace
}  // namespace tg
