// Module: names (PyTorch's state_dict keys), recursion, dtype conversion, state loading, and
// the layers and initialisers built on it.
#include <gtest/gtest.h>

#include <cmath>

#include <tapegrad/tapegrad.h>

#include "io_test_util.h"

using namespace tg;

namespace {

// The kind of model a user writes: members declared and registered in one line each.
struct Block : Module {
  std::shared_ptr<Linear> linear1 = add_module("linear1", std::make_shared<Linear>(4, 8));
  std::shared_ptr<Linear> linear2 = add_module("linear2", std::make_shared<Linear>(8, 4, /*bias=*/false));
  Tensor running = register_buffer("running_mean", zeros({4}));
  std::string name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return linear2->forward(relu(linear1->forward(x))); }
};

struct Net : Module {
  std::shared_ptr<Sequential> layers = add_module("layers", std::make_shared<Sequential>());
  Tensor scale = register_parameter("scale", ones({4}));
  Net() {
    layers->push_back(std::make_shared<Block>());
    layers->push_back(std::make_shared<Block>());
  }
  Tensor forward(const Tensor& x) override { return layers->forward(x) * scale; }
};

std::vector<std::string> keys(const StateDict& t) {
  std::vector<std::string> out;
  for (auto& e : t) out.push_back(e.first);
  return out;
}

}  // namespace

TEST(Module, StateDictNamesFollowPyTorch) {
  Net net;
  // PyTorch's order: a module's own parameters, then its buffers, then each child in turn.
  EXPECT_EQ(keys(net.state_dict()),
            (std::vector<std::string>{"scale", "layers.0.running_mean", "layers.0.linear1.weight",
                                      "layers.0.linear1.bias", "layers.0.linear2.weight", "layers.1.running_mean",
                                      "layers.1.linear1.weight", "layers.1.linear1.bias", "layers.1.linear2.weight"}));
  EXPECT_EQ(keys(net.named_parameters()),
            (std::vector<std::string>{"scale", "layers.0.linear1.weight", "layers.0.linear1.bias",
                                      "layers.0.linear2.weight", "layers.1.linear1.weight", "layers.1.linear1.bias",
                                      "layers.1.linear2.weight"}));
  EXPECT_EQ(keys(net.named_buffers()), (std::vector<std::string>{"layers.0.running_mean", "layers.1.running_mean"}));
  EXPECT_EQ(net.num_parameters(), 4 + 2 * (8 * 4 + 8 + 4 * 8));
  for (auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_FALSE(net.named_buffers()[0].second.requires_grad());
}

TEST(Module, HandlesAreTheRegisteredTensors) {
  Net net;
  auto block = std::dynamic_pointer_cast<Block>(net.layers->child("1"));
  ASSERT_TRUE(block);
  EXPECT_EQ(block->linear1->weight.impl(), net.state_dict()[6].second.impl());
  EXPECT_THROW(net.child("nope"), Error);
}

TEST(Module, TrainEvalIsRecursive) {
  Net net;
  EXPECT_TRUE(net.layers->child("0")->is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(std::dynamic_pointer_cast<Block>(net.layers->child("1"))->linear2->is_training());
  net.train();
  EXPECT_TRUE(std::dynamic_pointer_cast<Block>(net.layers->child("1"))->linear2->is_training());
}

TEST(Module, ToConvertsInPlaceOfTheModule) {
  Net net;
  auto block = std::dynamic_pointer_cast<Block>(net.layers->child("0"));
  const std::vector<float> before = block->linear1->weight.to_vector<float>();
  Tensor handle = block->linear1->weight;  // a handle taken before the conversion
  net.to(DType::Float64);
  EXPECT_EQ(handle.dtype(), DType::Float64);
  EXPECT_EQ(block->running.dtype(), DType::Float64);
  for (auto& e : net.state_dict()) EXPECT_EQ(e.second.dtype(), DType::Float64) << e.first;
  const std::vector<double> after = handle.to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], static_cast<double>(before[i]));
  EXPECT_TRUE(handle.requires_grad());
  // The converted model trains: a float64 forward and backward reach the same handle.
  Tensor y = sum(net.forward(ones({2, 4}, DType::Float64)));
  y.backward();
  ASSERT_TRUE(handle.grad().defined());
  EXPECT_EQ(handle.grad().dtype(), DType::Float64);
  EXPECT_THROW(net.to(DType::Int64), Error);
  // A gradient is converted with its parameter (PyTorch's Module.to), not dropped.
  const std::vector<double> grad64 = handle.grad().to_vector<double>();
  net.to(DType::Float32);
  ASSERT_TRUE(handle.grad().defined());
  EXPECT_EQ(handle.grad().dtype(), DType::Float32);
  const std::vector<float> grad32 = handle.grad().to_vector<float>();
  for (size_t i = 0; i < grad64.size(); ++i) EXPECT_EQ(grad32[i], static_cast<float>(grad64[i]));
}

