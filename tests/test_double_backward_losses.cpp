// Second derivatives of cross_entropy, binary_cross_entropy_with_logits, var, the poolings and
// affine_grid against PyTorch 1.13 (tools/fixtures/hvp_losses.py): Hessian-vector products
// and gradient penalties through each, float64 to 1e-10 relative. The registry's
// gradgradcheck (tests/test_registry_gradcheck.cpp) checks the same ops by finite differences.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <functional>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

Tensor fixture(const std::string& c, const std::string& name) {
  return load_npy(testing::data_path("hvp_losses/" + c + "_" + name + ".npy"));
}

constexpr double kRtol = 1e-10, kAtol = 1e-12;

using LossFn = std::function<Tensor(const std::vector<Tensor>&)>;

// loss(params), its gradients with create_graph, and H v = d<grad, v>/d params, each against
// the fixture's.
void expect_hvp_matches(const std::string& c, size_t n_params, const LossFn& loss_fn) {
  SCOPED_TRACE(c);
  std::vector<Tensor> p;
  for (size_t i = 0; i < n_params; ++i) {
    p.push_back(fixture(c, "p" + std::to_string(i)));
    p.back().requires_grad_();
  }
  Tensor loss = loss_fn(p);
  testing::expect_close(loss, fixture(c, "loss"), kRtol, kAtol, "loss");
  std::vector<Tensor> g = grad({loss}, p, {}, false, /*allow_unused=*/true, /*create_graph=*/true);
  Tensor dot;
  for (size_t i = 0; i < n_params; ++i) {
    const std::string k = std::to_string(i);
    ASSERT_TRUE(g[i].defined()) << "grad" << k;
    testing::expect_close(g[i], fixture(c, "grad" + k), kRtol, kAtol, "grad" + k);
    if (!g[i].requires_grad()) continue;  // constant in every param: no term in H v
    Tensor term = sum(mul(g[i], fixture(c, "v" + k)));
    dot = dot.defined() ? add(dot, term) : term;
  }
  ASSERT_TRUE(dot.defined());
  std::vector<Tensor> hv = grad({dot}, p, {}, false, /*allow_unused=*/true);
  for (size_t i = 0; i < n_params; ++i) {
    const std::string k = std::to_string(i);
    testing::expect_close(hv[i].defined() ? hv[i] : zeros_like(p[i]), fixture(c, "hv" + k), kRtol, kAtol, "hv" + k);
  }
}

// penalty = |d head(linear(x, w, b)) / dx|^2, differentiated in w and b.
void expect_penalty_matches(const std::string& c, const std::function<Tensor(const Tensor&)>& head) {
  SCOPED_TRACE(c);
  Tensor x = fixture(c, "x"), w = fixture(c, "w"), b = fixture(c, "b");
  for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
  Tensor gx = grad({head(linear(x, w, b))}, {x}, {}, false, false, /*create_graph=*/true)[0];
  Tensor penalty = sum(mul(gx, gx));
  testing::expect_close(penalty, fixture(c, "penalty"), kRtol, kAtol, "penalty");
  std::vector<Tensor> gwb = grad({penalty}, {w, b});
  testing::expect_close(gwb[0], fixture(c, "grad_w"), kRtol, kAtol, "grad_w");
  testing::expect_close(gwb[1], fixture(c, "grad_b"), kRtol, kAtol, "grad_b");
}

// ---- cross_entropy ----------------------------------------------------------------------

TEST(DoubleBackwardLossesGolden, CrossEntropyMeanHessianMatchesPyTorch) {
  const Tensor t = fixture("ce_mean", "target");
  expect_hvp_matches("ce_mean", 1, [&](const std::vector<Tensor>& p) { return cross_entropy(p[0], t); });
}

TEST(DoubleBackwardLossesGolden, CrossEntropyNoneIgnoreIndexSmoothingMatchesPyTorch) {
  // (N, C, d1, d2) logits; the per-element losses weighted by r, which requires grad.
  const Tensor t = fixture("ce_none", "target");
  expect_hvp_matches("ce_none", 2, [&](const std::vector<Tensor>& p) {
    return sum(mul(cross_entropy(p[0], t, {Reduction::None, 1, 0.2}), p[1]));
  });
}

