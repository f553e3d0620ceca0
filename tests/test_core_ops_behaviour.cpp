// Behaviour of the core ops that parity fixtures do not show: dropout's statistics and seeding,
// bit-for-bit determinism of the parallel kernels across thread counts, split/chunk views,
// argmax ties, NaN handling, the masks' dtype.
#include <gtest/gtest.h>

#include <cmath>

#include <tapegrad/tapegrad.h>

namespace {

using tg::DType;
using tg::Tensor;

TEST(CoreOpsDropout, DropsAboutPAndScalesTheRest) {
  tg::Generator gen(42);
  Tensor x = tg::ones({100000}, DType::Float64);
  Tensor y = tg::dropout(x, 0.3, true, &gen);
  int64_t zeros = 0;
  for (double v : y.to_vector<double>()) {
    if (v == 0) ++zeros;
    else EXPECT_DOUBLE_EQ(v, 1.0 / 0.7);
  }
  // Binomial(1e5, 0.3): standard deviation of the fraction is 0.0014; 0.01 is seven of them.
  EXPECT_NEAR(static_cast<double>(zeros) / 100000, 0.3, 0.01);
}

TEST(CoreOpsDropout, SameSeedSameMaskAndGradientIsTheMask) {
  Tensor x = tg::randn({50});
  x.requires_grad_();
  tg::Generator g1(5), g2(5);
  Tensor a = tg::dropout(x, 0.5, true, &g1);
  Tensor b = tg::dropout(x, 0.5, true, &g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  tg::sum(a).backward();
  std::vector<float> grad = x.grad().to_vector<float>(), av = a.to_vector<float>();
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_FLOAT_EQ(grad[i], av[i] == 0 ? 0.0f : 2.0f) << i;
}

TEST(CoreOpsDropout, EvalIsTheIdentityAndPOneZeroes) {
  Tensor x = tg::randn({10});
  Tensor y = tg::dropout(x, 0.5, false);
  EXPECT_EQ(y.impl(), x.impl());
  for (float v : tg::dropout(x, 1.0, true).to_vector<float>()) EXPECT_EQ(v, 0.0f);
  // As PyTorch: an integer tensor passes through where nothing is dropped, and is refused in training.
  Tensor i = tg::from_vector(std::vector<int64_t>{1, 2}, {2});
  EXPECT_EQ(tg::dropout(i, 0.5, false).impl(), i.impl());
  EXPECT_EQ(tg::dropout(i, 0.0, true).impl(), i.impl());
  EXPECT_THROW(tg::dropout(i, 0.5, true), tg::Error);
}

// Runs fn with 1 and with 2 threads and expects identical bits.
template <class Fn>
void expect_same_bits_across_threads(Fn fn, const char* what) {
  const int saved = tg::num_threads();
  tg::set_num_threads(1);
  std::vector<double> one = fn();
  tg::set_num_threads(2);
  std::vector<double> two = fn();
  tg::set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size()) << what;
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << what << " element " << i;
}

std::vector<double> grad_of(const Tensor& x) { return x.grad().to(DType::Float64).to_vector<double>(); }

TEST(CoreOpsDeterminism, ScatterAddBackwardsAndReductionsIgnoreThreadCount) {
  // Sizes above kParallelGrain so that the parallel paths run.
  expect_same_bits_across_threads([] {
    tg::manual_seed(1);
    Tensor w = tg::randn({100, 64});
    w.requires_grad_();
    Tensor out = tg::embedding(w, tg::randint(0, 100, {4000}));
    out.backward(tg::randn(out.shape()));
    return grad_of(w);
  }, "embedding");
  expect_same_bits_across_threads([] {
    tg::manual_seed(2);
    Tensor x = tg::randn({64, 50, 16});
    x.requires_grad_();
    Tensor out = tg::index_select(x, 1, tg::randint(0, 50, {200}));
    out.backward(tg::randn(out.shape()));
    return grad_of(x);
  }, "index_select");
  expect_same_bits_across_threads([] {
    tg::manual_seed(3);
    Tensor x = tg::randn({300, 40});
    x.requires_grad_();
    Tensor out = tg::gather(x, 1, tg::randint(0, 40, {300, 200}));
    out.backward(tg::randn(out.shape()));
    return grad_of(x);
  }, "gather");
  expect_same_bits_across_threads([] {
    tg::manual_seed(4);
    Tensor x = tg::randn({512, 128}), w = tg::randn({128}), b = tg::randn({128});
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
    Tensor out = tg::layer_norm(x, {128}, w, b);
    out.backward(tg::randn(out.shape()));
    std::vector<double> all = grad_of(x), gw = grad_of(w), gb = grad_of(b);
    all.insert(all.end(), gw.begin(), gw.end());
    all.insert(all.end(), gb.begin(), gb.end());
    return all;
  }, "layer_norm");
  expect_same_bits_across_threads([] {
    tg::manual_seed(5);
    Tensor x = tg::randn({1000, 40, 2});
    x.requires_grad_();
    Tensor loss = tg::cross_entropy(x, tg::randint(0, 40, {1000, 2}), {tg::Reduction::Mean, 3, 0.1});
    loss.backward();
    std::vector<double> all = grad_of(x);
    all.push_back(loss.item());
    return all;
  }, "cross_entropy");
}

// Broadcasting over a trailing dim of 3 makes thousands of 3-element rows, which for_each_row
// walks like an odometer from each thread's first row; 7 x 5 x 401 rows split in two puts the
// cut inside the middle dims. Checked against the definition at 1 and 2 threads, also for a
// permuted (non-contiguous) operand.
TEST(CoreOpsBroadcast, ShortRowsMatchTheDefinitionAtAnyThreadCount) {
  tg::manual_seed(9);
  Tensor a = tg::randn({7, 5, 401, 3}), b = tg::randn({5, 1, 3});
  Tensor at = tg::randn({7, 401, 5, 3}).permute({0, 2, 1, 3});  // same shape as a, strided
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  const std::vector<float> vt = at.contiguous().to_vector<float>();
  const int saved = tg::num_threads();
  for (int threads : {1, 2}) {
    tg::set_num_threads(threads);
    const std::vector<float> sum = tg::add(a, b).to_vector<float>();
    const std::vector<float> prod = tg::mul(at, b).to_vector<float>();
    ASSERT_EQ(sum.size(), va.size());
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t k = 0; k < 401; ++k)
          for (int64_t c = 0; c < 3; ++c) {
            const int64_t e = ((i * 5 + j) * 401 + k) * 3 + c;
            ASSERT_EQ(sum[e], va[e] + vb[j * 3 + c]) << threads << " threads, element " << e;
            ASSERT_EQ(prod[e], vt[e] * vb[j * 3 + c]) << threads << " threads, element " << e;
          }
  }
  tg::set_num_threads(saved);
}

