// Deformable-DETR blocks against PyTorch (tools/fixtures/deformable_detr.py builds the same
// modules after the published architecture): weights load by their PyTorch names, and the
// outputs, the input gradients and every parameter gradient must match.
//
// Tolerances: float64 1e-9 relative, float32 1e-4 relative. "Relative" is taken
// against the tensor's largest magnitude (atol = rtol * max|expected|) as well as per element:
// a gradient entry that cancels to ~0 carries the absolute rounding error of its larger terms,
// so a per-element relative bound alone would test the cancellation, not the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>

#include "golden.h"

namespace tg {
namespace {

using testing::data_path;
using testing::expect_close;
using testing::GoldenCase;
using testing::load_golden_cases;

double rtol_for(DType dt) { return dt == DType::Float64 ? 1e-9 : 1e-4; }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// The worst |actual - expected| / max|expected| seen per dtype, printed at the end for the report.
double worst_seen[2] = {0, 0};

void expect_matches(const Tensor& actual, const Tensor& expected, DType dt, const std::string& what) {
  const double rtol = rtol_for(dt), scale = max_abs(expected);
  expect_close(actual, expected, rtol, rtol * scale, what);
  if (actual.defined() && actual.shape() == expected.shape() && scale > 0) {
    auto a = actual.to(DType::Float64).to_vector<double>(), e = expected.to(DType::Float64).to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]) / scale);
    double& w = worst_seen[dt == DType::Float64 ? 0 : 1];
    w = std::max(w, worst);
  }
}

std::vector<GoldenCase> cases_of(const std::string& kind) {
  std::vector<GoldenCase> out;
  for (auto& c : load_golden_cases("deformable_detr"))
    if (c.json["kind"] == kind) out.push_back(c);
  return out;
}

// Loads the case's safetensors weights strictly (every key present, no extra) after checking
// that the key sets are equal, which is the state_dict-name compatibility with PyTorch.
void load_weights(Module& m, const GoldenCase& c) {
  SafetensorsFile f = load_safetensors(data_path("deformable_detr/" + c.json["tensors"]["weights"].get<std::string>()));
  std::set<std::string> theirs, ours;
  for (auto& [name, t] : f.tensors) theirs.insert(name);
  for (auto& [name, t] : m.state_dict()) ours.insert(name);
  ASSERT_EQ(ours, theirs);
  m.load_state_dict(f.tensors);
}

