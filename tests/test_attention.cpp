// MultiheadAttention against PyTorch's nn.MultiheadAttention: the same weights (loaded by
// name), the same inputs; outputs, averaged attention weights and every gradient must match.
#include <gtest/gtest.h>

#include "golden.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

TEST(MultiheadAttention, MatchesPyTorchOutputsWeightsAndGradients) {
  for (const auto& c : load_golden_cases("attention")) {
    SCOPED_TRACE(c.name());
    const DType dt = c.dtype();
    // float64: only summation order differs from PyTorch (1e-10). float32: a few ulps through
    // two projections, a softmax and a matmul (2e-5 relative, 2e-6 absolute).
    const double rtol = dt == DType::Float64 ? 1e-10 : 2e-5, atol = dt == DType::Float64 ? 1e-12 : 2e-6;
    MultiheadAttention mha(c.json["embed_dim"], c.json["num_heads"], 0.0, true, c.json["batch_first"], dt);
    StateDict state;
    for (const auto& [name, param] : mha.named_parameters()) state.push_back({name, c.tensor("param." + name)});
    mha.load_state_dict(state);

    const bool self = c.json["self_attention"];
    Tensor q = c.tensor("query").requires_grad_();
    Tensor k = self ? q : c.tensor("key").requires_grad_();
    Tensor v = self ? q : c.tensor("value").requires_grad_();
    Tensor kpm = c.has("key_padding_mask") ? c.tensor("key_padding_mask") : Tensor();
    Tensor mask = c.has("attn_mask") ? c.tensor("attn_mask") : Tensor();
    AttentionOutput out = mha.forward(q, k, v, kpm, true, mask);
    expect_close(out.output, c.tensor("output"), rtol, atol, "output");
    expect_close(out.weights, c.tensor("weights"), rtol, atol, "attention weights");

    out.output.backward(c.tensor("grad_output"));
    expect_close(q.grad(), c.tensor("grad_query"), rtol, atol, "grad query");
    if (!self) {
      expect_close(k.grad(), c.tensor("grad_key"), rtol, atol, "grad key");
      expect_close(v.grad(), c.tensor("grad_value"), rtol, atol, "grad value");
    }
    for (const auto& [name, param] : mha.named_parameters())
      expect_close(param.grad(), c.tensor("grad." + name), rtol, atol, "grad " + name);
  }
}

TEST(MultiheadAttention, ParameterNamesAndInitFollowPyTorch) {
  manual_seed(0);
  MultiheadAttention mha(8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : mha.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (Shape{24, 8}));
  // xavier_uniform on (24, 8): bound sqrt(6 / (8 + 24)) = 0.433
  for (float w : mha.in_proj_weight.to_vector<float>()) EXPECT_LE(std::abs(w), 0.4331f);
  for (float b : mha.in_proj_bias.to_vector<float>()) EXPECT_EQ(b, 0.f);
  for (float b : mha.out_proj->bias.to_vector<float>()) EXPECT_EQ(b, 0.f);
}

TEST(MultiheadAttention, DropoutOfOneDropsEveryWeight) {
  // as nn.MultiheadAttention(dropout=1) in training: every attention weight dropped, so the
  // output is out_proj's bias alone; eval keeps them (a dropout outside [0, 1] is an Error)
  EXPECT_THROW(MultiheadAttention(8, 2, 1.5), Error);
  EXPECT_THROW(MultiheadAttention(8, 2, -0.1), Error);
  manual_seed(1);
  MultiheadAttention mha(8, 2, 1.0, true, true);
  mha.out_proj->bias.detach().fill_(0.5);
  Tensor x = randn({2, 3, 8});
  AttentionOutput out = mha.forward(x, x, x);
  for (float w : out.weights.to_vector<float>()) EXPECT_EQ(w, 0.f);
  for (float y : out.output.to_vector<float>()) EXPECT_EQ(y, 0.5f);
  mha.eval();
  EXPECT_NEAR(sum(mha.forward(x, x, x).weights).item<float>(), 6.f, 1e-5);  // 2 x 3 rows of 1
}

TEST(MultiheadAttention, RejectsBadShapes) {
  MultiheadAttention mha(8, 2, 0.0, true, true);
  Tensor x = randn({2, 3, 8});
  EXPECT_THROW(MultiheadAttention(10, 3), Error);
  try {
    mha.forward(x, randn({2, 4, 6}), randn({2, 4, 6}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected embedding size 8"), std::string::npos) << e.what();
  }
  try {
    mha.forward(x, x, x, zeros({2, 5}, DType::Int64));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "MultiheadAttention: expected key_padding_mask of shape [2, 3], got [2, 5]");
  }
  // unbatched (2-D) query, key and value take a 1-D key_padding_mask; 2-D and 3-D inputs do not mix
  Tensor u = randn({3, 8});
  EXPECT_EQ(mha.forward(u, u, u, zeros({3}, DType::Int64)).output.shape(), (Shape{3, 8}));
  try {
    mha.forward(u, u, u, zeros({1, 3}, DType::Int64));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a 1-D key_padding_mask [S] with unbatched"), std::string::npos)
        << e.what();
  }
  try {
    mha.forward(u, x, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 3-D (batched) or 2-D (unbatched) query, key and value, got [3, 8]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tg