// A contiguous tensor is one row of for_each_row, cut into a piece per thread: an odd length
// puts the cut where the vectorised loop of one piece has a scalar tail.
TEST(CoreOpsDeterminism, ElementwiseSoftmaxAndGeluIgnoreThreadCount) {
  expect_same_bits_across_threads([] {
    tg::manual_seed(6);
    Tensor x = tg::randn({100003});
    x.requires_grad_();
    Tensor y = tg::gelu(x);
    y.backward(tg::randn(y.shape()));
    std::vector<double> all = y.to(DType::Float64).to_vector<double>(), g = grad_of(x);
    all.insert(all.end(), g.begin(), g.end());
    return all;
  }, "gelu");
  expect_same_bits_across_threads([] {
    tg::manual_seed(7);
    Tensor x = tg::randn({100003});
    Tensor y = tg::add(tg::mul(x, 3.0), x);
    y.copy_(x);
    return y.to(DType::Float64).to_vector<double>();
  }, "mul, add, copy_");
  expect_same_bits_across_threads([] {
    tg::manual_seed(8);
    Tensor x = tg::randn({37, 1001});
    x.requires_grad_();
    Tensor y = tg::softmax(x, 1);
    y.backward(tg::randn(y.shape()));
    std::vector<double> all = y.to(DType::Float64).to_vector<double>(), g = grad_of(x);
    all.insert(all.end(), g.begin(), g.end());
    return all;
  }, "softmax");
}

TEST(CoreOpsSoftmax, LargeLogitsStayFiniteAndRowsSumToOne) {
  Tensor x = tg::mul(tg::randn({64, 1000}), 1000.0);
  Tensor y = tg::softmax(x, 1);
  Tensor s = tg::sum(y, {1});
  for (float v : s.to_vector<float>()) EXPECT_NEAR(v, 1.0f, 1e-5f);  // 1000 float32 terms: ~1e-5 rounding
  for (float v : tg::log_softmax(x, 1).to_vector<float>()) EXPECT_TRUE(std::isfinite(v) && v <= 0.0f);
}

