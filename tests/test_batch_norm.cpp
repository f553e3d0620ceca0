// Batch norm against PyTorch (tools/fixtures/batch_norm.py: the modules in train and eval, the
// running statistics after a few steps, momentum None, every gradient, 1d and 2d, the
// state_dict names), the functional op's running statistics, output masks, determinism, 16 bits,
// and the error for each kind of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// The fixtures' tolerance is relative to the largest |reference| of each tensor.
void expect_close_to_scale(const Tensor& actual, const Tensor& expected, double rtol, const std::string& what) {
  expect_close(actual, expected, 0.0, rtol * std::max(max_abs(expected), 1e-300), what);
}

std::shared_ptr<BatchNormBase> make_module(const testing::GoldenCase& c) {
  const int64_t C = c.tensor("x").size(1);
  std::optional<double> momentum;
  if (!c.json["momentum"].is_null()) momentum = c.json["momentum"].get<double>();
  const bool affine = c.json["affine"], track = c.json["track_running_stats"];
  if (c.json["module"] == "2d") return std::make_shared<BatchNorm2d>(C, 1e-5, momentum, affine, track, c.dtype());
  return std::make_shared<BatchNorm1d>(C, 1e-5, momentum, affine, track, c.dtype());
}

TEST(BatchNorm, ModulesMatchPyTorchInTrainAndEvalAfterSteps) {
  auto cases = load_golden_cases("batch_norm");
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const double rtol = c.json["tolerance"]["rtol"];
    auto m = make_module(c);
    if (m->affine) {
      NoGradGuard no_grad;
      m->weight.copy_(c.tensor("weight"));
      m->bias.copy_(c.tensor("bias"));
    }
    m->train();
    for (int s = 0; s < c.json["steps"].get<int>(); ++s) {
      NoGradGuard no_grad;
      m->forward(c.tensor("x" + std::to_string(s)));
    }
    m->train(c.json["training"].get<bool>());
    Tensor x = c.tensor("x").requires_grad_();
    Tensor y = m->forward(x);
    expect_close_to_scale(y, c.tensor("y"), rtol, "output");
    y.backward(c.tensor("gy"));
    expect_close_to_scale(x.grad(), c.tensor("grad_input"), rtol, "grad_input");
    if (m->affine) {
      expect_close_to_scale(m->weight.grad(), c.tensor("grad_weight"), rtol, "grad_weight");
      expect_close_to_scale(m->bias.grad(), c.tensor("grad_bias"), rtol, "grad_bias");
    }
    if (m->track_running_stats) {
      expect_close_to_scale(m->running_mean, c.tensor("running_mean"), rtol, "running_mean");
      expect_close_to_scale(m->running_var, c.tensor("running_var"), rtol, "running_var");
      EXPECT_EQ(m->num_batches_tracked.dtype(), DType::Int64);
      EXPECT_EQ(m->num_batches_tracked.dim(), 0);
      EXPECT_EQ(m->num_batches_tracked.to_vector<int64_t>()[0], c.json["num_batches_tracked"].get<int64_t>());
    }
    std::vector<std::string> keys;
    for (const auto& [k, t] : m->state_dict()) keys.push_back(k);
    EXPECT_EQ(keys, c.json["state_dict_keys"].get<std::vector<std::string>>());
  }
}

