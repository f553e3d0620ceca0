// Edge values where PyTorch's answer is defined and ours was once silently wrong or refused
// (found by differential testing against PyTorch 1.13): a linear layer without input features,
// var over nothing or with more correction than elements, relu at NaN and -0, where at -0, the product
// of two vectors, max over the dim of a 0-d tensor, backward into a .grad that is an expanded
// tensor, mixed-dtype add_, integer fills and comparisons out of range, in-place integer ops
// with a floating result, smooth_l1's gradient at NaN, integer pow / clamp and s / x,
// binary_cross_entropy_with_logits for very negative logits, gelu-tanh's second derivative in
// its tails, clamp with a NaN bound, in-place integer factors out of range, s - INT_MIN, pow's
// masked gradients under create_graph, l1 losses at an infinite difference, a 0-d transpose and
// integer powers with negative exponents. The expected values are PyTorch's (or, where PyTorch itself loses digits, the exact
// ones), written out rather than kept as fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

namespace {

using namespace tg;

// Runs f at one and two threads; both results must be the same bits (uninitialised memory, the
// old failure of the first two tests, also differed between them).
template <class F>
Tensor at_both_thread_counts(F f) {
  const int threads = num_threads();
  set_num_threads(1);
  Tensor one = f();
  set_num_threads(2);
  Tensor two = f();
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(one, two));
  return one;
}

TEST(CoreOpsEdges, LinearWithoutInputFeaturesIsTheBiasAndItsGradientsAreSums) {
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16}) {
    Tensor x = zeros({2, 3, 0}, dt).requires_grad_(), w = zeros({2, 0}, dt).requires_grad_();
    Tensor b = from_vector(std::vector<double>{1.5, -2}, {2}).to(dt).requires_grad_();
    Tensor y = at_both_thread_counts([&] { return linear(x, w, b); });
    ASSERT_EQ(y.shape(), (Shape{2, 3, 2})) << dtype_name(dt);
    EXPECT_EQ(y.to(DType::Float64).to_vector<double>(), (std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2, 1.5, -2,
                                                                             1.5, -2, 1.5, -2}))
        << dtype_name(dt);
    // loss = sum(y * c): db = sum of c over the 6 rows, dx and dW are empty
    Tensor c = from_vector(std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}, {2, 3, 2}).to(dt);
    sum(mul(linear(x, w, b), c)).backward();
    EXPECT_EQ(b.grad().to(DType::Float64).to_vector<double>(), (std::vector<double>{6, 12})) << dtype_name(dt);
    EXPECT_EQ(x.grad().shape(), (Shape{2, 3, 0}));
    EXPECT_EQ(w.grad().shape(), (Shape{2, 0}));
  }
  // The recorded backward (create_graph) takes the same rows.
  Tensor x = zeros({3, 0}, DType::Float64).requires_grad_();
  Tensor b = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor w = zeros({2, 0}, DType::Float64).requires_grad_();
  std::vector<Tensor> g = grad({sum(linear(x, w, b))}, {b}, {}, false, true, true);
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 3}));
}

TEST(CoreOpsEdges, VarOverNoElementsIsNanAndWithNoDegreeOfFreedomInf) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor v = at_both_thread_counts([&] { return var(zeros({3, 0}, dt), {1}); });
    ASSERT_EQ(v.shape(), (Shape{3}));
    for (double e : v.to(DType::Float64).to_vector<double>()) EXPECT_TRUE(std::isnan(e)) << dtype_name(dt);
    EXPECT_TRUE(std::isnan(var(zeros({3, 0}, dt)).to(DType::Float64).item<double>()));
  }
  // PyTorch divides by max(N - correction, 0): Inf for a positive sum of squares, NaN for zero.
  const Tensor x = from_vector(std::vector<double>{1, 2, 4}, {3});
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(var(x, {0}, 4.0).item<double>(), inf);
  EXPECT_EQ(var(x, {0}, 3.0).item<double>(), inf);
  EXPECT_DOUBLE_EQ(var(x, {0}, 2.0).item<double>(), 14.0 / 3.0);
  EXPECT_TRUE(std::isnan(var(from_vector(std::vector<double>{2, 2}, {2}), {0}, 2.0).item<double>()));
}