// x / s and div(x, s) are one op, div_scalar, and a true division as PyTorch's CPU kernel: each
// element is v / s rounded once, which is not v * (1 / s) when 1 / s is inexact.
template <class T>
void expect_true_scalar_division(DType dt) {
  Tensor x = tg::uniform({1000}, -10.0, 10.0, dt);
  x.requires_grad_();
  Tensor by_operator = x / 3.0, by_name = tg::div(x, 3.0);
  EXPECT_NE(by_operator.to_string().find("grad_fn=div_scalar"), std::string::npos);
  EXPECT_NE(by_name.to_string().find("grad_fn=div_scalar"), std::string::npos);
  const std::vector<T> v = x.to_vector<T>(), a = by_operator.to_vector<T>(), b = by_name.to_vector<T>();
  int differs_from_reciprocal = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(a[i], v[i] / T(3)) << i;
    EXPECT_EQ(b[i], v[i] / T(3)) << i;
    differs_from_reciprocal += a[i] != v[i] * (T(1) / T(3));
  }
  EXPECT_GT(differs_from_reciprocal, 0);  // the check above would not tell the two apart otherwise
  tg::sum(by_operator).backward();
  for (T g : x.grad().to_vector<T>()) EXPECT_EQ(g, T(1) / T(3));
}

TEST(CoreOpsScalarDivision, OperatorAndDivAreOneTrueDivision) {
  expect_true_scalar_division<float>(DType::Float32);
  expect_true_scalar_division<double>(DType::Float64);
}

TEST(CoreOpsShape, SplitAndChunkAreViewsWithPyTorchSizes) {
  Tensor x = tg::arange(0, 10, 1, DType::Float32).reshape({5, 2});
  std::vector<Tensor> parts = tg::chunk(x, 3, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (tg::Shape{2, 2}));
  EXPECT_EQ(parts[2].shape(), (tg::Shape{1, 2}));
  EXPECT_EQ(parts[2].to_vector<float>(), (std::vector<float>{8, 9}));
  parts[1].fill_(-1);  // a view: writes through to x
  EXPECT_EQ(x.at<float>({2, 1}), -1.0f);
  std::vector<Tensor> s = tg::split(x, {1, 4}, 0);
  EXPECT_EQ(s[1].shape(), (tg::Shape{4, 2}));
  EXPECT_EQ(tg::split(x, 2, 1).size(), 1u);
  EXPECT_EQ(tg::stack({x, x}, 2).shape(), (tg::Shape{5, 2, 2}));
}

