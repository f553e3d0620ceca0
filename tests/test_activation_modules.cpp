// silu and leaky_relu against PyTorch (tools/fixtures/activation.py), gelu's float backward
// against float64, the activation modules and Flatten, and the normal initialisers
// (kaiming_normal_, xavier_normal_, trunc_normal_): their statistics within sampling error and
// their determinism from a generator (not PyTorch's bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

TEST(Activations, SiluAndLeakyReluMatchPyTorch) {
  auto cases = load_golden_cases("activation");
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // The fixture's tolerance: float64 1e-14, float32 4e-6 relative (exp within ~1 ulp on both sides).
    const double rtol = c.json["tolerance"]["rtol"], atol = c.json["tolerance"]["atol"];
    Tensor x = c.tensor("x").requires_grad_();
    Tensor y;
    if (c.json["op"] == "silu") {
      y = SiLU().forward(x);
    } else {
      y = LeakyReLU(c.json["negative_slope"].get<double>()).forward(x);
    }
    expect_close(y, c.tensor("y"), rtol, atol, "output");
    y.backward(c.tensor("gy"));
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input");
  }
}

// gelu's float backward computes Phi from phi and a polynomial Mills' ratio (one exponential,
// ops/activation_kernels.cpp), not from 1 + erf like the forward and PyTorch: its error in ulps
// of the float64 result on a fine sweep (measured 2.8 for x >= 0 and 11 for -5.6 < x < -1 over
// every float; the 1 + erf form was off by up to 5e5 there). Near its zero (x = -0.75) an ulp
// of gelu' is tiny, so -1 <= x < 0 is left to the golden fixtures' tolerance.
TEST(Activations, GeluBackwardInFloatWithinAFewUlpsOfFloat64) {
  const int64_t n = 1 << 20;
  std::vector<double> xd(n);
  for (int64_t i = 0; i < n; ++i) xd[i] = static_cast<double>(static_cast<float>(-5.6 + 11.6 * i / (n - 1)));
  Tensor x64 = from_vector(xd, {n}).requires_grad_();
  Tensor x32 = x64.detach().to(DType::Float32).requires_grad_();
  sum(gelu(x64)).backward();
  sum(gelu(x32)).backward();
  const std::vector<double> want = x64.grad().to_vector<double>();
  const std::vector<float> got = x32.grad().to_vector<float>();
  double worst_pos = 0, worst_neg = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (xd[i] >= -1 && xd[i] < 0) continue;
    const float w = static_cast<float>(want[i]);
    const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
    const double e = std::fabs(got[i] - want[i]) / ulp;
    (xd[i] >= 0 ? worst_pos : worst_neg) = std::max(xd[i] >= 0 ? worst_pos : worst_neg, e);
  }
  EXPECT_LE(worst_pos, 3.0);
  EXPECT_LE(worst_neg, 12.0);
}

TEST(Activations, ModulesForwardToTheirOps) {
  manual_seed(1);
  Tensor x = randn({3, 5});
  EXPECT_TRUE(same_bits(GELU().forward(x), gelu(x)));
  EXPECT_TRUE(same_bits(GELU("tanh").forward(x), gelu(x, "tanh")));
  EXPECT_TRUE(same_bits(Sigmoid().forward(x), sigmoid(x)));
  EXPECT_TRUE(same_bits(Tanh().forward(x), tanh(x)));
  expect_close(SiLU().forward(x), mul(x, sigmoid(x)), 1e-6, 1e-7, "SiLU");
  Tensor lr = LeakyReLU().forward(x);
  const auto xv = x.to_vector<float>(), yv = lr.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(yv[i], xv[i] > 0 ? xv[i] : 0.01f * xv[i]);
  EXPECT_EQ(LeakyReLU().negative_slope, 0.01);
  const std::string msg = error_of([] { GELU("fast"); });
  EXPECT_NE(msg.find("approximate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fast"), std::string::npos) << msg;
}

