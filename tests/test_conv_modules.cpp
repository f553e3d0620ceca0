// Conv1d / Conv2d / Conv3d / ConvTranspose2d: PyTorch's parameter layout, names and initial
// distribution, and that forward is the functional op.
#include <gtest/gtest.h>
#include <tapegrad/tapegrad.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tg {
namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

std::vector<std::string> keys(const Module& m) {
  std::vector<std::string> k;
  for (const auto& [name, t] : m.state_dict()) k.push_back(name);
  return k;
}

// PyTorch's init: weight and bias uniform in +-1/sqrt(fan_in), fan_in = weight.size(1) * prod(k).
// With a few hundred draws the largest |value| comes within 10% of the bound (chance of
// failing: 0.9^n, below 1e-9 for n >= 200), so the test sees a wrong bound either way.
void expect_pytorch_init(const ConvNd& m, int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  EXPECT_LE(max_abs(m.weight), bound);
  if (m.weight.numel() >= 200) { EXPECT_GE(max_abs(m.weight), 0.9 * bound); }
  if (m.bias.defined()) { EXPECT_LE(max_abs(m.bias), bound); }
}

TEST(ConvModules, Conv2dLayoutAndInit) {
  manual_seed(1);
  Conv2d conv(6, 16, {3}, {2}, {1}, {1}, 2);
  EXPECT_EQ(conv.name(), "Conv2d");
  EXPECT_EQ(conv.weight.shape(), (Shape{16, 3, 3, 3}));
  EXPECT_EQ(conv.bias.shape(), (Shape{16}));
  EXPECT_EQ(keys(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(conv.weight.requires_grad());
  expect_pytorch_init(conv, 3 * 9);
  // a 6x6 bias-free layer has 16 * 3 * 9 = 432 weights; a seeded generator repeats them
  Generator g1(7), g2(7);
  Conv2d a(6, 16, {3}, {1}, {0}, {1}, 2, false, DType::Float32, &g1),
      b(6, 16, {3}, {1}, {0}, {1}, 2, false, DType::Float32, &g2);
  EXPECT_FALSE(a.bias.defined());
  EXPECT_EQ(keys(a), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
}

TEST(ConvModules, OtherLayersLayoutAndInit) {
  manual_seed(2);
  Conv1d c1(4, 8, {5}, {1}, {2});
  EXPECT_EQ(c1.weight.shape(), (Shape{8, 4, 5}));
  expect_pytorch_init(c1, 4 * 5);
  Conv3d c3(2, 4, {3, 3, 2}, {1}, {1}, {1}, 1, true, DType::Float64);
  EXPECT_EQ(c3.weight.shape(), (Shape{4, 2, 3, 3, 2}));
  EXPECT_EQ(c3.weight.dtype(), DType::Float64);
  expect_pytorch_init(c3, 2 * 18);
  // transposed: weight (in, out / groups, k...) and PyTorch's fan_in from that layout
  ConvTranspose2d t(8, 6, {4}, {2}, {1}, {0}, 2);
  EXPECT_EQ(t.name(), "ConvTranspose2d");
  EXPECT_EQ(t.weight.shape(), (Shape{8, 3, 4, 4}));
  EXPECT_EQ(t.bias.shape(), (Shape{6}));
  expect_pytorch_init(t, 3 * 16);
  ConvTranspose1d t1(4, 6, 3, 2, 1, 1, 2, false);
  EXPECT_EQ(t1.name(), "ConvTranspose1d");
  EXPECT_EQ(t1.weight.shape(), (Shape{4, 3, 3}));
  EXPECT_FALSE(t1.bias.defined());
  ConvTranspose3d t3(2, 4, {3, 2, 2}, 1, 0, 0, 1, true, 1, DType::Float64);
  EXPECT_EQ(t3.name(), "ConvTranspose3d");
  EXPECT_EQ(t3.weight.shape(), (Shape{2, 4, 3, 2, 2}));
  EXPECT_EQ(t3.weight.dtype(), DType::Float64);
  expect_pytorch_init(t3, 4 * 12);
}

TEST(ConvModules, TransposedLayersOfEveryRankAreTheFunctionalOps) {
  manual_seed(5);
  ConvTranspose1d up1(4, 6, 3, 2, 1, 1, 2, true, 2);
  Tensor x1 = randn({2, 4, 7});
  EXPECT_EQ(up1(x1).to_vector<float>(),
            conv_transpose1d(x1, up1.weight, up1.bias, {2}, {1}, {1}, 2, {2}).to_vector<float>());
  ConvTranspose3d up3(3, 2, {2, 3, 2}, {2, 1, 2}, {0, 1, 0}, {1, 0, 0});
  Tensor x3 = randn({1, 3, 3, 4, 3});
  Tensor y3 = up3(x3);
  EXPECT_EQ(y3.shape(), (Shape{1, 2, 7, 4, 6}));  // (3-1)*2+2+1, (4-1)*1-2+3, (3-1)*2+2
  EXPECT_EQ(y3.to_vector<float>(),
            conv_transpose3d(x3, up3.weight, up3.bias, {2, 1, 2}, {0, 1, 0}, {1, 0, 0}).to_vector<float>());
  EXPECT_EQ(up1(x1.select(0, 1)).to_vector<float>(), up1(x1).select(0, 1).contiguous().to_vector<float>());
  EXPECT_THROW(ConvTranspose3d(2, 2, 3, 1, 0, 0, 1, true, 1, "circular"), Error);
}

TEST(ConvModules, ForwardIsTheFunctionalOp) {
  manual_seed(3);
  Conv2d conv(3, 5, {3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 2});
  Tensor x = randn({2, 3, 7, 8});
  Tensor y = conv(x);
  Tensor ref = conv2d(x, conv.weight, conv.bias, {2, 1}, {1, 0, 2, 1}, {1, 2});
  EXPECT_EQ(y.to_vector<float>(), ref.to_vector<float>());
  ConvTranspose2d up(4, 2, {4}, {2}, {1}, {1}, 1, true, {1});
  Tensor z = randn({1, 4, 5, 5});
  Tensor u = up(z);
  EXPECT_EQ(u.shape(), (Shape{1, 2, 11, 11}));  // (5 - 1) * 2 - 2 + 3 + 1 + 1
  EXPECT_EQ(u.to_vector<float>(), conv_transpose2d(z, up.weight, up.bias, {2}, {1}, {1}).to_vector<float>());
  Conv1d c1(4, 2, {3});
  Conv3d c3(4, 2, {3});
  EXPECT_EQ(c1(randn({1, 4, 9})).shape(), (Shape{1, 2, 7}));
  EXPECT_EQ(c3(randn({1, 4, 5, 5, 5})).shape(), (Shape{1, 2, 3, 3, 3}));
  // gradients reach the parameters
  u.backward(ones(u.shape()));
  ASSERT_TRUE(up.weight.grad().defined() && up.bias.grad().defined());
  EXPECT_EQ(up.bias.grad().to_vector<float>(), std::vector<float>(2, 121.f));
}

TEST(ConvModules, BadArguments) {
  auto msg = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_NE(
      msg([] { Conv2d(6, 8, {3}, {1}, {0}, {1}, 4); }).find("Conv2d: in_channels (6) must be divisible by groups"),
      std::string::npos);
  EXPECT_NE(msg([] { ConvTranspose2d(8, 6, {3}, {1}, {0}, {0}, 4); }).find("out_channels (6) must be divisible"),
            std::string::npos);
  EXPECT_NE(msg([] {
              Conv1d(2, 2, {3, 3});
            }).find("Conv1d: expected kernel_size to have 1 or 1 values"),
            std::string::npos);
  EXPECT_NE(msg([] { Conv3d(2, 2, {0}); }).find("Conv3d: expected positive kernel_size"), std::string::npos);
  Conv2d conv(3, 4, {3});
  EXPECT_NE(msg([&] { conv(randn({1, 2, 8, 8})); }).find("conv2d: expected input to have"), std::string::npos);
}

}  // namespace
}  // namespace tg