TEST(CoreOpsReduce, ArgmaxTakesTheFirstOfTiesAndNanIsTheMaximum) {
  Tensor x = tg::from_vector(std::vector<float>{1, 3, 3, 0, 2, 2}, {2, 3});
  EXPECT_EQ(tg::argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(tg::argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(tg::argmax(x).item<int64_t>(), 1);
  Tensor n = tg::from_vector(std::vector<double>{1, NAN, 5}, {3});
  EXPECT_TRUE(std::isnan(tg::max(n).item<double>()));
  EXPECT_EQ(tg::max(n, 0).indices.item<int64_t>(), 1);
}

TEST(CoreOpsReduce, MaxOverAllSharesTheGradientAmongTies) {
  Tensor x = tg::from_vector(std::vector<double>{2, 5, 5, 1}, {4});
  x.requires_grad_();
  tg::max(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

// The losing input of maximum / minimum gets exactly 0, whatever the incoming gradient: a NaN
// or inf one made it NaN (g * 0). PyTorch masks the loser; a tie halves g, a NaN g stays NaN.
TEST(CoreOpsBinary, MaximumAndMinimumGiveTheLoserZeroEvenForNonFiniteGradients) {
  for (bool is_max : {true, false}) {
    Tensor a = tg::from_vector(std::vector<double>{INFINITY, 1, 2}, {3}).requires_grad_();
    Tensor b = tg::from_vector(std::vector<double>{1, INFINITY, 2}, {3}).requires_grad_();
    Tensor out = is_max ? maximum(a, b) : minimum(a, b);
    out.backward(tg::from_vector(std::vector<double>{NAN, INFINITY, NAN}, {3}));
    const std::vector<double> ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
    SCOPED_TRACE(is_max ? "maximum" : "minimum");
    EXPECT_EQ(is_max ? ga[0] != ga[0] : ga[0] == 0, true);  // a wins element 0 of maximum only
    EXPECT_EQ(is_max ? gb[0] == 0 : gb[0] != gb[0], true);
    EXPECT_EQ(is_max ? ga[1] == 0 : ga[1] == INFINITY, true);
    EXPECT_EQ(is_max ? gb[1] == INFINITY : gb[1] == 0, true);
    EXPECT_TRUE(std::isnan(ga[2]) && std::isnan(gb[2]));  // a tie: g / 2 for both
  }
}

TEST(CoreOpsLoss, CrossEntropyWithEveryTargetIgnoredIsNanAsPyTorch) {
  Tensor logits = tg::randn({2, 3});
  Tensor loss = tg::cross_entropy(logits, tg::from_vector(std::vector<int64_t>{-100, -100}, {2}));
  EXPECT_TRUE(std::isnan(loss.item()));
  Tensor sum = tg::cross_entropy(logits, tg::from_vector(std::vector<int64_t>{-100, -100}, {2}),
                                 {tg::Reduction::Sum, -100, 0.0});
  EXPECT_EQ(sum.item(), 0.0);
}

// Class probabilities as the target (soft labels): PyTorch 1.13's values and gradients (float64).
TEST(CoreOpsLoss, CrossEntropyWithClassProbabilitiesMatchesPyTorch) {
  const std::vector<double> xv = {1, 2, 3, 0.5, -1, 2}, tv = {0.2, 0.3, 0.5, 1, 0, 0};
  struct Want {
    tg::Reduction reduction;
    double smoothing;
    std::vector<double> loss, gx, gt;
  };
  const std::vector<Want> cases = {
      {tg::Reduction::Mean, 0.0, {1.424458630550769},
       {-0.05498471341480979, -0.027635764472601174, 0.08262047788741089, -0.41235480392998164, 0.019556286635343725,
        0.39279851729463794},
       {1.2038029822221903, 0.7038029822221902, 0.2038029822221902, 0.8706556483285786, 1.6206556483285786,
        0.12065564832857852}},
      {tg::Reduction::Sum, 0.1, {2.8789172611015377},
       {-0.12330276016295291, -0.0586048622785357, 0.18190762244148845, -0.7580429411932966, 0.0057792399373541165,
        0.7522637012559426},
       {2.1668453679999424, 1.2668453679999423, 0.3668453679999424, 1.5671801669914414, 2.9171801669914417,
        0.21718016699144133}},
      {tg::Reduction::None, 0.1, {1.1376059644443806, 1.7413112966571571},
       {-0.12330276016295291, -0.0586048622785357, 0.18190762244148845, -0.7580429411932966, 0.0057792399373541165,
        0.7522637012559426},
       {2.1668453679999424, 1.2668453679999423, 0.3668453679999424, 1.5671801669914414, 2.9171801669914417,
        0.21718016699144133}},
  };
  for (const Want& w : cases) {
    Tensor x = tg::from_vector(xv, {2, 3}).requires_grad_(), t = tg::from_vector(tv, {2, 3}).requires_grad_();
    Tensor loss = tg::cross_entropy(x, t, {w.reduction, -100, w.smoothing});
    tg::sum(loss).backward();
    auto expect_close = [](const std::vector<double>& got, const std::vector<double>& want) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14 * (1 + std::fabs(want[i])));
    };
    expect_close(loss.to_vector<double>(), w.loss);
    expect_close(x.grad().to_vector<double>(), w.gx);
    expect_close(t.grad().to_vector<double>(), w.gt);
  }
  // unbatched (C): the one lane
  EXPECT_NEAR(tg::cross_entropy(tg::from_vector(std::vector<double>{1, 2, 3}, {3}),
                                tg::from_vector(std::vector<double>{0.2, 0.3, 0.5}, {3}))
                  .item(),
              1.1076059644443805, 1e-14);
}

TEST(CoreOpsMasks, ComparisonsReturnInt64ZeroOne) {
  Tensor a = tg::from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor m = tg::gt(a, 1.5);
  EXPECT_EQ(m.dtype(), DType::Int64);
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(tg::eq(a, a).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(tg::masked_fill(a, tg::le(a, 2.0), 0.0).to_vector<float>(), (std::vector<float>{0, 0, 3}));
  // A floating condition works too: nonzero is true.
  EXPECT_EQ(tg::where(tg::from_vector(std::vector<float>{0, 0.5, 0}, {3}), a, tg::neg(a)).to_vector<float>(),
            (std::vector<float>{-1, 2, -3}));
}

TEST(CoreOpsMemory, BackwardsSaveOnlyWhatTheyNeed) {
  // softmax saves its output, layer_norm x + mean + rstd (+ weight), not the normalised tensor.
  Tensor x = tg::randn({4, 6});
  x.requires_grad_();
  Tensor y = tg::softmax(x, 1);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->saved().size(), 1u);
  Tensor w = tg::ones({6});
  w.requires_grad_();
  Tensor z = tg::layer_norm(x, {6}, w);
  const auto& saved = z.grad_fn()->saved();
  int defined = 0;
  for (const auto& s : saved) defined += s.tensor.defined();
  EXPECT_EQ(defined, 4);  // x, weight, mean, rstd
  EXPECT_EQ(saved[2].tensor.shape(), (tg::Shape{4}));  // per-row statistics, not per element
}

}  // namespace
