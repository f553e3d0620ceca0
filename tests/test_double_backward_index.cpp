// Double backward through indexing, selection and in-place ops, against PyTorch
// (tools/fixtures/double_backward_index.py, float64 to 1e-10 relative): a gradient penalty
// through embedding and index_select, a Hessian-vector product through in-place ops on a
// non-leaf (mul_, add_ and mul_ on views: copy_slices), and one through cat + where. The
// registry's gradgradcheck covers each op alone; these cover them composed, with repeats and
// padding, where the engine sums the gradients of several uses.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

Tensor fixture(const std::string& name) {
  return load_npy(testing::data_path("double_backward_index/" + name + ".npy"));
}
Tensor param(const std::string& name) {
  Tensor t = fixture(name);
  t.requires_grad_();
  return t;
}

constexpr double kRtol = 1e-10, kAtol = 1e-12;

Tensor dot(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  Tensor out;
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor term = sum(mul(a[i], b[i]));
    out = out.defined() ? add(out, term) : term;
  }
  return out;
}

class GradientPenalty : public ::testing::TestWithParam<bool> {};

TEST_P(GradientPenalty, ThroughEmbeddingAndIndexSelectMatchesPyTorch) {
  const bool padded = GetParam();
  const std::string tag = padded ? "pen_pad_" : "pen_";
  Tensor W = param("pen_W"), x = param("pen_x");
  Tensor e = embedding(W, fixture("pen_idx_e"), padded ? std::optional<int64_t>(2) : std::nullopt).reshape({6, 3});
  Tensor s = index_select(x, 0, fixture("pen_idx_s"));
  Tensor es = mul(e, s);
  Tensor loss = add(sum(pow(tanh(es), 2.0)), sum(es));
  std::vector<Tensor> g = grad({loss}, {W, x}, {}, false, false, /*create_graph=*/true);
  ASSERT_TRUE(g[0].requires_grad());
  ASSERT_TRUE(g[1].requires_grad());
  Tensor penalty = dot(g, g);
  testing::expect_close(penalty, fixture(tag + "penalty"), kRtol, kAtol, "penalty");
  std::vector<Tensor> gg = grad({penalty}, {W, x});
  testing::expect_close(gg[0], fixture(tag + "gW"), kRtol, kAtol, "d penalty / d W");
  testing::expect_close(gg[1], fixture(tag + "gx"), kRtol, kAtol, "d penalty / d x");
}
INSTANTIATE_TEST_SUITE_P(DoubleBackwardIndex, GradientPenalty, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "padding_idx" : "plain"; });

// PyTorch supports create_graph through x.mul_(2) on a non-leaf; so do we, and through add_ and
// mul_ on views of it (the base's history becomes copy_slices).
TEST(DoubleBackwardIndex, HessianVectorProductThroughInplaceOpsOnANonLeafMatchesPyTorch) {
  Tensor x = param("inplace_x"), z = param("inplace_z");
  Tensor y = mul(x, x);
  y.mul_(2.0);
  y.narrow(0, 1, 2).add_(z, 0.5);
  y.select(1, 0).mul_(-1.5);
  Tensor loss = sum(pow(y, 3.0));
  testing::expect_close(loss, fixture("inplace_loss"), kRtol, kAtol, "loss");
  std::vector<Tensor> g = grad({loss}, {x, z}, {}, false, false, /*create_graph=*/true);
  testing::expect_close(g[0], fixture("inplace_gx"), kRtol, kAtol, "d loss / d x");
  testing::expect_close(g[1], fixture("inplace_gz"), kRtol, kAtol, "d loss / d z");
  std::vector<Tensor> hv = grad({dot(g, {fixture("inplace_vx"), fixture("inplace_vz")})}, {x, z});
  testing::expect_close(hv[0], fixture("inplace_hx"), kRtol, kAtol, "Hv x");
  testing::expect_close(hv[1], fixture("inplace_hz"), kRtol, kAtol, "Hv z");
}