TEST(CoreOpsEdges, ReluPassesNanAndItsGradient) {
  const double nan = std::nan("");
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor x = from_vector(std::vector<double>{nan, -1, 2, -0.0, 0}, {5}).to(dt).requires_grad_();
    Tensor y = relu(x);
    const std::vector<double> v = y.to(DType::Float64).to_vector<double>();
    EXPECT_TRUE(std::isnan(v[0])) << dtype_name(dt);
    EXPECT_EQ(std::vector<double>(v.begin() + 1, v.end()), (std::vector<double>{0, 2, 0, 0}));
    EXPECT_TRUE(std::signbit(v[3])) << "relu(-0) is -0, as PyTorch's";
    EXPECT_FALSE(std::signbit(v[1])) << "relu(-1) is +0";
    sum(y).backward();
    EXPECT_EQ(x.grad().to(DType::Float64).to_vector<double>(), (std::vector<double>{1, 0, 1, 0, 0}));
    // relu_, and the recorded backward's mask (create_graph)
    Tensor z = mul(x, 1.0);
    relu_(z);
    EXPECT_TRUE(std::isnan(z.to(DType::Float64).to_vector<double>()[0]));
    std::vector<Tensor> g = grad({sum(relu(x))}, {x}, {}, false, true, true);
    EXPECT_EQ(g[0].to(DType::Float64).to_vector<double>(), (std::vector<double>{1, 0, 1, 0, 0}));
  }
}

TEST(CoreOpsEdges, WhereAndMaskedFillKeepTheSignOfZero) {
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16}) {
    const Tensor cond = from_vector(std::vector<int64_t>{1, 0}, {2});
    const Tensor a = from_vector(std::vector<double>{-0.0, 1}, {2}).to(dt);
    const Tensor b = from_vector(std::vector<double>{5, -0.0}, {2}).to(dt);
    for (double e : where(cond, a, b).to(DType::Float64).to_vector<double>()) {
      EXPECT_EQ(e, 0.0);
      EXPECT_TRUE(std::signbit(e)) << dtype_name(dt);
    }
    const std::vector<double> m =
        masked_fill(from_vector(std::vector<double>{-0.0, 3}, {2}).to(dt), from_vector(std::vector<int64_t>{0, 1}, {2}),
                    7.0)
            .to(DType::Float64)
            .to_vector<double>();
    EXPECT_TRUE(std::signbit(m[0]) && m[0] == 0.0) << dtype_name(dt);
    EXPECT_EQ(m[1], 7.0);
  }
}

TEST(CoreOpsEdges, MatmulOfTwoVectorsIsTheirDotProduct) {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{4, 5, 6}, {3}).requires_grad_();
  Tensor d = matmul(a, b);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<double>(), 32.0);
  d.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(error_of([] { matmul(zeros({3}), zeros({4})); }), "matmul: vectors of sizes 3 and 4 have no dot product");
}

// PyTorch reduces a 0-d tensor over dim 0 or -1 (its one element); these were refused.
TEST(CoreOpsEdges, MaxMinAndArgOverTheDimOfAZeroDimTensor) {
  Tensor x = scalar_tensor(3.0, DType::Float64).requires_grad_();
  for (int64_t dim : {0, -1}) {
    ValuesIndices m = max(x, dim, true);
    EXPECT_EQ(m.values.dim(), 0);
    EXPECT_EQ(m.values.item<double>(), 3.0);
    EXPECT_EQ(m.indices.item<int64_t>(), 0);
    EXPECT_EQ(min(x, dim).values.item<double>(), 3.0);
    EXPECT_EQ(argmax(x, dim).item<int64_t>(), 0);
    EXPECT_EQ(argmin(x, dim, true).dim(), 0);
  }
  max(x, 0).values.backward();
  EXPECT_EQ(x.grad().item<double>(), 1.0);
  EXPECT_NE(error_of([&] { max(x, 1); }).find("max"), std::string::npos);
  EXPECT_NE(error_of([&] { argmin(x, -2); }).find("argmin"), std::string::npos);
}