TEST(Activations, FlattenKeepsTheBatchDimByDefault) {
  Tensor x = zeros({2, 3, 4, 5});
  EXPECT_EQ(Flatten().forward(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(Flatten(0).forward(x).shape(), (Shape{120}));
  EXPECT_EQ(Flatten(1, 2).forward(x).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(Flatten(-3, -2).forward(x).shape(), (Shape{2, 12, 5}));
  const std::string msg = error_of([&] { Flatten(3, 1).forward(x); });
  EXPECT_NE(msg.find("flatten"), std::string::npos) << msg;
  // In a Sequential, with gradients flowing through the view.
  Sequential net({std::make_shared<Flatten>(), std::make_shared<Linear>(60, 2)});
  Tensor xi = randn({2, 3, 4, 5}).requires_grad_();
  sum(net.forward(xi)).backward();
  EXPECT_EQ(xi.grad().shape(), xi.shape());
}

// Mean and standard deviation of all elements, in double.
std::pair<double, double> moments(const Tensor& t) {
  const auto v = t.to(DType::Float64).to_vector<double>();
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double m = s / v.size();
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / (v.size() - 1))};
}

// With n = 250,000 samples the sample mean's standard error is std / 500 and the sample std's is
// about std / 707: the checks allow 5 standard errors (a false failure is a ~1e-6 event) and
// catch a wrong fan (a factor of 2 or more in the variance) by a wide margin.
TEST(Init, KaimingAndXavierNormalHavePyTorchsStd) {
  Generator gen(7);
  Tensor w = Tensor::empty({500, 50, 5, 2});  // fan_in 500, fan_out 5000
  init::kaiming_normal_(w, 0.0, "fan_in", "relu", &gen);
  auto [m, s] = moments(w);
  double want = std::sqrt(2.0 / 500);
  EXPECT_NEAR(m, 0.0, 5 * want / 500);
  EXPECT_NEAR(s, want, 5 * want / 707);
  init::kaiming_normal_(w, 0.2, "fan_out", "leaky_relu", &gen);
  std::tie(m, s) = moments(w);
  want = std::sqrt(2.0 / (1 + 0.04)) / std::sqrt(5000.0);
  EXPECT_NEAR(s, want, 5 * want / 707);
  init::xavier_normal_(w, 1.5, &gen);
  std::tie(m, s) = moments(w);
  want = 1.5 * std::sqrt(2.0 / 5500);
  EXPECT_NEAR(m, 0.0, 5 * want / 500);
  EXPECT_NEAR(s, want, 5 * want / 707);
  std::string msg = error_of([&] { init::kaiming_normal_(w, 0.0, "fan_middle"); });
  EXPECT_NE(msg.find("kaiming_normal_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fan_middle"), std::string::npos) << msg;
  Tensor v = zeros({5});
  msg = error_of([&] { init::xavier_normal_(v); });
  EXPECT_NE(msg.find("fewer than 2 dims"), std::string::npos) << msg;
}

TEST(Init, TruncNormalStaysInBoundsWithTheTruncatedMoments) {
  const double mu = 0.5, sigma = 2.0, a = -1.0, b = 3.0;
  Generator gen(8);
  Tensor t = Tensor::empty({500, 500});
  init::trunc_normal_(t, mu, sigma, a, b, &gen);
  const auto v = t.to(DType::Float64).to_vector<double>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), a);
  EXPECT_LE(*std::max_element(v.begin(), v.end()), b);
  // The truncated normal's mean and variance, alpha and beta the standardised bounds.
  auto pdf = [](double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); };
  auto cdf = [](double z) { return 0.5 * (1 + std::erf(z / std::sqrt(2.0))); };
  const double al = (a - mu) / sigma, be = (b - mu) / sigma, Z = cdf(be) - cdf(al);
  const double mean = mu + sigma * (pdf(al) - pdf(be)) / Z;
  const double var =
      sigma * sigma * (1 + (al * pdf(al) - be * pdf(be)) / Z - std::pow((pdf(al) - pdf(be)) / Z, 2));
  auto [m, s] = moments(t);
  EXPECT_NEAR(m, mean, 5 * std::sqrt(var) / 500);
  EXPECT_NEAR(s, std::sqrt(var), 5 * std::sqrt(var) / 707);
  // The default: N(0, 1) cut at +-2, std 0.8796.
  init::trunc_normal_(t, 0.0, 1.0, -2.0, 2.0, &gen);
  std::tie(m, s) = moments(t);
  EXPECT_NEAR(s, 0.879626, 5 * 0.88 / 707);
  const std::string msg = error_of([&] { init::trunc_normal_(t, 0.0, 1.0, 2.0, -2.0); });
  EXPECT_NE(msg.find("a < b"), std::string::npos) << msg;
}