TEST(BatchNorm, FunctionalUpdatesRunningStatsInPlaceOnlyWhenTraining) {
  manual_seed(3);
  Tensor x = randn({5, 2, 3}, DType::Float64);
  Tensor rm = from_vector(std::vector<double>{0.5, -1.0}, {2}), rv = from_vector(std::vector<double>{2.0, 0.5}, {2});
  const uint64_t version = rm.version();
  batch_norm(x, rm, rv, Tensor(), Tensor(), /*training=*/false);
  EXPECT_EQ(rm.to_vector<double>(), (std::vector<double>{0.5, -1.0})) << "eval must not move the running stats";
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), /*training=*/true, /*momentum=*/0.25);
  EXPECT_GT(rm.version(), version) << "an in-place update bumps the version";
  // running = 0.75 running + 0.25 batch, with the unbiased variance over N * L = 15 values.
  Tensor xc = x.permute({1, 0, 2}).reshape({2, 15});
  Tensor bm = mean(xc, {1}), bv = var(xc, {1}, 1.0);
  for (int64_t c = 0; c < 2; ++c) {
    const double old_m = c == 0 ? 0.5 : -1.0, old_v = c == 0 ? 2.0 : 0.5;
    EXPECT_NEAR(rm.to_vector<double>()[c], 0.75 * old_m + 0.25 * bm.to_vector<double>()[c], 1e-14);
    EXPECT_NEAR(rv.to_vector<double>()[c], 0.75 * old_v + 0.25 * bv.to_vector<double>()[c], 1e-14);
  }
  // The output used the biased variance of the batch.
  Tensor expected = div(sub(xc, mean(xc, {1}, true)), sqrt(add(var(xc, {1}, 0.0, true), 1e-5)));
  expect_close(y.permute({1, 0, 2}).reshape({2, 15}), expected, 0, 1e-13, "train output");
  EXPECT_FALSE(rm.requires_grad());
}

// Running statistics that are strided views of larger buffers are updated in place, as PyTorch
// does (found by random layouts: the update went through view(), which refused a non-contiguous
// running_var after running_mean had been written). PyTorch's numbers for arange(12) as (3, 2, 2).
TEST(BatchNorm, StridedRunningStatsAreUpdatedInPlace) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = arange(0, 12, 1, dt).reshape({3, 2, 2});
    Tensor mean_storage = zeros({4}, dt), var_storage = ones({4}, dt);
    Tensor rm = mean_storage.slice(0, 1, 4, 2), rv = var_storage.slice(0, 0, 4, 2);
    batch_norm(x, rm, rv, Tensor(), Tensor(), /*training=*/true, 0.1, 1e-5);
    const double tol = dt == DType::BFloat16 ? 1e-2 : 1e-6;
    const auto m = mean_storage.to(DType::Float64).to_vector<double>();
    const auto v = var_storage.to(DType::Float64).to_vector<double>();
    EXPECT_NEAR(m[1], 0.45, tol) << dtype_name(dt);
    EXPECT_NEAR(m[3], 0.65, tol) << dtype_name(dt);
    EXPECT_EQ(m[0], 0.0);
    EXPECT_EQ(m[2], 0.0);
    EXPECT_NEAR(v[0], 2.21, 3 * tol) << dtype_name(dt);
    EXPECT_NEAR(v[2], 2.21, 3 * tol) << dtype_name(dt);
    EXPECT_EQ(v[1], 1.0);
    EXPECT_EQ(v[3], 1.0);
  }
  // Expanded statistics (one location for every channel) are refused before either is written.
  Tensor x = arange(0, 12, 1, DType::Float32).reshape({3, 2, 2});
  Tensor rm = zeros({2}), rv = ones({1}).expand({2});
  const std::string msg = error_of([&] { batch_norm(x, rm, rv, Tensor(), Tensor(), true); });
  EXPECT_NE(msg.find("running_var of shape [2] and strides [0]"), std::string::npos) << msg;
  EXPECT_EQ(rm.to_vector<float>(), std::vector<float>(2, 0.0f));
}