// add_ with an operand of a wider dtype adds in the promoted dtype and rounds once (PyTorch's
// x.add_(y)); converting y to x's dtype first rounded twice.
TEST(CoreOpsEdges, MixedDtypeAddInPlaceRoundsOnce) {
  NoGradGuard no_grad;
  struct Case {
    DType self, other;
    double x, y, alpha, expected;
  };
  const std::vector<Case> cases = {
      {DType::BFloat16, DType::Float32, 1.0, 0.00390625 + 0.00000095367431640625, 1.0, 1.0078125},  // 2^-8 + 2^-20
      {DType::BFloat16, DType::Float32, 1.0, 1.00390625, 0.3, 1.3046875},
      {DType::Float16, DType::Float32, 1.0, 0.00048828125 + 1e-7, 1.0, 1.0009765625},  // 2^-11 + 1e-7
      {DType::Float32, DType::Float64, 1.0, 0x1p-24 + 0x1p-50, 1.0, 1.0 + 0x1p-23},
      {DType::Float32, DType::BFloat16, 1.0, 0.5, 2.0, 2.0},  // narrower other: exact as before
  };
  for (const Case& c : cases) {
    Tensor x = full({2}, c.x, c.self);
    x.add_(full({2}, c.y, c.other), c.alpha);
    EXPECT_EQ(x.dtype(), c.self);
    EXPECT_EQ(x.to(DType::Float64).to_vector<double>(), (std::vector<double>{c.expected, c.expected}))
        << dtype_name(c.self) << " += " << dtype_name(c.other);
  }
}

// A scalar beside a 16-bit tensor stays float32 (README, "Dtypes"): PyTorch 1.13 rounds 1e10 to
// float16 first (inf), and 65504 / inf is 0 there.
TEST(CoreOpsEdges, AScalarBesideASixteenBitTensorStaysFloat32) {
  const float q = div(full({1}, 65504.0, DType::Float16), 1e10).to(DType::Float32).item<float>();
  EXPECT_GT(q, 6.5e-6f);
  EXPECT_LT(q, 6.6e-6f);
}

