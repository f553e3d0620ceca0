// Group norm against PyTorch (tools/fixtures/group_norm.py), every output mask of the kernel
// API, hard inputs, determinism, the module, and the error for each kind of bad input.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

TEST(GroupNorm, MatchesPyTorchThroughTheTape) {
  auto cases = load_golden_cases("group_norm");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // The fixture's rtol: the reference is PyTorch in float64 rounded to the case's dtype.
    const double rtol = c.json["tolerance"]["rtol"], atol = rtol * 1e-2;
    Tensor x = c.tensor("input").requires_grad_();
    Tensor w = c.has("weight") ? c.tensor("weight").requires_grad_() : Tensor();
    Tensor b = c.has("bias") ? c.tensor("bias").requires_grad_() : Tensor();
    Tensor y = group_norm(x, c.json["group"], w, b, c.json["eps"]);
    expect_close(y, c.tensor("output"), rtol, atol, "output");
    y.backward(c.tensor("grad_output"));
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
    if (w.defined()) expect_close(w.grad(), c.tensor("grad_weight"), rtol, atol, "grad_weight");
    if (b.defined()) expect_close(b.grad(), c.tensor("grad_bias"), rtol, atol, "grad_bias");
    // The kernel API's statistics.
    GroupNormResult r = native_group_norm(x, w, b, c.json["N"], c.json["C"], c.json["HxW"], c.json["group"],
                                          c.json["eps"]);
    expect_close(r.mean.view({-1}), c.tensor("mean").reshape({-1}), rtol, atol, "mean");
    expect_close(r.rstd.view({-1}), c.tensor("rstd").reshape({-1}), rtol, atol, "rstd");
  }
}

TEST(GroupNorm, EveryOutputMaskComputesExactlyWhatIsAsked) {
  manual_seed(3);
  const int64_t N = 2, C = 6, HxW = 5, G = 3;
  Tensor x = randn({N, C, HxW}, DType::Float64), w = randn({C}, DType::Float64), g = randn({N, C, HxW}, DType::Float64);
  GroupNormResult r = native_group_norm(x, w, Tensor(), N, C, HxW, G, 1e-5);
  GroupNormGrads all = native_group_norm_backward(g, x, r.mean, r.rstd, w, N, C, HxW, G);
  for (int mask = 0; mask < 8; ++mask) {
    std::array<bool, 3> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    GroupNormGrads got = native_group_norm_backward(g, x, r.mean, r.rstd, w, N, C, HxW, G, m);
    EXPECT_EQ(got.grad_input.defined(), m[0]);
    EXPECT_EQ(got.grad_weight.defined(), m[1]);
    EXPECT_EQ(got.grad_bias.defined(), m[2]);
    if (m[0]) { EXPECT_TRUE(same_bits(got.grad_input, all.grad_input)) << mask; }
    if (m[1]) { EXPECT_TRUE(same_bits(got.grad_weight, all.grad_weight)) << mask; }
    if (m[2]) { EXPECT_TRUE(same_bits(got.grad_bias, all.grad_bias)) << mask; }
  }
}

TEST(GroupNorm, StaysAccurateOnALargeOffsetAndALargeGroup) {
  // x = 1000 + N(0, 1): a one-pass E[x^2] - E[x]^2 would lose ~6 digits in float32.
  manual_seed(5);
  Tensor x = add(randn({2, 4, 1000}), 1000.0);
  GroupNormResult r = native_group_norm(x, Tensor(), Tensor(), 2, 4, 1000, 2, 1e-5);
  std::vector<float> y = r.output.to_vector<float>();
  double mean = 0, var = 0;
  for (int i = 0; i < 2000; ++i) mean += y[i] / 2000.0;
  for (int i = 0; i < 2000; ++i) var += (y[i] - mean) * (y[i] - mean) / 2000.0;
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(var, 1.0, 1e-3);
  // A group of 10^7 elements of constant 3 plus a known pattern: exact statistics.
  Tensor big = full({1, 1, 10000000}, 3.0);
  float* p = big.data<float>();
  for (int64_t i = 0; i < big.numel(); i += 2) p[i] = 5.0f;  // half 5, half 3: mean 4, variance 1
  GroupNormResult rb = native_group_norm(big, Tensor(), Tensor(), 1, 1, 10000000, 1, 0.0);
  EXPECT_NEAR(rb.mean.item(), 4.0, 1e-6);
  EXPECT_NEAR(rb.rstd.item(), 1.0, 1e-6);
}

TEST(GroupNorm, SameBitsForOneAndTwoThreads) {
  manual_seed(9);
  Tensor x = randn({2, 64, 32, 32}), w = randn({64}), g = randn({2, 64, 32, 32});
  const int threads = num_threads();
  auto run = [&] {
    Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_();
    Tensor y = group_norm(xi, 8, wi, Tensor());
    y.backward(g);
    return std::make_pair(y, std::make_pair(xi.grad(), wi.grad()));
  };
  set_num_threads(1);
  auto a = run();
  set_num_threads(2);
  auto b = run();
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(a.first, b.first));
  EXPECT_TRUE(same_bits(a.second.first, b.second.first));
  EXPECT_TRUE(same_bits(a.second.second, b.second.second));
}