// An empty batch in training (N = 0, or empty planes): an empty output, the running statistics
// left as they are and zero weight and bias gradients, as PyTorch; a module that met one keeps
// finite eval outputs (found by differential testing: they were NaN from then on).
TEST(BatchNorm, AnEmptyBatchLeavesTheRunningStatsAndGivesZeroGradients) {
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16}) {
    for (Shape shape : {Shape{0, 2}, Shape{0, 2, 3, 3}, Shape{4, 2, 0}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + format_shape(shape));
      Tensor x = zeros(shape, dt).requires_grad_();
      Tensor w = from_vector(std::vector<double>{1.5, -0.5}, {2}).to(dt).requires_grad_();
      Tensor b = from_vector(std::vector<double>{0.25, 0.75}, {2}).to(dt).requires_grad_();
      Tensor rm = from_vector(std::vector<double>{1.0, 2.0}, {2}).to(dt);
      Tensor rv = from_vector(std::vector<double>{3.0, 4.0}, {2}).to(dt);
      Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/true, 0.1, 1e-5);
      EXPECT_EQ(y.shape(), shape);
      y.backward(zeros(shape, dt));
      EXPECT_EQ(rm.to(DType::Float64).to_vector<double>(), (std::vector<double>{1.0, 2.0}));
      EXPECT_EQ(rv.to(DType::Float64).to_vector<double>(), (std::vector<double>{3.0, 4.0}));
      EXPECT_EQ(w.grad().to(DType::Float64).to_vector<double>(), (std::vector<double>{0.0, 0.0}));
      EXPECT_EQ(b.grad().to(DType::Float64).to_vector<double>(), (std::vector<double>{0.0, 0.0}));
      EXPECT_EQ(x.grad().shape(), shape);
    }
  }
  manual_seed(4);
  BatchNorm2d bn(3);
  bn.forward(randn({4, 3, 2, 2}));
  bn.forward(randn({0, 3, 2, 2}));
  bn.eval();
  for (float v : bn.forward(randn({2, 3, 2, 2})).to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

TEST(BatchNorm, EvalWithoutRunningStatsModuleUsesBatchStatistics) {
  BatchNorm2d bn(3, 1e-5, 0.1, true, /*track_running_stats=*/false);
  EXPECT_FALSE(bn.running_mean.defined());
  EXPECT_EQ(bn.state_dict().size(), 2u);
  bn.eval();
  manual_seed(4);
  Tensor x = randn({4, 3, 2, 2});
  Tensor y = bn.forward(x);
  Tensor per_channel = y.permute({1, 0, 2, 3}).reshape({3, 16});
  for (double m : mean(per_channel, {1}).to_vector<float>()) EXPECT_NEAR(m, 0.0, 1e-6);
}

TEST(BatchNorm, EveryOutputMaskComputesExactlyWhatIsAsked) {
  manual_seed(5);
  for (bool training : {true, false}) {
    Tensor x = randn({3, 4, 5}, DType::Float64), w = randn({4}, DType::Float64), b = randn({4}, DType::Float64);
    Tensor rm = randn({4}, DType::Float64), rv = uniform({4}, 0.5, 1.5, DType::Float64);
    BatchNormResult r = native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
    Tensor g = randn({3, 4, 5}, DType::Float64);
    BatchNormGrads all = native_batch_norm_backward(g, x, w, r.save_mean, r.save_invstd, training);
    for (int mask = 0; mask < 8; ++mask) {
      BatchNormGrads some = native_batch_norm_backward(g, x, w, r.save_mean, r.save_invstd, training,
                                                       {bool(mask & 1), bool(mask & 2), bool(mask & 4)});
      const Tensor* got[3] = {&some.grad_input, &some.grad_weight, &some.grad_bias};
      const Tensor* want[3] = {&all.grad_input, &all.grad_weight, &all.grad_bias};
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(got[i]->defined(), bool(mask & (1 << i)));
        if (got[i]->defined()) {
          EXPECT_TRUE(same_bits(*got[i], *want[i])) << "training " << training << " mask " << mask;
        }
      }
    }
  }
}

TEST(BatchNorm, StaysAccurateOnALargeOffset) {
  // x = 1000 + N(0, 1) in float32: the statistics in double over the centred values keep every digit.
  manual_seed(6);
  Tensor x64 = add(randn({16, 3, 20, 20}, DType::Float64), 1000.0);
  Tensor x = x64.to(DType::Float32);
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  Tensor y64 = batch_norm(x.to(DType::Float64), Tensor(), Tensor(), Tensor(), Tensor(), true);
  expect_close(y, y64, 0, 2e-6 * max_abs(y64), "output at offset 1000");
}

