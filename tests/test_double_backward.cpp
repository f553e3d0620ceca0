// Double backward against PyTorch: Hessian-vector products and a gradient penalty of a small
// MLP (tools/fixtures/hvp.py, torch.autograd.grad with create_graph=True), float64 to 1e-10
// relative; and the engine's create_graph rules.
#include <gtest/gtest.h>

#include <functional>

#include <tapegrad/tapegrad.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

Tensor fixture(const std::string& name) { return load_npy(testing::data_path("hvp/" + name + ".npy")); }

struct Mlp {
  Tensor w1 = fixture("w1"), b1 = fixture("b1"), w2 = fixture("w2"), b2 = fixture("b2");
  Tensor t = fixture("t");
  Mlp() {
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->requires_grad_();
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor loss(const Tensor& x) const {
    Tensor o = linear(tanh(linear(x, w1, b1)), w2, b2);
    return add(mse_loss(softmax(o, -1), t), mean(gelu(o)));
  }
};

const char* const kNames[] = {"w1", "b1", "w2", "b2"};

// Float64 throughout: the only differences from PyTorch are rounding in sums of a few terms.
constexpr double kRtol = 1e-10, kAtol = 1e-12;

TEST(DoubleBackwardGolden, MlpHessianVectorProductMatchesPyTorch) {
  Mlp m;
  Tensor loss = m.loss(fixture("x"));
  testing::expect_close(loss, fixture("loss"), kRtol, kAtol, "loss");
  std::vector<Tensor> g = grad({loss}, m.params(), {}, false, false, /*create_graph=*/true);
  Tensor dot;
  for (size_t i = 0; i < g.size(); ++i) {
    testing::expect_close(g[i], fixture(std::string("grad_") + kNames[i]), kRtol, kAtol, kNames[i]);
    ASSERT_TRUE(g[i].requires_grad()) << kNames[i];
    Tensor term = sum(mul(g[i], fixture(std::string("v_") + kNames[i])));
    dot = dot.defined() ? add(dot, term) : term;
  }
  std::vector<Tensor> hv = grad({dot}, m.params());
  for (size_t i = 0; i < hv.size(); ++i)
    testing::expect_close(hv[i], fixture(std::string("hv_") + kNames[i]), kRtol, kAtol, kNames[i]);
}

TEST(DoubleBackwardGolden, MlpGradientPenaltyMatchesPyTorch) {
  Mlp m;
  Tensor x = fixture("x");
  x.requires_grad_();
  Tensor gx = grad({m.loss(x)}, {x}, {}, false, false, /*create_graph=*/true)[0];
  Tensor penalty = sum(mul(gx, gx));
  testing::expect_close(penalty, fixture("penalty"), kRtol, kAtol, "penalty");
  penalty.backward();
  for (size_t i = 0; i < 4; ++i)
    testing::expect_close(m.params()[i].grad(), fixture(std::string("penalty_grad_") + kNames[i]), kRtol, kAtol,
                          kNames[i]);
}

// conv 3x3 -> GroupNorm(2) -> bilinear x2 -> conv 1x1 -> mse: every one of the three is twice
// differentiable (convolution by its own backward, group_norm by recomputation, upsampling by
// its adjoint), and so the Hessian-vector product matches PyTorch's.
TEST(DoubleBackwardGolden, ConvGroupNormUpsampleHessianVectorProductMatchesPyTorch) {
  const char* const names[] = {"cw1", "cb1", "gw", "gb", "cw2", "cb2"};
  std::vector<Tensor> p;
  for (const char* n : names) {
    p.push_back(fixture(n));
    p.back().requires_grad_();
  }
  Tensor h = conv2d(fixture("conv_x"), p[0], p[1], {1, 1}, {1, 1});
  h = group_norm(h, 2, p[2], p[3]);
  h = upsample_bilinear2d(h, {10, 8}, false);
  Tensor loss = mse_loss(conv2d(h, p[4], p[5]), fixture("conv_t"));
  testing::expect_close(loss, fixture("conv_loss"), kRtol, kAtol, "loss");
  std::vector<Tensor> g = grad({loss}, p, {}, false, false, /*create_graph=*/true);
  Tensor dot;
  for (size_t i = 0; i < g.size(); ++i) {
    Tensor term = sum(mul(g[i], fixture(std::string("v_") + names[i])));
    dot = dot.defined() ? add(dot, term) : term;
  }
  std::vector<Tensor> hv = grad({dot}, p);
  for (size_t i = 0; i < hv.size(); ++i)
    testing::expect_close(hv[i], fixture(std::string("hv_") + names[i]), kRtol, kAtol, names[i]);
}

TEST(DoubleBackward, WithoutCreateGraphGradientsCarryNoHistory) {
  Tensor x = randn({3}, DType::Float64);
  x.requires_grad_();
  std::vector<Tensor> g = grad({sum(mul(x, x))}, {x});
  EXPECT_FALSE(g[0].requires_grad());
  Tensor y = mul(x, x);
  sum(y).backward();
  EXPECT_FALSE(x.grad().requires_grad());
}

TEST(DoubleBackward, ThirdDerivativeOfACubic) {
  // d^3/dx^3 x^3 = 6, through three create_graph levels of mul.
  Tensor x = full({1}, 1.5, DType::Float64);
  x.requires_grad_();
  Tensor y = mul(mul(x, x), x);
  Tensor d1 = grad({sum(y)}, {x}, {}, false, false, true)[0];   // 3 x^2
  Tensor d2 = grad({sum(d1)}, {x}, {}, false, false, true)[0];  // 6 x
  Tensor d3 = grad({sum(d2)}, {x})[0];                          // 6
  EXPECT_DOUBLE_EQ(d1.item(), 3 * 1.5 * 1.5);
  EXPECT_DOUBLE_EQ(d2.item(), 9.0);
  EXPECT_DOUBLE_EQ(d3.item(), 6.0);
}

// Found by random programs against PyTorch: a retained gradient was accumulated in place and
// unrecorded, so after two create_graph passes it held the right value with the first pass's
// history only (its derivative came out half of PyTorch's), and a handle to the first .grad()
// changed under the user. PyTorch: y.grad = 24 and d(y.grad)/dx = 24 at x = 2.
TEST(DoubleBackward, ARetainedGradientAccumulatesWithItsHistory) {
  Tensor x = full({1}, 2.0, DType::Float64);
  x.requires_grad_();
  Tensor y = mul(x, 1.0);
  Tensor L = sum(pow(y, 3.0));  // dL/dy = 3 y^2
  y.retain_grad();
  L.backward(Tensor(), false, /*create_graph=*/true);
  const Tensor first = y.grad();
  L.backward(Tensor(), false, /*create_graph=*/true);
  const Tensor gy = y.grad();
  EXPECT_DOUBLE_EQ(first.item(), 12.0);  // unchanged by the second pass
  EXPECT_DOUBLE_EQ(gy.item(), 24.0);
  EXPECT_DOUBLE_EQ(grad({sum(gy)}, {x})[0].item(), 24.0);  // d(6 x^2)/dx
  EXPECT_DOUBLE_EQ(gy.item(), 24.0);  // the grad() flowed into y's retained gradient out of place
  x.zero_grad();  // create_graph into a leaf: its .grad()'s history refers back to it (tape.h)
  y.zero_grad();
  // Without create_graph the sum has no history.
  Tensor y2 = mul(x, 1.0);
  y2.retain_grad();
  sum(y2).backward();
  sum(y2).backward();
  EXPECT_DOUBLE_EQ(y2.grad().item(), 2.0);
  EXPECT_FALSE(y2.grad().requires_grad());
}

TEST(DoubleBackward, SavedTensorChangedInPlaceIsStillCaught) {
  Tensor x = randn({3}, DType::Float64);
  x.requires_grad_();
  Tensor a = mul(x, 2.0);
  Tensor y = mul(a, a);
  {
    NoGradGuard no_grad;
    a.mul_(3.0);
  }
  const std::string msg = error_of([&] { grad({sum(y)}, {x}, {}, false, false, true); });
  EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
}

// Found by a differential tester: the backwards that recompute their op (layer_norm, group_norm,
// batch_norm, silu, BCE with logits; framework/recompute.h) each take a tg::grad of their
// composite, and that grad walked the whole history behind it: a double backward through a chain
// of n of them walked O(n^2) entries (3200 layer_norms: about 1 s, against 40 ms for tanh). The walk
// is counted, not timed: it grows as the chain does, as for tanh. (layer_norm with a bias: the
// bias's stand-in is a leaf of the composite, which must not make its grad walk everything.)
TEST(DoubleBackward, RecomputedBackwardsWalkTheirCompositeNotTheWholeGraph) {
  using Step = std::function<Tensor(const Tensor&)>;
  auto walked = [](int n, const Step& step) {  // the entries walked by a double backward of n steps
    Tensor x = randn({4, 8}, DType::Float64).requires_grad_();
    Tensor h = x;
    for (int i = 0; i < n; ++i) h = step(h);
    const uint64_t before = detail::backward_entries_walked();
    grad({sum(mul(h, h))}, {x}, {}, false, false, /*create_graph=*/true);
    return detail::backward_entries_walked() - before;
  };
  Tensor w = randn({8}, DType::Float64).requires_grad_(), b = randn({8}, DType::Float64).requires_grad_();
  const Step norm = [&](const Tensor& h) { return layer_norm(h, {8}, w, b); };
  const Step act = [](const Tensor& h) { return silu(h); };
  const uint64_t tanh_200 = walked(200, [](const Tensor& h) { return tanh(h); });
  for (const Step& step : {norm, act}) {
    const uint64_t n100 = walked(100, step), n200 = walked(200, step);
    // (now 16 entries a layer_norm, 5 a silu, 1 a tanh; it was about n^2 / 2 for either)
    EXPECT_LE(n200, 2 * n100 + 10) << "100 steps walked " << n100 << " entries, 200 walked " << n200;
    EXPECT_LE(n200, 20 * tanh_200) << "200 steps walked " << n200 << " entries, 200 tanh " << tanh_200;
  }
}

}  // namespace
}  // namespace tg