TEST(GroupNorm, ModuleHasPyTorchParametersAndNormalises) {
  GroupNorm gn(2, 4);
  EXPECT_EQ(gn.state_dict().size(), 2u);
  EXPECT_EQ(gn.weight.to_vector<float>(), std::vector<float>(4, 1.f));
  EXPECT_EQ(gn.bias.to_vector<float>(), std::vector<float>(4, 0.f));
  Tensor y = gn.forward(from_vector(std::vector<float>{1, 3, 10, 20}, {1, 4}));
  std::vector<float> v = y.to_vector<float>();
  EXPECT_NEAR(v[0], -1.0, 1e-3);  // group {1, 3}: mean 2, std 1
  EXPECT_NEAR(v[3], 1.0, 1e-3);   // group {10, 20}: mean 15, std 5
  EXPECT_THROW(GroupNorm(3, 4), Error);
}

// An empty batch trains as PyTorch's: empty outputs and input gradients, zero weight and bias
// gradients (its backward views an empty tensor, which is contiguous, as in PyTorch).
TEST(GroupNorm, EmptyBatchGivesZeroParameterGradients) {
  for (const Shape& shape : {Shape{0, 4}, Shape{0, 4, 3}, Shape{0, 4, 3, 3}}) {
    SCOPED_TRACE(format_shape(shape));
    Tensor x = zeros(shape).requires_grad_();
    Tensor w = ones({4}).requires_grad_(), b = zeros({4}).requires_grad_();
    Tensor y = group_norm(x, 2, w, b);
    EXPECT_EQ(y.shape(), shape);
    sum(y).backward();
    EXPECT_EQ(x.grad().shape(), shape);
    EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(4, 0.f));
    EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, 0.f));
  }
  EXPECT_TRUE(zeros({0, 4, 3}).transpose(0, 2).is_contiguous());
}

TEST(GroupNorm, RejectsBadInputNamingTheArgument) {
  Tensor x = zeros({2, 6, 4});
  EXPECT_EQ(error_of([&] { group_norm(x, 0); }), "group_norm: expected num_groups to be positive, got 0");
  EXPECT_EQ(error_of([&] { group_norm(x, 4); }),
            "group_norm: expected the number of channels (6) to be divisible by num_groups (4)");
  EXPECT_EQ(error_of([&] { group_norm(x, 3, zeros({5})); }), "group_norm: expected weight of shape [6], got [5]");
  EXPECT_EQ(error_of([&] { group_norm(x, 3, Tensor(), zeros({6, 1})); }),
            "group_norm: expected bias of shape [6], got [6, 1]");
  EXPECT_EQ(error_of([&] { group_norm(zeros({6}), 3); }),
            "group_norm: expected input with at least 2 dims (N, C, *), got [6]");
  EXPECT_EQ(error_of([&] { group_norm(x, 3, zeros({6}, DType::Float64)); }),
            "native_group_norm: expected weight of dtype float32, got float64");
  EXPECT_EQ(error_of([&] { native_group_norm(x, Tensor(), Tensor(), 2, 6, 5, 3, 1e-5); }),
            "native_group_norm: expected input with N * C * HxW = 60 elements, got 48 (shape [2, 6, 4])");
  EXPECT_EQ(error_of([&] { native_group_norm(x, Tensor(), Tensor(), 2, 6, 4, -1, 1e-5); }),
            "native_group_norm: expected group to be positive, got -1");
  GroupNormResult r = native_group_norm(x, Tensor(), Tensor(), 2, 6, 4, 3, 1e-5);
  EXPECT_EQ(error_of([&] { native_group_norm_backward(x, x, zeros({2, 2}), r.rstd, Tensor(), 2, 6, 4, 3); }),
            "native_group_norm_backward: expected mean with N * group = 6 elements, got shape [2, 2]");
  EXPECT_EQ(error_of([&] { native_group_norm_backward(x, x, r.mean, zeros({7}), Tensor(), 2, 6, 4, 3); }),
            "native_group_norm_backward: expected rstd with N * group = 6 elements, got shape [7]");
  EXPECT_EQ(error_of([&] { native_group_norm_backward(zeros({2, 6, 5}), x, r.mean, r.rstd, Tensor(), 2, 6, 4, 3); }),
            "native_group_norm_backward: expected grad_out with N * C * HxW = 48 elements, got [2, 6, 5]");
  EXPECT_EQ(error_of([&] {
              native_group_norm_backward(x.to(DType::Float64), x, r.mean, r.rstd, Tensor(), 2, 6, 4, 3);
            }),
            "native_group_norm_backward: expected grad_out of dtype float32, got float64");
}

}  // namespace
}  // namespace tg