// eps = 0 and a constant channel (a dead ReLU's): PyTorch's invstd is 0 there, so the output is
// the bias and the gradients are 0; 1 / sqrt(0) gave 0 * inf = NaN everywhere in the channel.
TEST(BatchNorm, AConstantChannelWithEpsZeroGivesTheBias) {
  Tensor x = from_vector(std::vector<double>{1.5, 0.3, 1.5, -0.7, 1.5, 2.0, 1.5, 0.1}, {4, 2}).requires_grad_();
  Tensor w = from_vector(std::vector<double>{2.0, 3.0}, {2}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{0.5, -1.0}, {2}).requires_grad_();
  Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, /*training=*/true, 0.1, /*eps=*/0.0);
  const Tensor gy = from_vector(std::vector<double>{1, 2, -1, 0.5, 3, 1, 0.25, -2}, {4, 2});
  std::vector<Tensor> g = grad({y}, {x, w, b}, {gy}, false, true, /*create_graph=*/true);
  const std::vector<double> yv = y.to_vector<double>(), gx = g[0].to_vector<double>();
  for (int n = 0; n < 4; ++n) {
    EXPECT_EQ(yv[2 * n], 0.5);
    EXPECT_EQ(gx[2 * n], 0.0);
    EXPECT_TRUE(std::isfinite(yv[2 * n + 1]) && std::isfinite(gx[2 * n + 1]));
  }
  EXPECT_EQ(g[1].to_vector<double>()[0], 0.0);
  EXPECT_EQ(g[2].to_vector<double>()[0], 3.25);
  // the recorded backward (create_graph): finite second derivatives, 0 in the constant channel
  std::vector<Tensor> gg = grad({sum(mul(g[0], g[0]))}, {x, w});
  for (const Tensor& t : gg)
    for (double v : t.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(gg[0].to_vector<double>()[0], 0.0);
}

TEST(BatchNorm, SameBitsForOneAndTwoThreads) {
  manual_seed(9);
  Tensor x = randn({4, 32, 24, 24}), w = randn({32}), g = randn({4, 32, 24, 24});
  const int threads = num_threads();
  auto run = [&] {
    Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_();
    Tensor rm = zeros({32}), rv = ones({32});
    Tensor y = batch_norm(xi, rm, rv, wi, Tensor(), true);
    y.backward(g);
    return std::vector<Tensor>{y, xi.grad(), wi.grad(), rm, rv};
  };
  set_num_threads(1);
  auto a = run();
  set_num_threads(2);
  auto b = run();
  set_num_threads(threads);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << i;
}

TEST(BatchNorm, SixteenBitModuleMatchesFloat32WithinOneRounding) {
  // bf16 module: its input, parameters and running stats widened to float32, each result rounded
  // once; against the float32 module on the same (bf16-representable) values: within 2 bf16 eps
  // of the scale (the output's rounding, and the running stats rounded at each of the 2 steps).
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    BatchNorm2d half(3, 1e-5, 0.1, true, true, dt), full(3);
    manual_seed(11);
    Tensor x = randn({4, 3, 5, 5}).to(dt);
    for (int s = 0; s < 2; ++s) {
      Tensor yh = half.forward(x), yf = full.forward(x.to(DType::Float32));
      const double eps = dt == DType::BFloat16 ? 1.0 / 256 : 1.0 / 2048;
      EXPECT_EQ(yh.dtype(), dt);
      expect_close(yh, yf, 0, 2 * eps * max_abs(yf), "16-bit output");
      expect_close(half.running_var, full.running_var, 0, 2 * eps * max_abs(full.running_var), "running_var");
    }
  }
}