TEST(DoubleBackwardIndex, HessianVectorProductThroughCatAndWhereMatchesPyTorch) {
  Tensor x = param("catwhere_x"), z = param("catwhere_z");
  Tensor c = cat({pow(x, 2.0), where(gt(x, 0.0), pow(x, 3.0), neg(x)), tanh(z)}, 0);
  Tensor loss = sum(mul(c, fixture("catwhere_w")));
  testing::expect_close(loss, fixture("catwhere_loss"), kRtol, kAtol, "loss");
  std::vector<Tensor> g = grad({loss}, {x, z}, {}, false, false, /*create_graph=*/true);
  testing::expect_close(g[0], fixture("catwhere_gx"), kRtol, kAtol, "d loss / d x");
  testing::expect_close(g[1], fixture("catwhere_gz"), kRtol, kAtol, "d loss / d z");
  std::vector<Tensor> hv = grad({dot(g, {fixture("catwhere_vx"), fixture("catwhere_vz")})}, {x, z});
  testing::expect_close(hv[0], fixture("catwhere_hx"), kRtol, kAtol, "Hv x");
  testing::expect_close(hv[1], fixture("catwhere_hz"), kRtol, kAtol, "Hv z");
}

// d/dx of sum(max(x, 1) * x): the max's gradient scatters g to the argmax, and differentiating
// that again gathers from the same positions. By hand: f = sum_r x[r, a_r]^2, so the gradient is
// 2 x at the argmaxes and 0 elsewhere, and the Hessian-vector product is 2 v there.
TEST(DoubleBackwardIndex, MaxOverADimScattersAndGathersAtTheArgmax) {
  Tensor x = from_vector(std::vector<double>{0.5, -1.0, 2.0, 3.0, 0.25, -2.0}, {2, 3});
  x.requires_grad_();
  Tensor m = max(x, 1).values;
  Tensor g = grad({sum(mul(m, m))}, {x}, {}, false, false, true)[0];
  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor hv = grad({sum(mul(g, v))}, {x})[0];
  testing::expect_close(g.detach(), from_vector(std::vector<double>{0, 0, 4, 6, 0, 0}, {2, 3}), 0, 0, "grad");
  testing::expect_close(hv, from_vector(std::vector<double>{0, 0, 6, 8, 0, 0}, {2, 3}), 0, 0, "Hv");
}

// The scatter-adds recorded under create_graph are the first-order kernels: the same bits at any
// thread count, and the same as without create_graph.
TEST(DoubleBackwardIndex, ScatterGradientsHaveTheSameBitsAtAnyThreadCountAndWithoutCreateGraph) {
  const int saved = num_threads();
  Tensor w = randn({300, 64}, DType::Float32), x = randn({400, 300}, DType::Float32);
  w.requires_grad_();
  x.requires_grad_();
  std::vector<int64_t> rows(2000), cols(400 * 200);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>((i * 37) % 300);
  for (size_t i = 0; i < cols.size(); ++i) cols[i] = static_cast<int64_t>((i * 53) % 300);
  Tensor ri = from_vector(rows, {2000}), ci = from_vector(cols, {400, 200});
  // Linear in the gathered values, so that every op but the scatters computes the same thing
  // with and without create_graph; the weights require grad, so that under create_graph the
  // gradients (the scatters of the weights) are recorded.
  Tensor c1 = randn({2000, 64}, DType::Float32), c2 = randn({400, 200}, DType::Float32);
  c1.requires_grad_();
  c2.requires_grad_();
  auto run = [&](bool create_graph) {
    Tensor loss = add(add(sum(mul(embedding(w, ri), c1)), sum(mul(index_select(w, 0, ri), c1))),
                      sum(mul(gather(x, 1, ci), c2)));
    return grad({loss}, {w, x}, {}, false, false, create_graph);
  };
  set_num_threads(2);
  std::vector<Tensor> two = run(true), plain = run(false);
  set_num_threads(1);
  std::vector<Tensor> one = run(true);
  set_num_threads(saved);
  for (size_t i = 0; i < two.size(); ++i) {
    EXPECT_TRUE(two[i].requires_grad());
    EXPECT_FALSE(plain[i].requires_grad());
    EXPECT_TRUE(same_bits(two[i].detach(), one[i].detach())) << "1 vs 2 threads, gradient " << i;
    EXPECT_TRUE(same_bits(two[i].detach(), plain[i])) << "create_graph vs plain, gradient " << i;
  }
}

}  // namespace
}  // namespace tg
