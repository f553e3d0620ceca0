// The core ops against PyTorch: forward outputs and input gradients (for a random upstream
// gradient) from tools/fixtures/core_ops.py, in float32 and float64.
//
// Tolerances: float64 rtol 1e-10 / atol 1e-12: both sides compute the same formulas in double;
// what remains is summation order and libm's last bits (exp, erf, log1p), ~1e-15 relative,
// amplified at most a few hundred times by the longest chains (layer_norm's backward, the
// cross-entropy mean). float32 rtol 1e-5 / atol 1e-6: float32 has a 6e-8 unit roundoff; we
// accumulate reductions in double where PyTorch accumulates in float, so the two differ by a
// few dozen ulps at most, and atol covers outputs that are near zero (differences of
// nearly equal numbers: layer_norm's centred values, softmax gradients).
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "golden.h"

namespace {

using tg::Tensor;
using tg::testing::GoldenCase;
using Inputs = std::map<std::string, Tensor>;
using Outputs = std::vector<Tensor>;
using OpFn = std::function<Outputs(const GoldenCase&, Inputs&)>;

tg::Reduction reduction_of(const nlohmann::json& p) {
  const std::string r = p.value("reduction", "mean");
  return r == "none" ? tg::Reduction::None : r == "sum" ? tg::Reduction::Sum : tg::Reduction::Mean;
}

const std::map<std::string, OpFn>& ops() {
  static const std::map<std::string, OpFn> table = {
      {"pow", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::pow(in["x"], c.json["params"]["exponent"])}; }},
      {"exp", [](const GoldenCase&, Inputs& in) { return Outputs{tg::exp(in["x"])}; }},
      {"log", [](const GoldenCase&, Inputs& in) { return Outputs{tg::log(in["x"])}; }},
      {"sqrt", [](const GoldenCase&, Inputs& in) { return Outputs{tg::sqrt(in["x"])}; }},
      {"rsqrt", [](const GoldenCase&, Inputs& in) { return Outputs{tg::rsqrt(in["x"])}; }},
      {"abs", [](const GoldenCase&, Inputs& in) { return Outputs{tg::abs(in["x"])}; }},
      {"clamp",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         std::optional<double> lo, hi;
         if (p.contains("min")) lo = p["min"].get<double>();
         if (p.contains("max")) hi = p["max"].get<double>();
         return Outputs{tg::clamp(in["x"], lo, hi)};
       }},
      {"rdiv", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::div(c.json["params"]["scalar"].get<double>(), in["x"])}; }},
      {"sigmoid", [](const GoldenCase&, Inputs& in) { return Outputs{tg::sigmoid(in["x"])}; }},
      {"tanh", [](const GoldenCase&, Inputs& in) { return Outputs{tg::tanh(in["x"])}; }},
      {"gelu", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::gelu(in["x"], c.json["params"]["approximate"])}; }},
      {"softmax", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::softmax(in["x"], c.json["params"]["dim"])}; }},
      {"log_softmax",
       [](const GoldenCase& c, Inputs& in) { return Outputs{tg::log_softmax(in["x"], c.json["params"]["dim"])}; }},
      {"cross_entropy",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         tg::CrossEntropyOptions o{reduction_of(p), p["ignore_index"], p["label_smoothing"]};
         return Outputs{tg::cross_entropy(in["logits"], in["target"], o)};
       }},
      {"mse_loss",
       [](const GoldenCase& c, Inputs& in) {
         return Outputs{tg::mse_loss(in["input"], in["target"], reduction_of(c.json["params"]))};
       }},
      {"l1_loss",
       [](const GoldenCase& c, Inputs& in) {
         return Outputs{tg::l1_loss(in["input"], in["target"], reduction_of(c.json["params"]))};
       }},
      {"smooth_l1_loss",
       [](const GoldenCase& c, Inputs& in) {
         return Outputs{tg::smooth_l1_loss(in["input"], in["target"], reduction_of(c.json["params"]),
                                           c.json["params"]["beta"])};
       }},
      {"bce_with_logits",
       [](const GoldenCase& c, Inputs& in) {
         Tensor pw = in.count("pos_weight") ? in["pos_weight"] : Tensor();
         return Outputs{
             tg::binary_cross_entropy_with_logits(in["input"], in["target"], pw, reduction_of(c.json["params"]))};
       }},
      {"sigmoid_focal_loss",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         return Outputs{tg::sigmoid_focal_loss(in["inputs"], in["targets"], p["alpha"], p["gamma"], reduction_of(p))};
       }},
      {"layer_norm",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         Tensor w = in.count("weight") ? in["weight"] : Tensor(), b = in.count("bias") ? in["bias"] : Tensor();
         return Outputs{tg::layer_norm(in["x"], p["normalized_shape"].get<tg::Shape>(), w, b, p["eps"])};
       }},
      {"embedding",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         std::optional<int64_t> pad;
         if (p.contains("padding_idx")) pad = p["padding_idx"].get<int64_t>();
         return Outputs{tg::embedding(in["weight"], in["indices"], pad)};
       }},
      {"cat", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::cat({in["a"], in["b"], in["c"]}, c.json["params"]["dim"])}; }},
      {"stack", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::stack({in["a"], in["b"]}, c.json["params"]["dim"])}; }},
      {"index_select",
       [](const GoldenCase& c, Inputs& in) { return Outputs{tg::index_select(in["x"], c.json["params"]["dim"], in["index"])}; }},
      {"gather", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::gather(in["x"], c.json["params"]["dim"], in["index"])}; }},
      {"max_dim",
       [](const GoldenCase& c, Inputs& in) {
         auto r = tg::max(in["x"], c.json["params"]["dim"], c.json["params"]["keepdim"]);
         return Outputs{r.values, r.indices};
       }},
      {"min_dim",
       [](const GoldenCase& c, Inputs& in) {
         auto r = tg::min(in["x"], c.json["params"]["dim"], c.json["params"]["keepdim"]);
         return Outputs{r.values, r.indices};
       }},
      {"max_all", [](const GoldenCase&, Inputs& in) { return Outputs{tg::max(in["x"])}; }},
      {"argmax", [](const GoldenCase& c, Inputs& in) { return Outputs{tg::argmax(in["x"], c.json["params"]["dim"])}; }},
      {"var",
       [](const GoldenCase& c, Inputs& in) {
         const auto& p = c.json["params"];
         return Outputs{tg::var(in["x"], p["dims"].get<std::vector<int64_t>>(), p["correction"], p["keepdim"])};
       }},
      {"where", [](const GoldenCase&, Inputs& in) { return Outputs{tg::where(in["cond"], in["a"], in["b"])}; }},
      {"masked_fill",
       [](const GoldenCase& c, Inputs& in) { return Outputs{tg::masked_fill(in["x"], in["mask"], c.json["params"]["value"])}; }},
      {"gt", [](const GoldenCase&, Inputs& in) { return Outputs{tg::gt(in["a"], in["b"])}; }},
  };
  return table;
}