TEST(DoubleBackwardLossesGolden, CrossEntropyOfAProductMeanIgnoreIndexSmoothingMatchesPyTorch) {
  const Tensor t = fixture("ce_smooth", "target");
  expect_hvp_matches("ce_smooth", 2, [&](const std::vector<Tensor>& p) {
    return cross_entropy(mul(p[0], p[1]), t, {Reduction::Mean, 3, 0.1});
  });
}

TEST(DoubleBackwardLossesGolden, CrossEntropyGradientPenaltyMatchesPyTorch) {
  const Tensor t = fixture("ce_penalty", "target");
  expect_penalty_matches("ce_penalty",
                         [&](const Tensor& o) { return cross_entropy(o, t, {Reduction::Sum, -100, 0.05}); });
}

// ---- binary_cross_entropy_with_logits -------------------------------------------------------

TEST(DoubleBackwardLossesGolden, BceWithLogitsPosWeightHessianInInputAndTargetMatchesPyTorch) {
  // Logits 0 (where the stable formula has max(-x, 0) and |x|) and +-25 included.
  const Tensor pw = fixture("bce_pw", "pos_weight");
  expect_hvp_matches("bce_pw", 2, [&](const std::vector<Tensor>& p) {
    return binary_cross_entropy_with_logits(p[0], p[1], pw);
  });
}

TEST(DoubleBackwardLossesGolden, BceWithLogitsHessianInPosWeightMatchesPyTorchsFormula) {
  // torch 1.13's op is not differentiable in pos_weight; the fixture differentiates its formula.
  expect_hvp_matches("bce_pw_formula", 3, [&](const std::vector<Tensor>& p) {
    return binary_cross_entropy_with_logits(p[0], p[1], p[2]);
  });
}

TEST(DoubleBackwardLossesGolden, BceWithLogitsOfAProductSumMatchesPyTorch) {
  expect_hvp_matches("bce_sum", 3, [&](const std::vector<Tensor>& p) {
    return binary_cross_entropy_with_logits(mul(p[0], p[1]), p[2], Tensor(), Reduction::Sum);
  });
}

TEST(DoubleBackwardLossesGolden, BceWithLogitsGradientPenaltyMatchesPyTorch) {
  const Tensor t = fixture("bce_penalty", "target"), pw = fixture("bce_penalty", "pos_weight");
  expect_penalty_matches("bce_penalty", [&](const Tensor& o) { return binary_cross_entropy_with_logits(o, t, pw); });
}

// ---- var ----------------------------------------------------------------------------------

TEST(DoubleBackwardLossesGolden, VarHessianMatchesPyTorch) {
  expect_hvp_matches("var_dim", 3,
                     [](const std::vector<Tensor>& p) { return sum(mul(var(mul(p[0], p[1]), {1}), p[2])); });
  expect_hvp_matches("var_all", 1, [](const std::vector<Tensor>& p) {
    Tensor v = var(p[0], {}, 0.0);
    return mul(v, v);
  });
}

// ---- pooling and affine_grid: sum(r * op(x * a)^2) ------------------------------------------

void expect_pooled_hvp_matches(const std::string& c, const std::function<Tensor(const Tensor&)>& op) {
  expect_hvp_matches(c, 3, [&](const std::vector<Tensor>& p) {
    Tensor y = op(mul(p[0], p[1]));
    return sum(mul(p[2], mul(y, y)));
  });
}

TEST(DoubleBackwardLossesGolden, AvgPool2dHessianMatchesPyTorch) {
  expect_pooled_hvp_matches("avg_pool", [](const Tensor& x) { return avg_pool2d(x, {3}, {2}, {1}, true, false); });
  expect_pooled_hvp_matches("avg_pool_div",
                            [](const Tensor& x) { return avg_pool2d(x, {2}, {}, {0}, false, true, 3); });
}

TEST(DoubleBackwardLossesGolden, AdaptiveAvgPool2dHessianMatchesPyTorch) {
  expect_pooled_hvp_matches("adaptive_avg_pool", [](const Tensor& x) { return adaptive_avg_pool2d(x, {3, 4}); });
}