// A double out of an integer dtype's range (or NaN) converted to it is undefined behaviour: it
// gave INT_MIN fills and comparisons with the wrong answer everywhere.
TEST(CoreOpsEdges, IntegerFillsAndComparisonsOutOfRange) {
  EXPECT_NE(error_of([] { full({2}, 3e9, DType::Int32); }).find("fill: cannot convert 3e+09 to int32"),
            std::string::npos);
  EXPECT_NE(error_of([] { full({2}, NAN, DType::Int64); }).find("fill: cannot convert nan to int64"),
            std::string::npos);
  Tensor i32 = zeros({2}, DType::Int32);
  EXPECT_NE(error_of([&] { i32.fill_(-3e9); }).find("cannot convert"), std::string::npos);
  // and past a floating dtype's largest finite value, as PyTorch's full (it gave inf)
  EXPECT_NE(error_of([] { full({2}, 70000.0, DType::Float16); })
                .find("full: value 70000 cannot be converted to float16 without overflow"),
            std::string::npos);
  EXPECT_THROW(scalar_tensor(-1e39, DType::BFloat16), Error);
  EXPECT_THROW(full({1}, 3.3961e38, DType::BFloat16), Error);
  EXPECT_THROW(full({1}, 1e39, DType::Float32), Error);
  EXPECT_EQ(full({1}, 65504.0, DType::Float16).to(DType::Float32).item<float>(), 65504.0f);
  EXPECT_TRUE(std::isinf(full({1}, INFINITY, DType::Float16).to(DType::Float32).item<float>()));
  // The ops' own scalars and results are not full()'s arguments: a float16 tensor compared with
  // or added to 1e5, and a float16 loss that overflows, behave as PyTorch's (no error).
  const Tensor h = ones({3}, DType::Float16);
  EXPECT_EQ(lt(h, 1e5).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(gt(ones({2}), 1e39).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_TRUE(std::isinf(add(h, 1e5).to(DType::Float32).to_vector<float>()[0]));
  const Tensor logits = from_vector(std::vector<double>{60000, -60000}, {1, 2}).to(DType::Float16);
  EXPECT_TRUE(std::isinf(cross_entropy(logits, from_vector(std::vector<int64_t>{1}, {1})).to(DType::Float32).item<float>()));
  EXPECT_EQ(full({1}, 2147483647.0, DType::Int32).item<int32_t>(), 2147483647);
  EXPECT_EQ(full({1}, -2.7, DType::Int64).item<int64_t>(), -2);  // truncated, as PyTorch's fill_
  const Tensor y = from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  EXPECT_EQ(lt(y, 9.3e18).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(gt(y, 1e19).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(gt(y, -1e19).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  const Tensor z = from_vector(std::vector<int64_t>{1, 2}, {2}).to(DType::Int32);
  EXPECT_EQ(lt(z, 3e9).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  Tensor sum = add(z, 3e9);  // no int32 holds it: computed in float32, as a fractional scalar
  EXPECT_EQ(sum.dtype(), DType::Float32);
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{3e9f, 3e9f}));
}

// PyTorch refuses to write a floating result into an integer tensor in place; these truncated.
TEST(CoreOpsEdges, InPlaceIntegerOpsWithAFloatingResultAreRefused) {
  Tensor x = from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  const Tensor f = from_vector(std::vector<double>{0.5, 0.5, 0.5}, {3});
  const Tensor i = from_vector(std::vector<int64_t>{2, 2, 2}, {3});
  const std::string cast = "the result type float";
  EXPECT_NE(error_of([&] { x.mul_(2.5); }).find("mul_: " + cast + "32 cannot be cast to self's dtype int64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { x.add_(f); }).find("add_: " + cast + "64 cannot be cast"), std::string::npos);
  EXPECT_NE(error_of([&] { x.add_(i, 0.5); }).find("add_: alpha: expected a whole number within int64's range, got 0.5"),
            std::string::npos);
  EXPECT_NE(error_of([&] { div_(x, i); }).find("div_: " + cast), std::string::npos);
  EXPECT_NE(error_of([&] { sub_(x, f); }).find("sub_: " + cast), std::string::npos);
  EXPECT_NE(error_of([&] { mul_(x, f); }).find("mul_: " + cast), std::string::npos);
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));  // untouched
  x.mul_(3.0);  // whole factors, integer operands: fine
  x.add_(i, 2.0);
  sub_(x, i);
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{5, 8, 11}));
}

TEST(CoreOpsEdges, SmoothL1GradientAtNanIsNan) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor x = from_vector(std::vector<double>{NAN, 0.2, 3}, {3}).to(dt).requires_grad_();
    smooth_l1_loss(x, zeros({3}, dt), Reduction::Sum).backward();
    const std::vector<double> g = x.grad().to(DType::Float64).to_vector<double>();
    EXPECT_TRUE(std::isnan(g[0])) << dtype_name(dt);
    EXPECT_NEAR(g[1], 0.2, 1e-7);  // d / beta, beta 1
    EXPECT_EQ(g[2], 1.0);
  }
}

