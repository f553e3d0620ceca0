// The generic test: every registered op, every sample case, checked by finite differences in
// float64, and its float32 path checked against the float64 result. A newly registered op is
// covered here without a test of its own.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

#include <cmath>

namespace tg {
namespace {

struct OpSample {
  const OpDef* op;
  size_t index;
  std::string name;
};

std::vector<OpSample> all_samples() {
  std::vector<OpSample> out;
  for (const OpDef* op : registry().ops()) {
    if (!op->samples) continue;
    std::vector<SampleCase> cases = op->samples();
    for (size_t i = 0; i < cases.size(); ++i) out.push_back({op, i, cases[i].name});
  }
  return out;
}

std::string test_name(const ::testing::TestParamInfo<OpSample>& info) {
  std::string n = std::string(info.param.op->name) + "_" + std::to_string(info.param.index);
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class RegistryGradcheck : public ::testing::TestWithParam<OpSample> {};

TEST_P(RegistryGradcheck, Float64FiniteDifferences) {
  const OpSample& s = GetParam();
  SampleCase sample = s.op->samples()[s.index];
  manual_seed(1234 + s.index);
  std::vector<Tensor> inputs = sample.make_inputs(DType::Float64);
  GradcheckResult r = gradcheck(sample.run, inputs);
  EXPECT_TRUE(r.ok) << s.op->name << " / " << sample.name << ": " << r.message;
}

// Second derivatives by finite differences of the first, for every op that declares its
// backward twice differentiable; an op that does not is refused by create_graph (tested below).
class RegistryGradgradcheck : public ::testing::TestWithParam<OpSample> {};

std::vector<OpSample> twice_differentiable_samples() {
  std::vector<OpSample> out;
  for (const OpSample& s : all_samples())
    if (s.op->twice_differentiable) out.push_back(s);
  return out;
}

TEST_P(RegistryGradgradcheck, Float64SecondDerivatives) {
  const OpSample& s = GetParam();
  SampleCase sample = s.op->samples()[s.index];
  manual_seed(4321 + s.index);
  std::vector<Tensor> inputs = sample.make_inputs(DType::Float64);
  GradcheckResult r = gradgradcheck(sample.run, inputs);
  EXPECT_TRUE(r.ok) << s.op->name << " / " << sample.name << ": " << r.message;
}

TEST_P(RegistryGradcheck, Float32MatchesFloat64) {
  const OpSample& s = GetParam();
  SampleCase sample = s.op->samples()[s.index];
  manual_seed(99 + s.index);
  std::vector<Tensor> in64 = sample.make_inputs(DType::Float64);
  std::vector<Tensor> in32;
  for (const Tensor& t : in64) {
    if (!t.defined() || !is_floating(t.dtype())) {
      in32.push_back(t);
      continue;
    }
    Tensor c = t.detach().to(DType::Float32);
    if (t.requires_grad()) c.requires_grad_();
    in32.push_back(c);
  }
  std::vector<Tensor> out64 = sample.run(in64), out32 = sample.run(in32);
  ASSERT_EQ(out64.size(), out32.size());
  // float32 carries ~7 digits; these small samples lose at most a few of them.
  const double rtol = 1e-4, atol = 1e-5;
  std::vector<Tensor> roots32, roots64, seeds32, seeds64;
  for (size_t i = 0; i < out64.size(); ++i) {
    ASSERT_EQ(out32[i].dtype(), DType::Float32) << "output " << i << " of the float32 run is not float32";
    std::vector<double> a = out32[i].to(DType::Float64).to_vector<double>(), b = out64[i].to_vector<double>();
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_LE(std::abs(a[k] - b[k]), atol + rtol * std::abs(b[k])) << "output " << i << " element " << k;
    if (!out64[i].requires_grad()) continue;
    Tensor seed = randn(out64[i].shape(), DType::Float64);
    roots64.push_back(out64[i]);
    seeds64.push_back(seed);
    roots32.push_back(out32[i]);
    seeds32.push_back(seed.to(DType::Float32));
  }
  if (roots64.empty()) return;
  backward(roots64, seeds64);
  backward(roots32, seeds32);
  for (size_t k = 0; k < in64.size(); ++k) {
    if (!in64[k].defined() || !in64[k].requires_grad()) continue;
    ASSERT_TRUE(in32[k].grad().defined()) << "input " << k;
    ASSERT_EQ(in32[k].grad().dtype(), DType::Float32);
    std::vector<double> a = in32[k].grad().to(DType::Float64).to_vector<double>(),
                        b = in64[k].grad().to_vector<double>();
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t e = 0; e < a.size(); ++e)
      ASSERT_LE(std::abs(a[e] - b[e]), 1e-4 * (1 + scale)) << "gradient of input " << k << " element " << e;
  }
}

// The output mask: with only input k requiring grad, backward must compute that gradient alone
// (reading only what it saved for it) and get the same values as with every input requiring grad.
TEST_P(RegistryGradcheck, EachInputAloneGetsTheSameGradient) {
  const OpSample& s = GetParam();
  SampleCase sample = s.op->samples()[s.index];
  manual_seed(7 + s.index);
  std::vector<Tensor> all = sample.make_inputs(DType::Float64);
  std::vector<Tensor> outs = sample.run(all);
  std::vector<Tensor> roots, seeds;
  for (const Tensor& o : outs) {
    if (!o.requires_grad()) continue;
    roots.push_back(o);
    seeds.push_back(randn(o.shape(), DType::Float64));
  }
  if (roots.empty()) return;
  backward(roots, seeds);
  for (size_t k = 0; k < all.size(); ++k) {
    if (!all[k].defined() || !all[k].requires_grad()) continue;
    std::vector<Tensor> only_k;
    for (size_t j = 0; j < all.size(); ++j) {
      if (!all[j].defined() || !is_floating(all[j].dtype())) {
        only_k.push_back(all[j]);
        continue;
      }
      Tensor c = all[j].detach();
      if (j == k) c.requires_grad_();
      only_k.push_back(c);
    }
    std::vector<Tensor> outs_k = sample.run(only_k);
    std::vector<Tensor> roots_k;
    for (const Tensor& o : outs_k)
      if (o.requires_grad()) roots_k.push_back(o);
    ASSERT_EQ(roots_k.size(), roots.size()) << "input " << k;
    backward(roots_k, seeds);
    ASSERT_TRUE(only_k[k].grad().defined()) << "input " << k;
    std::vector<double> a = only_k[k].grad().to_vector<double>(), b = all[k].grad().to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t e = 0; e < a.size(); ++e)
      ASSERT_NEAR(a[e], b[e], 1e-12 * (1 + std::abs(b[e]))) << "input " << k << " element " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, RegistryGradcheck, ::testing::ValuesIn(all_samples()), test_name);
INSTANTIATE_TEST_SUITE_P(TwiceDifferentiableOps, RegistryGradgradcheck,
                         ::testing::ValuesIn(twice_differentiable_samples()), test_name);

// create_graph reaching an op whose backward cannot be differentiated again is an error naming
// the op, never a silent zero.
TEST(Registry, CreateGraphThroughAnOpThatIsNotTwiceDifferentiableIsAnError) {
  std::vector<const OpDef*> once;
  for (const OpDef* op : registry().ops())
    if (!op->twice_differentiable && op->samples && !op->samples().empty()) once.push_back(op);
  if (once.empty()) GTEST_SKIP() << "every registered op is twice differentiable";
  const OpDef* op = once.front();
  SampleCase sample = op->samples().front();
  std::vector<Tensor> inputs = sample.make_inputs(DType::Float64);
  std::vector<Tensor> outs = sample.run(inputs), roots, seeds, wrt;
  for (const Tensor& o : outs)
    if (o.requires_grad()) {
      roots.push_back(o);
      seeds.push_back(ones_like(o));
    }
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  const std::string msg = error_of([&] { grad(roots, wrt, seeds, false, true, /*create_graph=*/true); });
  EXPECT_NE(msg.find(op->backward_name), std::string::npos) << msg;
  EXPECT_NE(msg.find("create_graph"), std::string::npos) << msg;
}

TEST(Registry, ListsEveryOpWithItsBackwardAndInputs) {
  const OpDef* mul_op = registry().find("mul");
  ASSERT_NE(mul_op, nullptr);
  EXPECT_STREQ(mul_op->backward_name, "mul_backward");
  EXPECT_STREQ(mul_op->inputs, "self, other");
  EXPECT_NE(registry().table().find("linear_backward"), std::string::npos)
      << registry().table();
  EXPECT_EQ(registry().find("no_such_op"), nullptr);
  for (const OpDef* op : registry().ops()) EXPECT_NE(op->backward, nullptr) << op->name;
}

}  // namespace
}  // namespace tg
