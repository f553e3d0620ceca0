// The generic test: every registered op, every sample case, checked by finite differences in
// float64, its float32 path checked against the float64 result, and its output mask. A newly
// registered op is covered here without a test of its own.
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

// The checks themselves live in the library (framework/op_check.h), so that a user's op is
// checked by the same code (tg::check_custom_op); here they run once per (op, sample).
std::string what(const OpSample& s) { return std::string(s.op->name) + " / " + s.name; }

TEST_P(RegistryGradcheck, Float64FiniteDifferences) {
  const OpSample& s = GetParam();
  GradcheckResult r = check_sample_gradcheck(what(s), s.op->samples()[s.index], OpCheckSeeds::gradcheck(s.index));
  EXPECT_TRUE(r.ok) << r.message;
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
  GradcheckResult r =
      check_sample_gradgradcheck(what(s), s.op->samples()[s.index], OpCheckSeeds::gradgradcheck(s.index));
  EXPECT_TRUE(r.ok) << r.message;
}

TEST_P(RegistryGradcheck, Float32MatchesFloat64) {
  const OpSample& s = GetParam();
  GradcheckResult r = check_sample_float32(what(s), s.op->samples()[s.index], OpCheckSeeds::float32(s.index));
  EXPECT_TRUE(r.ok) << r.message;
}

// The output mask: with only input k requiring grad, backward must compute that gradient alone
// (reading only what it saved for it) and get the same values as with every input requiring grad.
TEST_P(RegistryGradcheck, EachInputAloneGetsTheSameGradient) {
  const OpSample& s = GetParam();
  GradcheckResult r = check_sample_each_input_alone(what(s), s.op->samples()[s.index], OpCheckSeeds::each_input(s.index));
  EXPECT_TRUE(r.ok) << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RegistryGradcheck, ::testing::ValuesIn(all_samples()), test_name);
INSTANTIATE_TEST_SUITE_P(TwiceDifferentiableOps, RegistryGradgradcheck,
                         ::testing::ValuesIn(twice_differentiable_samples()), test_name);

// create_graph reaching an op whose backward cannot be differentiated again is an error naming
// the op, never a silent zero.
// Every op with sample cases is twice differentiable; the ops that are not are backward ops
// (gelu_backward, the double backwards of grid_sample and ms_deform_attn). A third derivative of
// gelu records gelu_backward's backward: an error naming it, never a zero.
TEST(Registry, CreateGraphThroughAnOpThatIsNotTwiceDifferentiableIsAnError) {
  const OpDef* op = registry().find("gelu_backward");
  ASSERT_NE(op, nullptr);
  ASSERT_FALSE(op->twice_differentiable) << "pick another op that is not twice differentiable for this test";
  Tensor x = from_vector(std::vector<double>{-0.7, 0.2, 1.3}, {3}).requires_grad_();
  Tensor g1 = grad({sum(gelu(x))}, {x}, {}, /*retain_graph=*/true, true, /*create_graph=*/true)[0];
  // The second derivative itself is fine: gelu's gradient is a recorded gelu_backward entry.
  EXPECT_TRUE(grad({sum(g1)}, {x}, {}, /*retain_graph=*/true)[0].defined());
  // Recording that second backward (for a third derivative) reaches gelu_backward's backward.
  const std::string msg = error_of([&] { grad({sum(g1)}, {x}, {}, false, true, /*create_graph=*/true); });
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