TEST(CoreOpsGolden, MatchesPyTorchForwardAndGradients) {
  std::vector<GoldenCase> cases = tg::testing::load_golden_cases("core_ops");
  ASSERT_GE(cases.size(), 100u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name());
    const bool f64 = c.dtype() == tg::DType::Float64;
    const double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
    auto it = ops().find(c.json["op"].get<std::string>());
    ASSERT_NE(it, ops().end()) << "no runner for op " << c.json["op"];
    Inputs in;
    std::vector<std::string> grad_names = c.json["grad"].get<std::vector<std::string>>();
    for (const std::string& k : c.json["inputs"].get<std::vector<std::string>>()) {
      in[k] = c.tensor(k);
      if (std::find(grad_names.begin(), grad_names.end(), k) != grad_names.end()) in[k].requires_grad_();
    }
    Outputs out = it->second(c, in);
    tg::testing::expect_close(out[0], c.tensor("out"), rtol, atol, c.name() + " out");
    if (c.has("out_indices")) {
      ASSERT_GE(out.size(), 2u);
      EXPECT_EQ(out[1].to_vector<int64_t>(), c.tensor("out_indices").to_vector<int64_t>()) << c.name() << " indices";
    }
    if (grad_names.empty()) continue;
    std::vector<Tensor> wrt;
    for (const std::string& k : grad_names) wrt.push_back(in[k]);
    std::vector<Tensor> grads = tg::grad({out[0]}, wrt, {c.tensor("gout")});
    for (size_t i = 0; i < grad_names.size(); ++i)
      tg::testing::expect_close(grads[i], c.tensor("grad_" + grad_names[i]), rtol, atol,
                                c.name() + " grad_" + grad_names[i]);
  }
}

}  // namespace