void expect_parameter_grads(const Module& m, const GoldenCase& c) {
  int checked = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    expect_matches(p.grad(), c.tensor("grad." + name), c.dtype(), "grad " + name);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(DeformableDetr, MSDeformAttnMatchesPyTorch) {
  auto cases = cases_of("msda");
  ASSERT_GE(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const DType dt = c.dtype();
    MSDeformAttn m(c.json["d_model"], c.json["n_levels"], c.json["n_heads"], c.json["n_points"], dt);
    load_weights(m, c);
    Tensor query = c.tensor("query").requires_grad_();
    Tensor input = c.tensor("input_flatten").requires_grad_();
    Tensor ref = c.tensor("reference_points").requires_grad_();
    Tensor mask = c.has("padding_mask") ? c.tensor("padding_mask") : Tensor();
    Tensor out = m.forward(query, ref, input, c.tensor("spatial_shapes"), c.tensor("level_start_index"), mask);
    expect_matches(out, c.tensor("output"), dt, "output");
    out.backward(c.tensor("grad_output"));
    expect_matches(query.grad(), c.tensor("grad_query"), dt, "grad query");
    expect_matches(input.grad(), c.tensor("grad_input_flatten"), dt, "grad input_flatten");
    expect_matches(ref.grad(), c.tensor("grad_reference_points"), dt, "grad reference_points");
    expect_parameter_grads(m, c);
  }
}

TEST(DeformableDetr, PaddingMaskZeroesTheMaskedValues) {
  // Changing the input at a masked position must not change the output (its value is zeroed).
  for (const auto& c : cases_of("msda")) {
    if (!c.has("padding_mask")) continue;
    SCOPED_TRACE(c.name());
    NoGradGuard no_grad;
    MSDeformAttn m(c.json["d_model"], c.json["n_levels"], c.json["n_heads"], c.json["n_points"], c.dtype());
    load_weights(m, c);
    Tensor input = c.tensor("input_flatten"), mask = c.tensor("padding_mask");
    auto run = [&](const Tensor& x) {
      return m.forward(c.tensor("query"), c.tensor("reference_points"), x, c.tensor("spatial_shapes"),
                       c.tensor("level_start_index"), mask);
    };
    Tensor base = run(input);
    Tensor changed = input.clone();
    auto mv = mask.to_vector<int64_t>();
    const int64_t C = input.size(2);
    for (size_t k = 0; k < mv.size(); ++k)
      if (mv[k]) changed.detach().narrow(1, static_cast<int64_t>(k) % input.size(1), 1)
                     .narrow(0, static_cast<int64_t>(k) / input.size(1), 1).fill_(100.0);
    ASSERT_GT(C, 0);
    expect_close(run(changed), base, 0, 0, "output after changing masked inputs");
    // and an unmasked change does show (so the check above could fail)
    Tensor other = input.clone();
    other.detach().narrow(1, 0, 1).fill_(100.0);
    EXPECT_GT(max_abs(run(other) - base), 1e-3);
  }
}

TEST(DeformableDetr, TransformerMatchesPyTorch) {
  auto cases = cases_of("transformer");
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const DType dt = c.dtype();
    DeformableTransformerOptions o;
    o.d_model = c.json["d_model"];
    o.n_heads = c.json["n_heads"];
    o.num_encoder_layers = c.json["num_encoder_layers"];
    o.num_decoder_layers = c.json["num_decoder_layers"];
    o.dim_feedforward = c.json["d_ffn"];
    o.dropout = 0.0;
    o.n_levels = c.json["n_levels"];
    o.enc_n_points = o.dec_n_points = c.json["n_points"];
    o.dtype = dt;
    DeformableTransformer m(o);
    load_weights(m, c);

    PositionEmbeddingSine position(o.d_model / 2, 10000, true);
    std::vector<Tensor> srcs, masks, pos;
    for (int64_t l = 0; l < o.n_levels; ++l) {
      const std::string s = std::to_string(l);
      srcs.push_back(c.tensor("src" + s).requires_grad_());
      masks.push_back(c.tensor("mask" + s));
      // The encoding is compared on valid pixels only: in a fully padded row or column the
      // normalised position is (0 - 0.5) / 1e-6 * 2 pi, an argument near -3e6 whose float32
      // sin/cos is rounding noise in PyTorch too (those positions are never attended to).
      // The model then gets PyTorch's encoding, so that noise cannot leak into the comparison.
      Tensor valid = (1.0 - masks.back().to(dt)).unsqueeze(1);
      expect_matches(position.forward(masks.back(), dt) * valid, c.tensor("pos" + s) * valid, dt,
                     "position embedding on valid pixels, level " + s);
      pos.push_back(c.tensor("pos" + s));
    }
    Tensor query_embed = c.tensor("query_embed").requires_grad_();
    DeformableTransformerOutput out = m.forward(srcs, masks, pos, query_embed);
    expect_matches(out.memory, c.tensor("memory"), dt, "memory");
    expect_matches(out.init_reference, c.tensor("reference_points"), dt, "reference points");
    expect_matches(out.hs, c.tensor("hs"), dt, "hs");
    out.hs.backward(c.tensor("grad_hs"));
    expect_matches(query_embed.grad(), c.tensor("grad_query_embed"), dt, "grad query_embed");
    for (int64_t l = 0; l < o.n_levels; ++l)
      expect_matches(srcs[static_cast<size_t>(l)].grad(), c.tensor("grad_src" + std::to_string(l)), dt,
                     "grad src" + std::to_string(l));
    expect_parameter_grads(m, c);
  }
  std::cout << "[ deformable_detr ] worst |ours - torch| / max|torch|: float64 " << worst_seen[0] << ", float32 "
            << worst_seen[1] << " (so far)\n";
}

// An encoder layer then a decoder layer, under the names the fixture's EncDec uses.
struct EncDec : Module {
  EncDec(int64_t d, int64_t ffn, int64_t levels, int64_t heads, int64_t points) {
    encoder_layer = add_module("encoder_layer", std::make_shared<DeformableTransformerEncoderLayer>(
                                                    d, ffn, 0.0, "relu", levels, heads, points, DType::Float64));
    decoder_layer = add_module("decoder_layer", std::make_shared<DeformableTransformerDecoderLayer>(
                                                    d, ffn, 0.0, "relu", levels, heads, points, DType::Float64));
  }
  std::shared_ptr<DeformableTransformerEncoderLayer> encoder_layer;
  std::shared_ptr<DeformableTransformerDecoderLayer> decoder_layer;
};

