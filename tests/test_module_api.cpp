// Module::named_modules / apply / requires_grad_ (PyTorch's order, names and semantics) and the
// convolution layers' plain-integer arguments (Conv2d(3, 8, 3, 1, 1)).
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

struct Block : Module {
  Block() {
    lin = add_module("lin", std::make_shared<Linear>(3, 3));
    norm = add_module("norm", std::make_shared<LayerNorm>(Shape{3}));
  }
  std::string name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return norm->forward(lin->forward(x)); }
  std::shared_ptr<Linear> lin;
  std::shared_ptr<LayerNorm> norm;
};

struct Net : Module {
  Net() {
    encoder = add_module("encoder", std::make_shared<Sequential>(
                                        std::vector<std::shared_ptr<Module>>{std::make_shared<Block>(), std::make_shared<Block>()}));
    head = add_module("head", std::make_shared<Linear>(3, 2));
    tied = add_module("tied", head);  // the same module registered twice: listed once, as PyTorch does
  }
  std::string name() const override { return "Net"; }
  std::shared_ptr<Sequential> encoder;
  std::shared_ptr<Linear> head, tied;
};

TEST(ModuleApi, NamedModulesInPyTorchOrder) {
  Net net;
  std::vector<std::string> names;
  std::vector<std::string> types;
  for (auto& [name, m] : net.named_modules()) {
    names.push_back(name);
    types.push_back(m->name());
  }
  // torch: [n for n, _ in net.named_modules()] for the same structure.
  EXPECT_EQ(names, (std::vector<std::string>{"", "encoder", "encoder.0", "encoder.0.lin", "encoder.0.norm", "encoder.1",
                                             "encoder.1.lin", "encoder.1.norm", "head"}));
  EXPECT_EQ(types.front(), "Net");
  EXPECT_EQ(types[3], "Linear");
  EXPECT_EQ(net.named_modules()[0].second, &net);
  EXPECT_EQ(net.named_modules().back().second, net.head.get());
}

TEST(ModuleApi, ApplyVisitsChildrenFirstAndReturnsTheModule) {
  Net net;
  std::vector<std::string> order;
  Module& same = net.apply([&](Module& m) { order.push_back(m.name()); });
  EXPECT_EQ(&same, &net);
  // PyTorch: each child's subtree first, then the module itself; head and tied are one module,
  // visited once (PyTorch's children() lists a module once per parent).
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "LayerNorm", "Block", "Linear", "LayerNorm", "Block",
                                             "Sequential", "Linear", "Net"}));
  // The everyday use: re-initialise every Linear.
  net.apply([](Module& m) {
    if (auto* lin = dynamic_cast<Linear*>(&m)) lin->bias.detach().fill_(0.5);
  });
  EXPECT_EQ(net.head->bias.to_vector<float>(), std::vector<float>(2, 0.5f));
  EXPECT_EQ(net.encoder->named_modules()[2].second->named_parameters()[1].second.to_vector<float>(),
            std::vector<float>(3, 0.5f));
}

TEST(ModuleApi, RequiresGradFreezesAndUnfreezes) {
  Net net;
  Module& same = net.encoder->requires_grad_(false);
  EXPECT_EQ(&same, net.encoder.get());
  for (auto& [name, p] : net.named_parameters())
    EXPECT_EQ(p.requires_grad(), name.rfind("encoder.", 0) != 0) << name;
  // Frozen parameters get no gradient from backward.
  Tensor x = ones({2, 3});
  sum(net.head->forward(net.encoder->forward(x))).backward();
  EXPECT_FALSE(net.encoder->named_parameters()[0].second.grad().defined());
  EXPECT_TRUE(net.head->weight.grad().defined());
  net.requires_grad_();
  for (auto& [name, p] : net.named_parameters()) EXPECT_TRUE(p.requires_grad()) << name;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(ModuleApi, ConvLayersTakePlainIntegers) {
  manual_seed(4);
  Conv2d a(3, 8, 3, 1, 1);
  manual_seed(4);
  Conv2d b(3, 8, {3}, {1}, {1});
  EXPECT_EQ(a.weight.shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(a.kernel_size, b.kernel_size);
  EXPECT_EQ(a.padding, b.padding);
  EXPECT_EQ(values(a.weight), values(b.weight));
  const Tensor x = randn({1, 3, 5, 5});
  EXPECT_EQ(values(a.forward(x)), values(b.forward(x)));
  EXPECT_EQ(a.forward(x).shape(), (Shape{1, 8, 5, 5}));  // padding 1 keeps 5x5

  // Mixed forms, and a per-dim list.
  Conv2d c(2, 4, {3, 5}, 2, {1, 2}, 1, 2, false);
  EXPECT_EQ(c.weight.shape(), (Shape{4, 1, 3, 5}));
  EXPECT_EQ(c.stride, (IntList{2, 2}));
  EXPECT_FALSE(c.bias.defined());
  const int k = 3;
  const IntList list = {2};
  Conv1d d(2, 2, k, list);
  EXPECT_EQ(d.kernel_size, (IntList{3}));
  EXPECT_EQ(d.stride, (IntList{2}));
  Conv3d e(1, 2, 2, 2);
  EXPECT_EQ(e.weight.shape(), (Shape{2, 1, 2, 2, 2}));
  EXPECT_EQ(e.stride, (IntList{2, 2, 2}));
  ConvTranspose2d f(4, 2, 3, 2, 1, 1);
  EXPECT_EQ(f.output_padding, (IntList{1, 1}));
  EXPECT_EQ(f.forward(randn({1, 4, 4, 4})).shape(), (Shape{1, 2, 8, 8}));  // (4-1)*2 - 2 + 3 + 1
}

}  // namespace
}  // namespace tg