// Integer tensors with scalars, as PyTorch with a Python scalar: whole ones keep the dtype, others
// give float32 (these were refused); s / x is a true division (s * (1 / x) was off in the last bit).
TEST(CoreOpsEdges, IntegerPowClampAndScalarDivision) {
  const Tensor a = from_vector(std::vector<int64_t>{2, 3, -4}, {3});
  Tensor p = pow(a, 2.0);
  EXPECT_EQ(p.dtype(), DType::Int64);
  EXPECT_EQ(p.to_vector<int64_t>(), (std::vector<int64_t>{4, 9, 16}));
  Tensor r = pow(from_vector(std::vector<int64_t>{4, 9}, {2}), 0.5);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{2, 3}));
  Tensor c = clamp(a, 0.0, 2.0);
  EXPECT_EQ(c.dtype(), DType::Int64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 0}));
  Tensor cf = clamp(a, 0.5);
  EXPECT_EQ(cf.dtype(), DType::Float32);
  EXPECT_EQ(cf.to_vector<float>(), (std::vector<float>{2, 3, 0.5f}));
  Tensor d = div(6.0, a);
  EXPECT_EQ(d.dtype(), DType::Float32);
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{3, 2, -1.5f}));
  Tensor x = from_vector(std::vector<float>{3, 7}, {2}).requires_grad_();
  Tensor q = div(10.0, x);
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{10.0f / 3.0f, 10.0f / 7.0f}));
  sum(q).backward();  // d(s / x)/dx = -s / x^2
  EXPECT_FLOAT_EQ(x.grad().to_vector<float>()[0], -10.0f / 9.0f);
  // bfloat16: the quotient of float32 operands, rounded once
  Tensor h = div(10.0, full({1}, 3.0, DType::BFloat16));
  EXPECT_EQ(h.dtype(), DType::BFloat16);
  EXPECT_TRUE(same_bits(h, full({1}, 10.0f / 3.0f, DType::Float32).to(DType::BFloat16)));
}

// PyTorch refuses to add into such a .grad (it would add into one location several times); the
// engine gives the leaf the sum as a new tensor and leaves the expanded one alone.
TEST(CoreOpsEdges, BackwardIntoAnExpandedGradAddsEachElementOnce) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor base = from_vector(std::vector<double>{10, 20, 30}, {3});
  x.set_grad(base.expand({2, 3}));
  sum(mul(x, x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12, 24, 36, 18, 30, 42}));
  EXPECT_EQ(base.to_vector<double>(), (std::vector<double>{10, 20, 30}));
}