// Found by differential testing against PyTorch and scipy: a window far in a tail collapsed
// onto its near bound (the CDFs round to 0 or 1 there: [8, 9] gave 8.0 a million times), and a
// value rounded to a 16-bit dtype could land outside [a, b] (0.0400390625 for b = 0.04).
TEST(Init, TruncNormalSamplesFarTailsAndStaysInBoundsAfterRounding) {
  Generator gen(3);
  struct Case { double a, b, mean, std; };  // scipy.stats.truncnorm(a, b).mean(), .std()
  // Far tails, then narrow windows (at most 0.25 std wide, drawn by rejection from the uniform)
  // in and out of the middle.
  for (const Case& c : {Case{8, 9, 8.121188992979869, 0.11894764723253226},
                        Case{30, 31, 30.033259667436372, 0.03322305568659225},
                        Case{-9, -8, -8.121188992979869, 0.11894764723253226},
                        Case{3, 1e300, 3.28309865493044, 0.2656297927290082},
                        Case{0.5, 0.7, 0.5980031434066237, 0.05767583114599492},
                        Case{-0.1, 0.1, 0.0, 0.05769654241546674},
                        Case{-0.8, -0.6, -0.6976705352647796, 0.05766835605102903},
                        Case{2.8, 3.0, 2.8903997797907395, 0.05721689371428038}}) {
    Tensor t = Tensor::empty({200000}, DType::Float64);
    init::trunc_normal_(t, 0.0, 1.0, c.a, c.b, &gen);
    const auto v = t.to_vector<double>();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), c.a) << c.a;
    EXPECT_LE(*std::max_element(v.begin(), v.end()), c.b) << c.a;
    auto [m, s] = moments(t);
    EXPECT_NEAR(m, c.mean, 5 * c.std / std::sqrt(200000.0)) << c.a;
    EXPECT_NEAR(s, c.std, 0.01 * c.std) << c.a;
  }
  // A window 1e-9 std wide: the inverse CDF's draws came in clumps (90,657 distinct values of
  // 200,000; about 191,000 are expected by chance among the window's 2.25e6 doubles).
  {
    Tensor t = Tensor::empty({200000}, DType::Float64);
    init::trunc_normal_(t, 0.0, 1.0, 2.9, 2.9 + 1e-9, &gen);
    auto v = t.to_vector<double>();
    std::sort(v.begin(), v.end());
    EXPECT_GT(std::unique(v.begin(), v.end()) - v.begin(), 185000);
  }
  // A mean huge against the window: mean + std * x cancelled (1e17 with [-2, 2] gave 0 or -2).
  // One std out the values crowd at the near bound; with a std as huge, the density is flat on
  // the window: the uniform's moments.
  {
    Tensor t = Tensor::empty({100000}, DType::Float64);
    init::trunc_normal_(t, 1e17, 1.0, -2.0, 2.0, &gen);
    auto v = t.to_vector<double>();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 2.0 - 1e-12);
    init::trunc_normal_(t, -1e17, 1.0, -2.0, 2.0, &gen);
    v = t.to_vector<double>();
    EXPECT_LE(*std::max_element(v.begin(), v.end()), -2.0 + 1e-12);
    init::trunc_normal_(t, 1e17, 1e17, -2.0, 2.0, &gen);
    auto [m, s] = moments(t);
    EXPECT_NEAR(m, 0.0, 5 * 1.1547 / std::sqrt(100000.0));
    EXPECT_NEAR(s, 4 / std::sqrt(12.0), 0.01);
  }
  // A non-finite mean or std is refused (the tail sampler looped forever on NaN); a std so small
  // that the standardised bounds overflow gives the near bound, the limit.
  Tensor few = Tensor::empty({8}, DType::Float64);
  for (double mean : {double(NAN), double(INFINITY), -double(INFINITY)})
    EXPECT_NE(error_of([&] { init::trunc_normal_(few, mean, 1.0, -2.0, 2.0); }).find("expected a finite mean"),
              std::string::npos);
  EXPECT_NE(error_of([&] { init::trunc_normal_(few, 0.0, INFINITY, -2.0, 2.0); }).find("finite std"), std::string::npos);
  init::trunc_normal_(few, 0.0, 1e-310, 5.0, 6.0, &gen);
  EXPECT_EQ(few.to_vector<double>(), std::vector<double>(8, 5.0));
  init::trunc_normal_(few, 0.0, 1e-308, -3.0, -2.0, &gen);
  EXPECT_EQ(few.to_vector<double>(), std::vector<double>(8, -2.0));
  for (DType dt : {DType::BFloat16, DType::Float16, DType::Float32}) {
    Tensor t = Tensor::empty({300000}, dt);
    init::trunc_normal_(t, 0.0, 0.02, -0.04, 0.04, &gen);
    const auto v = t.to(DType::Float64).to_vector<double>();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -0.04) << dtype_name(dt);
    EXPECT_LE(*std::max_element(v.begin(), v.end()), 0.04) << dtype_name(dt);
  }
}