TEST(DeformableDetr, TwentyAdamWStepsTrackPyTorchsLosses) {
  auto cases = cases_of("train");
  ASSERT_EQ(cases.size(), 1u);
  const GoldenCase& c = cases[0];
  EncDec m(c.json["d_model"], c.json["d_ffn"], c.json["n_levels"], c.json["n_heads"], c.json["n_points"]);
  load_weights(m, c);
  AdamOptions opts;
  opts.lr = c.json["lr"];
  opts.weight_decay = c.json["weight_decay"];
  AdamW opt(m.named_parameters(), opts);
  Tensor src = c.tensor("src"), pos = c.tensor("pos"), tgt = c.tensor("tgt"), query_pos = c.tensor("query_pos");
  Tensor ss = c.tensor("spatial_shapes"), lsi = c.tensor("level_start_index"), target = c.tensor("target");
  const int64_t N = src.size(0), L = ss.size(0);
  Tensor valid = ones({N, L, 2}, DType::Float64);
  Tensor enc_ref = get_reference_points(ss, valid);
  Tensor dec_ref = c.tensor("decoder_reference_points").unsqueeze(2) * valid.unsqueeze(1);
  const std::vector<double> expected = c.json["losses"];
  ASSERT_EQ(expected.size(), 20u);
  double worst = 0;
  for (size_t step = 0; step < expected.size(); ++step) {
    opt.zero_grad();
    Tensor memory = m.encoder_layer->forward(src, pos, enc_ref, ss, lsi);
    Tensor out = m.decoder_layer->forward(tgt, query_pos, dec_ref, memory, ss, lsi);
    Tensor loss = mean(square(out - target));
    loss.backward();
    opt.step();
    const double got = loss.item<double>();
    // 1e-8 relative, looser than a single pass's 1e-9: float64 rounding differences compound over
    // the steps.
    EXPECT_NEAR(got, expected[step], 1e-8 * std::abs(expected[step])) << "step " << step;
    worst = std::max(worst, std::abs(got - expected[step]) / std::abs(expected[step]));
  }
  EXPECT_LT(expected.back(), 0.7 * expected.front());  // the run does train, so matching it means something
  std::cout << "[ deformable_detr ] training parity: worst relative loss error over 20 steps " << worst << "\n";
}

TEST(DeformableDetr, MSDeformAttnInitFollowsDeformableDetr) {
  auto cases = cases_of("init");
  ASSERT_EQ(cases.size(), 1u);
  const GoldenCase& c = cases[0];
  manual_seed(0);
  MSDeformAttn m(c.json["d_model"], c.json["n_levels"], c.json["n_heads"], c.json["n_points"], DType::Float64);
  // The directional grid is exact up to cos/sin rounding.
  expect_close(m.sampling_offsets->bias, c.tensor("sampling_offsets.bias"), 0, 1e-15, "sampling_offsets.bias");
  EXPECT_EQ(max_abs(m.sampling_offsets->weight), 0.0);
  EXPECT_EQ(max_abs(m.attention_weights->weight), 0.0);
  EXPECT_EQ(max_abs(m.attention_weights->bias), 0.0);
  EXPECT_EQ(max_abs(m.value_proj->bias), 0.0);
  EXPECT_EQ(max_abs(m.output_proj->bias), 0.0);
  // xavier_uniform on (32, 32): bound sqrt(6 / 64); a uniform draw of 1024 comes within 10% of it.
  const double bound = std::sqrt(6.0 / 64.0);
  EXPECT_LE(max_abs(m.value_proj->weight), bound);
  EXPECT_GT(max_abs(m.value_proj->weight), 0.9 * bound);
  std::vector<std::string> names;
  for (auto& [n, t] : m.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"sampling_offsets.weight", "sampling_offsets.bias",
                                             "attention_weights.weight", "attention_weights.bias", "value_proj.weight",
                                             "value_proj.bias", "output_proj.weight", "output_proj.bias"}));
}

TEST(DeformableDetr, RejectsBadInputs) {
  MSDeformAttn m(8, 2, 2, 2);
  Tensor ss = from_vector(std::vector<int64_t>{2, 2, 1, 1}, {2, 2}), lsi = from_vector(std::vector<int64_t>{0, 4}, {2});
  Tensor q = zeros({1, 3, 8}), x = zeros({1, 5, 8});
  EXPECT_NO_THROW(m.forward(q, full({1, 3, 2, 2}, 0.5), x, ss, lsi));
  try {
    m.forward(q, zeros({1, 3, 2, 3}), x, ss, lsi);
    FAIL() << "expected tg::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reference_points"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.forward(zeros({1, 3, 6}), full({1, 3, 2, 2}, 0.5), x, ss, lsi), Error);
  EXPECT_THROW(m.forward(q, full({1, 3, 2, 2}, 0.5), x, ss, lsi, zeros({1, 4}, DType::Int64)), Error);
  EXPECT_THROW(MSDeformAttn(10, 2, 3, 2), Error);
  EXPECT_THROW(PositionEmbeddingSine(3), Error);
  EXPECT_THROW(DeformableTransformerEncoderLayer(8, 16, 0.0, "swish", 2, 2, 2), Error);
}

}  // namespace
}  // namespace tg
