// The matrix products' own threading (ops/matmul_kernels.cpp): the output is cut into tiles
// that depend on the shapes alone, so results are the same bits for any thread count, and every
// tile edge, transpose and accumulation is right against a float64 reference.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <tapegrad/ops/matmul.h>
#include "test_util.h"

namespace tg {
namespace {

// op(A) op(B) (+ C) in float64, from row-major buffers stored as gemm reads them.
std::vector<double> reference(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
                              int64_t n, int64_t k, int64_t m, bool ta, bool tb, bool acc) {
  std::vector<double> c(n * m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = acc ? c0[i * m + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(ta ? a[p * n + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * m + j]);
      c[i * m + j] = s;
    }
  return c;
}

struct Product {
  int64_t n, k, m;
};

// Shapes that give one tile, a row split, a column split, both, ragged last tiles and tiny
// products (the plain-loop path).
const Product kProducts[] = {{3, 4, 5}, {1, 300, 1}, {200, 64, 37}, {37, 64, 513}, {300, 129, 250},
                             {1000, 16, 40}, {65, 1000, 70}};

std::vector<float> run_gemm(const Product& p, bool ta, bool tb, bool acc, int threads) {
  manual_seed(7);
  std::vector<float> a = randn({p.n * p.k}).to_vector<float>(), b = randn({p.k * p.m}).to_vector<float>();
  std::vector<float> c = randn({p.n * p.m}).to_vector<float>();
  const int saved = num_threads();
  set_num_threads(threads);
  gemm<float>(a.data(), b.data(), c.data(), p.n, p.k, p.m, ta, tb, acc);
  set_num_threads(saved);
  return c;
}

TEST(MatmulThreads, EveryTilingMatchesTheFloat64Product) {
  for (const Product& p : kProducts)
    for (int flags = 0; flags < 8; ++flags) {
      const bool ta = flags & 1, tb = flags & 2, acc = flags & 4;
      manual_seed(7);
      std::vector<float> a = randn({p.n * p.k}).to_vector<float>(), b = randn({p.k * p.m}).to_vector<float>();
      std::vector<float> c0 = randn({p.n * p.m}).to_vector<float>();
      std::vector<double> want = reference(a, b, c0, p.n, p.k, p.m, ta, tb, acc);
      std::vector<float> got = run_gemm(p, ta, tb, acc, 2);
      // float32 sums of k products of N(0,1) values: error grows like sqrt(k) ulps of the terms.
      const double tol = 1e-5 * std::sqrt(double(p.k)) * 4;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol) << p.n << "x" << p.k << "x" << p.m << " flags " << flags << " at " << i;
    }
}

TEST(MatmulThreads, SameBitsForOneTwoAndThreeThreads) {
  for (const Product& p : kProducts)
    for (int flags = 0; flags < 8; ++flags) {
      const bool ta = flags & 1, tb = flags & 2, acc = flags & 4;
      std::vector<float> one = run_gemm(p, ta, tb, acc, 1);
      EXPECT_EQ(run_gemm(p, ta, tb, acc, 2), one) << p.n << "x" << p.k << "x" << p.m << " flags " << flags;
      EXPECT_EQ(run_gemm(p, ta, tb, acc, 3), one) << p.n << "x" << p.k << "x" << p.m << " flags " << flags;
    }
}

TEST(MatmulThreads, LinearAndBatchedMatmulWithGradientsIgnoreThreadCount) {
  auto run = [](int threads) {
    const int saved = num_threads();
    set_num_threads(threads);
    manual_seed(11);
    Tensor x = randn({4, 150, 96}).requires_grad_(), w = randn({200, 96}).requires_grad_();
    Tensor b = randn({200}).requires_grad_(), y = randn({4, 200, 120}).requires_grad_();
    Tensor out = matmul(linear(x, w, b), y);
    out.backward(randn(out.shape()));
    set_num_threads(saved);
    return std::vector<Tensor>{out.detach(), x.grad(), w.grad(), b.grad(), y.grad()};
  };
  std::vector<Tensor> one = run(1);
  for (int threads : {2, 3}) {
    std::vector<Tensor> other = run(threads);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], other[i])) << "tensor " << i << ", " << threads << " threads";
  }
}

// An absurd thread count is a tg::Error before OpenMP sees it (libgomp would crash or run out
// of memory building the team), and a refused count leaves the setting as it was.
TEST(SetNumThreads, RefusesCountsOutsideOneTo4096) {
  const int saved = num_threads();
  for (int n : {0, -1, 4097, 100000, 2147483647})
    EXPECT_EQ(error_of([n] { set_num_threads(n); }),
              "set_num_threads: expected a thread count in [1, 4096], got " + std::to_string(n));
  EXPECT_EQ(num_threads(), saved);
}

}  // namespace
}  // namespace tg