TEST(BatchNorm, RejectsBadInputNamingTheModuleAndShape) {
  BatchNorm2d bn2(3);
  BatchNorm1d bn1(3);
  std::string msg = error_of([&] { bn2.forward(zeros({2, 3, 4})); });
  EXPECT_NE(msg.find("BatchNorm2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
  msg = error_of([&] { bn1.forward(zeros({2, 3, 4, 5})); });
  EXPECT_NE(msg.find("BatchNorm1d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 4, 5]"), std::string::npos) << msg;
  msg = error_of([&] { bn2.forward(zeros({2, 4, 3, 3})); });
  EXPECT_NE(msg.find("3 channels"), std::string::npos) << msg;
  msg = error_of([&] { bn1.forward(zeros({1, 3})); });  // one value per channel while training
  EXPECT_NE(msg.find("more than 1 value per channel"), std::string::npos) << msg;
  msg = error_of([&] { batch_norm(zeros({2, 3}), Tensor(), Tensor()); });
  EXPECT_NE(msg.find("running_mean and running_var"), std::string::npos) << msg;
  msg = error_of([&] { batch_norm(zeros({2, 3}), zeros({3}), ones({3}), zeros({4})); });
  EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  msg = error_of([&] { batch_norm(zeros({2, 3}), zeros({3}, DType::Float64), ones({3})); });
  EXPECT_NE(msg.find("running_mean of dtype float32"), std::string::npos) << msg;
  msg = error_of([&] { batch_norm(zeros({3}), zeros({3}), ones({3})); });
  EXPECT_NE(msg.find("at least 2 dims"), std::string::npos) << msg;
  msg = error_of([] { BatchNorm2d(0); });
  EXPECT_NE(msg.find("num_features"), std::string::npos) << msg;
}

TEST(BatchNorm, ModuleConvertsItsFloatingTensorsAndKeepsTheCounter) {
  BatchNorm1d bn(4);
  bn.to(DType::Float64);
  EXPECT_EQ(bn.weight.dtype(), DType::Float64);
  EXPECT_EQ(bn.running_var.dtype(), DType::Float64);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  bn.forward(randn({6, 4}, DType::Float64));
  EXPECT_EQ(bn.num_batches_tracked.to_vector<int64_t>()[0], 1);
}

// A state dict without num_batches_tracked (saved before PyTorch had it, or converted without
// it) loads it as 0, as PyTorch does for dicts without version metadata, also for a nested
// module; a state that has it loads it; without running statistics nothing is added.
TEST(BatchNorm, AStateWithoutTheBatchCounterLoadsItAsZero) {
  Sequential net;
  auto bn = std::make_shared<BatchNorm1d>(3);
  net.push_back(std::make_shared<ReLU>());
  net.push_back(bn);
  bn->forward(randn({4, 3}));  // counter 1, statistics moved
  StateDict old;
  for (const auto& [name, t] : net.state_dict())
    if (name != "1.num_batches_tracked") old.emplace_back(name, full(t.shape(), 0.5, t.dtype()));
  EXPECT_TRUE(net.load_state_dict(old).ok());
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(bn->running_mean.to_vector<float>(), std::vector<float>(3, 0.5f));
  old.emplace_back("1.num_batches_tracked", scalar_tensor(7.0, DType::Int64));
  net.load_state_dict(old);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 7);
  BatchNorm1d untracked(3, 1e-5, 0.1, true, /*track_running_stats=*/false);
  EXPECT_EQ(untracked.state_dict().size(), 2u);
  EXPECT_TRUE(untracked.load_state_dict(untracked.state_dict()).ok());
}

// A key given twice is an error (which one would win?), nothing copied.
TEST(BatchNorm, AStateWithARepeatedKeyIsRefused) {
  BatchNorm1d bn(2);
  StateDict state = bn.state_dict();
  state.emplace_back("bias", ones({2}));
  EXPECT_NE(error_of([&] { bn.load_state_dict(state); }).find("load_state_dict: key \"bias\" appears twice"),
            std::string::npos);
  EXPECT_EQ(bn.bias.to_vector<float>(), std::vector<float>(2, 0.0f));
}

}  // namespace
}  // namespace tg