// binary_cross_entropy_with_logits for y = 0 and very negative logits: the loss log(1 + e^x) and
// its gradient sigmoid(x) are tiny and representable; the forms (1-y) x + sp(-x) and
// (1-y) - sigmoid(-x) cancelled to 0 (float32 from x = -17: PyTorch's gradient there is
// 4.139938e-08). Also the target's gradient -x at x = -Inf (was 0 * Inf = NaN).
TEST(CoreOpsEdges, BceWithLogitsKeepsItsDigitsForVeryNegativeLogits) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (double xv : {-15.0, -17.0, -30.0, -40.0, -80.0}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " x = " + std::to_string(xv));
      Tensor x = full({1}, xv, dt).requires_grad_();
      Tensor loss = binary_cross_entropy_with_logits(x, zeros({1}, dt), Tensor(), Reduction::Sum);
      loss.backward();
      const double want = std::log1p(std::exp(xv)), sigmoid = 1 / (1 + std::exp(-xv));
      const double tol = dt == DType::Float32 ? 2e-7 : 1e-15;
      EXPECT_NEAR(loss.to(DType::Float64).item(), want, tol * want);
      EXPECT_NEAR(x.grad().to(DType::Float64).item(), sigmoid, tol * sigmoid);
    }
  }
  // with pos_weight and y = 1 at large x, and the mirrored case: the other form
  Tensor x = from_vector(std::vector<double>{30, -30}, {2}).requires_grad_();
  Tensor pw = from_vector(std::vector<double>{2, 3}, {2});
  binary_cross_entropy_with_logits(x, from_vector(std::vector<double>{1, 0}, {2}), pw, Reduction::Sum).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  EXPECT_NEAR(g[0], -2 / (1 + std::exp(30.0)), 1e-15 * 2 * std::exp(-30.0));  // pw (sigmoid(x) - 1)
  EXPECT_NEAR(g[1], 1 / (1 + std::exp(30.0)), 1e-15 * std::exp(-30.0));       // sigmoid(x)
  // d loss / d target = -x, Inf at x = -Inf (PyTorch: inf)
  Tensor xi = full({1}, -std::numeric_limits<double>::infinity(), DType::Float64);
  Tensor y = full({1}, 0.3, DType::Float64).requires_grad_();
  binary_cross_entropy_with_logits(xi, y, Tensor(), Reduction::Sum).backward();
  EXPECT_EQ(y.grad().item(), std::numeric_limits<double>::infinity());
  // with pos_weight p: -p x + (p - 1) log1p(e^x), +Inf for p > 0 (also p < 1, where -x + (p-1) sp(-x)
  // is Inf - Inf), 0 for p = 0; and finite x keeps -x + (p - 1) sp(-x)
  for (double p : {3.0, 0.5, 0.0}) {
    SCOPED_TRACE(p);
    Tensor yp = full({2}, 0.3, DType::Float64).requires_grad_();
    Tensor xp = from_vector(std::vector<double>{-std::numeric_limits<double>::infinity(), -2.0}, {2});
    binary_cross_entropy_with_logits(xp, yp, full({2}, p, DType::Float64), Reduction::Sum).backward();
    const std::vector<double> gy = yp.grad().to_vector<double>();
    EXPECT_EQ(gy[0], p == 0 ? 0.0 : std::numeric_limits<double>::infinity());
    EXPECT_NEAR(gy[1], 2.0 + (p - 1) * std::log1p(std::exp(2.0)), 1e-14);
  }
}

// gelu(x, "tanh")'s second derivative in its tails: 1 - tanh(u)^2 cancelled (float32 gave -0 at
// x = 5.16 where the value is -3.65e-6), and 0 * Inf gave NaN for huge |x| (the limit is 0).
// Reference values: float64, sech^2 written out.
// gelu(x, "tanh")'s first derivative in its tails: 0 * Inf gave NaN for huge |x| in float32
// (PyTorch's too; the limits are 1 and 0), and 1 - tanh^2 cancelled near |x| = 5 (PyTorch's
// float32 gives 0 at x = -5.2, its float64 -4.09036135e-7). Reference values: mpmath at 40 digits.
TEST(CoreOpsEdges, GeluTanhDerivativeInTheTails) {
  const std::vector<double> xs = {1e30, -1e30, 5.2, -5.2, 1e8, -1e8, 3.0, 0.5};
  const std::vector<double> want = {1, 0, 1.0000004090361348, -4.0903613483842845e-07, 1, 0, 1.0115841666309697,
                                    0.8673699035346423};
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = from_vector(xs, {int64_t(xs.size())}).to(dt).requires_grad_();
    sum(gelu(x, "tanh")).backward();
    const std::vector<double> got = x.grad().to(DType::Float64).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_NEAR(got[i], want[i], (dt == DType::Float32 ? 4e-6 : 1e-14) * std::max(1e-6, std::fabs(want[i])))
          << dtype_name(dt) << " x = " << xs[i];
  }
}

TEST(CoreOpsEdges, GeluTanhSecondDerivativeInTheTails) {
  const std::vector<double> xs = {5.155, 5.16, 7.2, -5.2, 2e8, -2e8};
  const std::vector<double> want = {-3.7668720778350365e-06, -3.6474733344533298e-06, -3.089132615754428e-14,
                                    -2.812967414666004e-06, 0, 0};
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = from_vector(xs, {int64_t(xs.size())}).to(dt).requires_grad_();
    Tensor g = grad({sum(gelu(x, "tanh"))}, {x}, {}, false, true, true)[0];
    const std::vector<double> got = grad({sum(g)}, {x})[0].to(DType::Float64).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_NEAR(got[i], want[i], (dt == DType::Float32 ? 1e-5 : 1e-12) * std::fabs(want[i]))
          << dtype_name(dt) << " x = " << xs[i];
  }
}