TEST(Module, ZeroGradDropsEveryGradient) {
  Net net;
  sum(net.forward(ones({3, 4}))).backward();
  for (auto& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
  net.zero_grad();
  for (auto& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, LoadStateDictCopiesValuesAndChecks) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  b.load_state_dict(a.state_dict());
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>());
  EXPECT_NE(sa[2].second.impl(), sb[2].second.impl());  // copied, not shared

  StateDict missing(sa.begin() + 1, sa.end());
  EXPECT_THROW(b.load_state_dict(missing), Error);
  b.load_state_dict(missing, /*strict=*/false);
  StateDict extra = sa;
  extra.emplace_back("layers.9.weight", zeros({1}));
  EXPECT_THROW(b.load_state_dict(extra), Error);
  StateDict wrong_shape = sa;
  wrong_shape[0].second = zeros({5});
  EXPECT_THROW(b.load_state_dict(wrong_shape), Error);
}

TEST(Module, RegistrationErrors) {
  struct Bad : Module {
    void twice() {
      register_parameter("w", zeros({1}));
      register_buffer("w", zeros({1}));
    }
    void dotted() { register_parameter("a.b", zeros({1})); }
  };
  Bad bad;
  EXPECT_THROW(bad.twice(), Error);
  EXPECT_THROW(bad.dotted(), Error);
  EXPECT_THROW(bad.forward(zeros({1})), Error);  // no single-tensor forward
}

TEST(Module, ModuleListNamesItsChildrenByIndexAndKeepsTheirType) {
  struct Stack : Module {
    std::shared_ptr<ModuleList<Block>> blocks = add_module("blocks", std::make_shared<ModuleList<Block>>());
    std::string name() const override { return "Stack"; }
  } stack;
  for (int i = 0; i < 3; ++i) stack.blocks->append(std::make_shared<Block>());
  ASSERT_EQ(stack.blocks->size(), 3u);
  std::vector<std::string> names;
  for (const auto& [name, t] : stack.state_dict()) names.push_back(name);
  // PyTorch's order: a module's own tensors, then its children's.
  EXPECT_EQ(names.front(), "blocks.0.running_mean");
  EXPECT_EQ(names.back(), "blocks.2.linear2.weight");
  // Typed: each element is a Block, called without a cast, and it is the registered child.
  Tensor x = ones({2, 4});
  for (const auto& block : *stack.blocks) x = block->forward(x);
  EXPECT_EQ(x.shape(), (Shape{2, 4}));
  EXPECT_EQ(stack.blocks->child("1").get(), (*stack.blocks)[1].get());
  tg::testing::expect_error_with([&] { (void)(*stack.blocks)[3]; }, {"ModuleList", "index 3", "3 modules"});
  tg::testing::expect_error_with([&] { stack.blocks->append(std::shared_ptr<Block>()); }, {"ModuleList::append", "null"});
}

TEST(Module, TiedWeightsAreCountedOnce) {
  struct Tied : Module {
    std::shared_ptr<Linear> a = add_module("a", std::make_shared<Linear>(3, 3));
    std::shared_ptr<Linear> b = add_module("b", std::make_shared<Linear>(3, 3));
  };
  struct TiedAgain : Tied {
    TiedAgain() { register_parameter("shared", a->weight); }
  };
  TiedAgain m;
  EXPECT_EQ(m.named_parameters().size(), 4u);  // "shared" is a.weight
  EXPECT_EQ(m.state_dict().size(), 5u);        // state_dict keeps every name, as PyTorch's does
  EXPECT_EQ(m.num_parameters(), 2 * (9 + 3));
}