// rand and uniform are [low, high) in the tensor's dtype too: a draw above 1 - 2^-9 rounded to
// a bfloat16 1 (2,000 in a million). Bounds the dtype cannot hold, or whose difference
// overflows, are refused as PyTorch refuses them (they filled NaN or inf).
TEST(Random, UniformDrawsStayBelowTheUpperBoundInEveryDtype) {
  Generator gen(1);
  for (DType dt : {DType::BFloat16, DType::Float16, DType::Float32}) {
    const auto r = rand({1000000}, dt, &gen).to(DType::Float64).to_vector<double>();
    EXPECT_LT(*std::max_element(r.begin(), r.end()), 1.0) << dtype_name(dt);
    const auto u = uniform({1000000}, -1.0, 0.1, dt, &gen).to(DType::Float64).to_vector<double>();
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 0.1) << dtype_name(dt);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), -1.0) << dtype_name(dt);
  }
  EXPECT_EQ(uniform({3}, 2.0, 2.0).to_vector<float>(), std::vector<float>(3, 2.0f));  // low == high: low
  EXPECT_NE(error_of([] { uniform({3}, -INFINITY, INFINITY); }).find("must be finite values of float32"),
            std::string::npos);
  EXPECT_NE(error_of([] { uniform({3}, -1e308, 1e308, DType::Float64); }).find("high - low to be finite"),
            std::string::npos);
  EXPECT_NE(error_of([] { uniform({3}, -1e5, 1e5, DType::Float16); }).find("float16"), std::string::npos);
  Tensor t = Tensor::empty({4});
  EXPECT_THROW(init::uniform_(t, -1e300, 1e300), Error);  // past float32
  // randint over the whole int64 range (its width overflowed int64: undefined behaviour).
  const auto w = randint(INT64_MIN, INT64_MAX, {1000}, &gen).to_vector<int64_t>();
  EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](int64_t x) { return x < 0; }));
  EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](int64_t x) { return x > 0; }));
}

// PyTorch's calculate_gain names, mode in any case, a zero-element tensor left alone by the
// kaiming initialisers, constant_ on an integer tensor.
TEST(Init, GainsModesAndEdgeTensorsFollowPyTorch) {
  EXPECT_EQ(init::calculate_gain("selu"), 0.75);
  for (const char* conv : {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
    EXPECT_EQ(init::calculate_gain(conv), 1.0) << conv;
  Generator a(5), b(5);
  Tensor x = Tensor::empty({4, 3}), y = Tensor::empty({4, 3});
  init::kaiming_uniform_(x, 0.0, "FAN_OUT", "relu", &a);
  init::kaiming_uniform_(y, 0.0, "fan_out", "relu", &b);
  EXPECT_TRUE(same_bits(x, y));
  Tensor empty = Tensor::empty({5, 0});
  EXPECT_NO_THROW(init::kaiming_uniform_(empty));
  EXPECT_NO_THROW(init::kaiming_normal_(empty, 0.0, "fan_out"));
  Tensor ints = zeros({3}, DType::Int64);
  init::constant_(ints, 7);
  EXPECT_EQ(ints.to_vector<int64_t>(), std::vector<int64_t>(3, 7));
  EXPECT_THROW(init::constant_(ints, 0.5e20), Error);
}

// Dropout's scale is 1 / (1 - p) in float for float32, as PyTorch's noise.div_(1 - p): in double
// it rounds an ulp away for 226 of the p = k / 1000.
TEST(CoreOpsDropoutScale, ScaleIsComputedInTheDtypesArithmetic) {
  Generator gen(2);
  Tensor y = dropout(ones({64}), 0.15, true, &gen);
  const auto v = y.to_vector<float>();
  const float scale = 1.0f / static_cast<float>(1.0 - 0.15);
  for (float e : v) EXPECT_TRUE(e == 0.0f || e == scale) << e;
  EXPECT_NE(scale, static_cast<float>(1.0 / (1.0 - 0.15)));
}

TEST(Init, NormalInitialisersAreDeterministicFromTheGenerator) {
  for (int which = 0; which < 3; ++which) {
    auto draw = [which](uint64_t seed) {
      Generator gen(seed);
      Tensor t = Tensor::empty({16, 8, 3, 3});
      if (which == 0) init::kaiming_normal_(t, 0.0, "fan_in", "relu", &gen);
      if (which == 1) init::xavier_normal_(t, 1.0, &gen);
      if (which == 2) init::trunc_normal_(t, 0.0, 0.02, -0.04, 0.04, &gen);
      return t;
    };
    EXPECT_TRUE(same_bits(draw(3), draw(3))) << which;
    EXPECT_FALSE(same_bits(draw(3), draw(4))) << which;
  }
}

}  // namespace
}  // namespace tg