// A NaN bound makes every output NaN and the gradient 0, as PyTorch's clamp_min / clamp_max and
// two-bound clamp (the output ignored the bound while the gradient's mask did not).
TEST(CoreOpsEdges, ClampWithANanBoundIsNanEverywhere) {
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    using Clamp = Tensor (*)(const Tensor&);
    for (Clamp f : {+[](const Tensor& x) { return clamp(x, NAN, 1.0); }, +[](const Tensor& x) { return clamp(x, 0.0, NAN); },
                    +[](const Tensor& x) { return clamp_min(x, NAN); }, +[](const Tensor& x) { return clamp_max(x, NAN); }}) {
      Tensor x = from_vector(std::vector<double>{-3, 0.5, 3}, {3}).to(dt).requires_grad_();
      const Tensor y = f(x);
      for (double v : y.to(DType::Float64).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
      sum(y).backward();
      EXPECT_EQ(x.grad().to(DType::Float64).to_vector<double>(), std::vector<double>(3, 0.0));
    }
  }
}

// A whole factor or alpha outside an integer tensor's range is a float32 result, refused in
// place as PyTorch does (it was cast to the integer type: INT_MIN).
TEST(CoreOpsEdges, IntegerInPlaceFactorsBeyondTheRangeAreRefused) {
  Tensor a = from_vector(std::vector<int32_t>{1, 5}, {2});
  Tensor b = from_vector(std::vector<int64_t>{1, 5}, {2});
  EXPECT_NE(error_of([&] { a.mul_(3e9); }).find("mul_: the result type float32 cannot be cast to self's dtype int32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b.mul_(1e19); }).find("mul_: the result type float32 cannot be cast"), std::string::npos);
  EXPECT_NE(error_of([&] { a.add_(a, 3e9); }).find("add_: alpha: expected a whole number within int32's range, got"),
            std::string::npos);
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 5}));
  a.mul_(-2147483648.0);  // the edge of the range is fine (wrapping as integer arithmetic does)
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::min()}));
}

// s - x for an integer x with a floating result is computed in float32, as PyTorch: negating x
// first wrapped -2^63 (and -2^31) back to itself.
TEST(CoreOpsEdges, ScalarMinusTheMostNegativeInteger) {
  const Tensor a = from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 5}, {2});
  const Tensor r = rsub(a, 2.5);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{9.223372036854775808e18f, -2.5f}));
  const Tensor b = from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min()}, {1});
  EXPECT_EQ((3e9 - b).to_vector<float>(), std::vector<float>{5147483648.0f});
  EXPECT_EQ((2.0 - b).dtype(), DType::Int32);  // a whole scalar keeps the dtype
  EXPECT_EQ((7.0 - from_vector(std::vector<int64_t>{3}, {1})).to_vector<int64_t>(), std::vector<int64_t>{4});
}