TEST(Layers, LinearMatchesItsFormula) {
  Linear lin(3, 2, true, DType::Float64);
  lin.weight.detach().copy_(from_vector(std::vector<double>{1, 2, 3, -1, 0, 1}, {2, 3}));
  lin.bias.detach().copy_(from_vector(std::vector<double>{0.5, -0.5}, {2}));
  Tensor y = lin(from_vector(std::vector<double>{1, 1, 2}, {1, 3}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1 + 2 + 6 + 0.5, -1 + 0 + 2 - 0.5}));
  EXPECT_THROW(lin(zeros({1, 4}, DType::Float64)), Error);
}

TEST(Layers, LinearDefaultInitBounds) {
  manual_seed(0);
  Linear lin(400, 256);
  const double bound = 1.0 / std::sqrt(400.0);  // kaiming_uniform_(a = sqrt(5)) on fan_in 400
  auto check = [&](const Tensor& t, double min_span) {
    std::vector<float> v = t.to_vector<float>();
    double lo = 1, hi = -1, sq = 0;
    for (float x : v) {
      lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
      sq += double(x) * x;
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -min_span * bound);  // fills the interval, not a corner of it
    EXPECT_GT(hi, min_span * bound);
    return std::sqrt(sq / v.size());
  };
  // U(-b, b) has std b/sqrt(3); over 102,400 draws the sample std is within 1% of it.
  EXPECT_NEAR(check(lin.weight, 0.99), bound / std::sqrt(3.0), 0.01 * bound / std::sqrt(3.0));
  check(lin.bias, 0.8);
  // Same seed, same model.
  manual_seed(0);
  Linear again(400, 256);
  EXPECT_EQ(again.weight.to_vector<float>(), lin.weight.to_vector<float>());
}

TEST(Layers, MLPIsASequentialOfLinearAndReLU) {
  MLP mlp({784, 256, 10});
  EXPECT_EQ(keys(mlp.state_dict()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(mlp.num_parameters(), 784 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(mlp[1]->name(), "ReLU");
  EXPECT_EQ(mlp.forward(zeros({5, 784})).shape(), (Shape{5, 10}));
  // ReLU in the middle: a negative pre-activation contributes nothing.
  MLP tiny({1, 1, 1}, DType::Float64);
  auto first = std::dynamic_pointer_cast<Linear>(tiny[0]);
  auto last = std::dynamic_pointer_cast<Linear>(tiny[2]);
  first->weight.detach().fill_(-1.0);
  first->bias.detach().fill_(0.0);
  last->weight.detach().fill_(2.0);
  last->bias.detach().fill_(0.25);
  EXPECT_EQ(tiny.forward(full({2, 1}, 3.0, DType::Float64)).to_vector<double>(), (std::vector<double>{0.25, 0.25}));
  EXPECT_EQ(tiny.forward(full({1, 1}, -3.0, DType::Float64)).to_vector<double>(), (std::vector<double>{6.25}));
  EXPECT_THROW(MLP({3}), Error);
}

TEST(Init, Fans) {
  Tensor conv = zeros({8, 4, 3, 3});
  EXPECT_EQ(init::fan_in(conv), 36);
  EXPECT_EQ(init::fan_out(conv), 72);
  EXPECT_THROW(init::fan_in(zeros({3})), Error);
  EXPECT_NEAR(init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0), 1e-15);
  EXPECT_NEAR(init::calculate_gain("relu"), std::sqrt(2.0), 1e-15);
  EXPECT_THROW(init::calculate_gain("swish"), Error);
}

TEST(Init, BoundsAndMoments) {
  manual_seed(3);
  Tensor w = zeros({200, 100}, DType::Float64);
  auto max_abs = [](const Tensor& t) {
    double m = 0;
    for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
    return m;
  };
  init::kaiming_uniform_(w, 0.0, "fan_out", "relu");  // bound sqrt(2) * sqrt(3 / 200)
  const double kaiming = std::sqrt(2.0) * std::sqrt(3.0 / 200);
  EXPECT_LE(max_abs(w), kaiming);
  EXPECT_GT(max_abs(w), 0.99 * kaiming);
  init::xavier_uniform_(w, 2.0);  // bound 2 * sqrt(6 / 300)
  EXPECT_LE(max_abs(w), 2.0 * std::sqrt(6.0 / 300));
  EXPECT_GT(max_abs(w), 0.99 * 2.0 * std::sqrt(6.0 / 300));
  init::normal_(w, 1.0, 0.5);
  std::vector<double> v = w.to_vector<double>();
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / v.size();
  // 20,000 draws: the sample mean's std is 0.5/sqrt(2e4) = 0.0035; 0.02 is > 5 sigma.
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.02);
  init::constant_(w, 0.75);
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(20000, 0.75));
  init::zeros_(w);
  EXPECT_EQ(max_abs(w), 0.0);
  Tensor ints = zeros({2, 2}, DType::Int64);
  EXPECT_THROW(init::uniform_(ints), Error);
}