TEST(DoubleBackwardLossesGolden, MaxPool2dHessianMatchesPyTorch) {
  expect_pooled_hvp_matches("max_pool", [](const Tensor& x) { return max_pool2d(x, {3}, {2}, {1}); });
  expect_pooled_hvp_matches("max_pool_dilation",
                            [](const Tensor& x) { return max_pool2d(x, {3, 2}, {1, 2}, {1, 0}, {2, 1}); });
}

TEST(DoubleBackwardLossesGolden, AffineGridHessianMatchesPyTorch) {
  expect_pooled_hvp_matches("affine_grid", [](const Tensor& th) { return affine_grid(th, {2, 1, 3, 4}, false); });
  expect_pooled_hvp_matches("affine_grid_ac", [](const Tensor& th) { return affine_grid(th, {1, 3, 5, 2}, true); });
}

// ---- behaviour ------------------------------------------------------------------------------

// The gradient of the gradient in the output gradient is the forward pooling of the new
// direction; without create_graph the gradients carry no history.
TEST(DoubleBackwardLosses, PoolingGradientsAreLinearInTheOutputGradient) {
  Tensor x = randn({1, 2, 6, 6}, DType::Float64);
  x.requires_grad_();
  Tensor y = max_pool2d(x, {2});
  Tensor gy = randn(y.shape(), DType::Float64);
  gy.requires_grad_();
  Tensor gx = grad({y}, {x}, {gy}, /*retain_graph=*/true, false, /*create_graph=*/true)[0];
  ASSERT_TRUE(gx.requires_grad());
  Tensor v = randn(x.shape(), DType::Float64);
  Tensor dgy = grad({sum(mul(gx, v))}, {gy})[0];
  // d<P^T gy, v>/d gy = P v: v gathered at the argmaxes of x (planes of 6 x 6 -> 3 x 3)
  ValuesIndices r = max_pool2d_with_indices(x.detach(), {2});
  Tensor expected = zeros(y.shape(), DType::Float64);
  const int64_t* ip = r.indices.data<int64_t>();
  for (int64_t i = 0; i < expected.numel(); ++i) expected.data<double>()[i] = v.data<double>()[(i / 9) * 36 + ip[i]];
  testing::expect_close(dgy, expected, 0, 0, "max_pool2d double backward in grad_output");
  Tensor g_plain = grad({max_pool2d(x, {2})}, {x}, {gy.detach()})[0];
  EXPECT_FALSE(g_plain.requires_grad());
}

TEST(DoubleBackwardLosses, CrossEntropyOfComputedLogitsMatchesLogSoftmaxAndNll) {
  // cross_entropy saves the log-probabilities, not the logits: their history reaches the double
  // backward through the entry's edge (BackwardContext::input_history), so logits computed by
  // an op (not a leaf) get their second derivative, the same as through the unfused ops.
  Tensor w = randn({3, 4}, DType::Float64), x = randn({5, 4}, DType::Float64);
  w.requires_grad_();
  Tensor t = from_vector(std::vector<int64_t>{0, 2, 1, 1, 0}, {5});
  Tensor gw = grad({cross_entropy(linear(x, w), t)}, {w}, {}, false, false, /*create_graph=*/true)[0];
  ASSERT_TRUE(gw.requires_grad());
  Tensor hw = grad({sum(mul(gw, gw))}, {w})[0];
  // the same through log_softmax and a one-hot NLL spelled in ops
  Tensor w2 = w.detach().clone();
  w2.requires_grad_();
  Tensor onehot = zeros({5, 3}, DType::Float64);
  for (int64_t n = 0; n < 5; ++n) onehot.data<double>()[n * 3 + t.data<int64_t>()[n]] = 1.0;
  Tensor loss2 = div(neg(sum(mul(log_softmax(linear(x, w2), 1), onehot))), 5.0);
  Tensor gw2 = grad({loss2}, {w2}, {}, false, false, true)[0];
  Tensor hw2 = grad({sum(mul(gw2, gw2))}, {w2})[0];
  testing::expect_close(hw, hw2, 1e-12, 1e-14, "cross_entropy vs log_softmax + nll");
}

}  // namespace
}  // namespace tg