// pow(a, b)'s gradients are 0 where PyTorch masks them (b == 0 for a; a == 0 <= b for b); their
// own gradient with respect to the incoming gradient was NaN there (0 * log 0), which poisons a
// Hessian-vector product.
TEST(CoreOpsEdges, PowOfTensorsMaskedGradientsHaveFiniteDoubleBackward) {
  const Tensor base = from_vector(std::vector<double>{0, 0, 2}, {3});
  Tensor e = from_vector(std::vector<double>{2, 0.5, 1.5}, {3}).requires_grad_();
  Tensor go = ones({3}, DType::Float64).requires_grad_();
  const std::vector<Tensor> g = grad({pow(base, e)}, {e}, {go}, true, true, true);
  const double at2 = std::pow(2.0, 1.5) * std::log(2.0);
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0, 0, at2}));
  EXPECT_EQ(grad({sum(g[0])}, {go})[0].to_vector<double>(), (std::vector<double>{0, 0, at2}));
  // the base's gradient, masked where the exponent is 0 (0^-1 times 0 inside)
  Tensor a = from_vector(std::vector<double>{0, 3}, {2}).requires_grad_();
  const Tensor b = from_vector(std::vector<double>{0, 2}, {2});
  Tensor go2 = ones({2}, DType::Float64).requires_grad_();
  const std::vector<Tensor> ga = grad({pow(a, b)}, {a}, {go2}, true, true, true);
  EXPECT_EQ(ga[0].to_vector<double>(), (std::vector<double>{0, 6}));
  EXPECT_EQ(grad({sum(ga[0])}, {go2})[0].to_vector<double>(), (std::vector<double>{0, 6}));
  // a NaN incoming gradient still gives 0 where the gradient is masked, as PyTorch
  const Tensor nan_go = full({2}, NAN, DType::Float64);
  Tensor a2 = from_vector(std::vector<double>{0, 3}, {2}).requires_grad_();
  EXPECT_EQ(grad({pow(a2, b)}, {a2}, {nan_go})[0].to_vector<double>()[0], 0.0);
}

// l1 and smooth_l1 under create_graph where input - target is infinite (or overflows): the
// linear part's derivative is sign(d); d * 0 was NaN.
TEST(CoreOpsEdges, L1LossesRecordedGradientAtAnInfiniteDifference) {
  for (bool smooth : {false, true}) {
    Tensor a = from_vector(std::vector<double>{INFINITY, -INFINITY, 2.0, 1e308}, {4}).requires_grad_();
    const Tensor b = from_vector(std::vector<double>{0, 0, 0, -1e308}, {4});
    const Tensor loss = smooth ? smooth_l1_loss(a, b, Reduction::Sum, 1.0) : l1_loss(a, b, Reduction::Sum);
    const std::vector<double> expected{1, -1, 1, 1};
    EXPECT_EQ(grad({loss}, {a}, {}, true, true, false)[0].to_vector<double>(), expected) << smooth;
    EXPECT_EQ(grad({loss}, {a}, {}, false, true, true)[0].to_vector<double>(), expected) << smooth;
  }
}

// A 0-d tensor has dims 0 and -1 only, as PyTorch (any dims were accepted).
TEST(CoreOpsEdges, TransposeOfAZeroDimTensorChecksItsDims) {
  const Tensor s = scalar_tensor(1.0);
  EXPECT_EQ(s.transpose(0, -1).item(), 1.0);
  EXPECT_NE(error_of([&] { (void)s.transpose(3, 5); })
                .find("transpose: dimension out of range (expected to be in [-1, 0], but got 3)"),
            std::string::npos);
}

// Integer powers with negative tensor exponents, as PyTorch: 1 / a^-e truncated toward zero
// (they were refused); a negative whole scalar exponent is refused, as PyTorch does.
TEST(CoreOpsEdges, IntegerPowersWithNegativeExponents) {
  const Tensor a = from_vector(std::vector<int64_t>{2, 1, -1, -1, 0, 3}, {6});
  const Tensor e = from_vector(std::vector<int64_t>{-1, -3, -3, -2, -1, 2}, {6});
  EXPECT_EQ(pow(a, e).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, -1, 1, 0, 9}));
  EXPECT_EQ(pow(a.to(DType::Int32), e.to(DType::Int32)).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, -1, 1, 0, 9}));
  EXPECT_NE(error_of([&] { (void)pow(a, -1.0); }).find("pow: exponent: expected >= 0 for a int64 tensor"),
            std::string::npos);
  EXPECT_EQ(pow(a, -0.5).dtype(), DType::Float32);
}

}  // namespace