TEST(Init, DoesNotRecord) {
  Tensor p = zeros({4, 4}).requires_grad_();
  init::uniform_(p, -1, 1);
  EXPECT_TRUE(p.is_leaf());  // a parameter stays a leaf after initialisation
  EXPECT_FALSE(p.grad_fn());
}

TEST(Layers, LayerNormModule) {
  LayerNorm ln({4}, 1e-5, true, DType::Float64);
  EXPECT_EQ(keys(ln.state_dict()), (std::vector<std::string>{"weight", "bias"}));
  ln.bias.detach().fill_(1.0);
  Tensor y = ln(from_vector(std::vector<double>{1, 2, 3, 4, -2, 0, 2, 4}, {2, 4}));
  // Each row normalised to mean 0 (plus the bias 1) and variance 1 (biased, as PyTorch).
  std::vector<double> v = y.to_vector<double>();
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += v[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += (v[r * 4 + c] - mean) * (v[r * 4 + c] - mean) / 4;
    EXPECT_NEAR(mean, 1.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-4);  // eps = 1e-5 against variances 1.25 and 5 shrinks it by < 1e-5 relative
  }
  EXPECT_EQ(LayerNorm({4}, 1e-5, false).num_parameters(), 0);
}

TEST(Layers, DropoutFollowsTrainEval) {
  Dropout drop(0.5);
  Tensor x = ones({10000});
  std::vector<float> v = drop(x).to_vector<float>();
  int zeros_seen = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || e == 2.0f);
    zeros_seen += e == 0.0f;
  }
  EXPECT_NEAR(zeros_seen, 5000, 300);  // binomial std 50: 6 sigma
  drop.eval();
  EXPECT_EQ(drop(x).to_vector<float>(), std::vector<float>(10000, 1.0f));
  EXPECT_THROW(Dropout(1.5), Error);
}

TEST(Layers, EmbeddingLooksUpRowsAndZeroesPadding) {
  Embedding emb(5, 3, -1, DType::Float64);
  EXPECT_EQ(*emb.padding_idx, 4);
  EXPECT_EQ(emb.weight.select(0, 4).to_vector<double>(), std::vector<double>(3, 0.0));
  Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 4}, {2, 2});
  Tensor y = emb(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.select(0, 0).select(0, 0).to_vector<double>(), emb.weight.select(0, 2).to_vector<double>());
  EXPECT_EQ(keys(emb.state_dict()), (std::vector<std::string>{"weight"}));
}

TEST(Layers, EmbeddingMayBeEmptyAsPyTorchs) {
  Embedding emb(0, 3, std::nullopt, DType::Float64);
  EXPECT_EQ(emb.weight.shape(), (Shape{0, 3}));
  EXPECT_EQ(emb(Tensor::empty({0}, DType::Int64)).shape(), (Shape{0, 3}));
  EXPECT_THROW(emb(from_vector(std::vector<int64_t>{0}, {1})), Error);
  EXPECT_THROW(Embedding(0, 3, 0), Error);  // no row to pad
  EXPECT_THROW(Embedding(-1, 3), Error);
}

TEST(Module, SafetensorsRoundTrip) {
  manual_seed(4);
  MLP a({6, 5, 3});
  const std::string path = ::testing::TempDir() + "/tapegrad_mlp.safetensors";
  save_safetensors(path, a.state_dict());
  manual_seed(5);
  MLP b({6, 5, 3});
  LoadStateDictReport report = b.load_state_dict(load_safetensors(path).tensors);
  EXPECT_TRUE(report.ok());
  Tensor x = randn({2, 6});
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
  std::remove(path.c_str());
}
