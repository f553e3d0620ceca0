// Multi-scale deformable attention against Deformable-DETR's pure-PyTorch reference
// (tools/fixtures/ms_deform_attn.py), every output mask of the kernel API, determinism, and the
// error for each kind of bad input.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::load_golden_cases;

// The reference samples with grid_sample (its own order of sums): float64 agrees to rounding,
// float32 to a few ulps of the largest terms.
double rtol_for(DType dt) { return dt == DType::Float64 ? 1e-10 : 1e-4; }
double atol_for(DType dt) { return dt == DType::Float64 ? 1e-12 : 1e-5; }

TEST(MsDeformAttn, MatchesTheDeformableDetrReference) {
  auto cases = load_golden_cases("ms_deform_attn");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const double rtol = rtol_for(c.dtype()), atol = atol_for(c.dtype());
    Tensor value = c.tensor("value").requires_grad_();
    Tensor loc = c.tensor("sampling_locations").requires_grad_();
    Tensor attn = c.tensor("attention_weights").requires_grad_();
    Tensor out = ms_deform_attn(value, c.tensor("spatial_shapes"), c.tensor("level_start_index"), loc, attn);
    expect_close(out, c.tensor("output"), rtol, atol, "output");
    out.backward(c.tensor("grad_output"));
    expect_close(value.grad(), c.tensor("grad_value"), rtol, atol, "grad_value");
    expect_close(loc.grad(), c.tensor("grad_sampling_locations"), rtol, atol, "grad_sampling_locations");
    expect_close(attn.grad(), c.tensor("grad_attention_weights"), rtol, atol, "grad_attention_weights");
  }
}

TEST(MsDeformAttn, EveryOutputMaskComputesExactlyWhatIsAsked) {
  const auto c = load_golden_cases("ms_deform_attn").back();
  auto args = [&] {
    return std::make_tuple(c.tensor("value"), c.tensor("spatial_shapes"), c.tensor("level_start_index"),
                           c.tensor("sampling_locations"), c.tensor("attention_weights"), c.tensor("grad_output"));
  };
  auto [v, ss, lsi, loc, attn, g] = args();
  MsDeformAttnGrads all = ms_deform_attn_backward(v, ss, lsi, loc, attn, g, {true, true, true});
  for (int mask = 0; mask < 8; ++mask) {
    std::array<bool, 3> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    MsDeformAttnGrads r = ms_deform_attn_backward(v, ss, lsi, loc, attn, g, m);
    EXPECT_EQ(r.grad_value.defined(), m[0]);
    EXPECT_EQ(r.grad_sampling_locations.defined(), m[1]);
    EXPECT_EQ(r.grad_attention_weights.defined(), m[2]);
    if (m[0]) { EXPECT_TRUE(same_bits(r.grad_value, all.grad_value)) << mask; }
    if (m[1]) { EXPECT_TRUE(same_bits(r.grad_sampling_locations, all.grad_sampling_locations)) << mask; }
    if (m[2]) { EXPECT_TRUE(same_bits(r.grad_attention_weights, all.grad_attention_weights)) << mask; }
  }
}

TEST(MsDeformAttn, SameInputsSameBits) {
  manual_seed(11);
  // bs * heads = 2: few slices, but too few queries per key for the backward to cut them into
  // chunks (tests/test_thread_determinism.cpp runs the chunks, at 1, 2 and 3 threads).
  const int64_t bs = 1, q = 300, m = 2, c = 8, p = 4;
  Tensor ss = from_vector(std::vector<int64_t>{16, 16, 8, 8}, {2, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 256}, {2});
  Tensor v = randn({bs, 320, m, c}), loc = rand({bs, q, m, 2, p, 2}), attn = rand({bs, q, m, 2, p});
  Tensor g = randn({bs, q, m * c});
  MsDeformAttnGrads a = ms_deform_attn_backward(v, ss, lsi, loc, attn, g);
  MsDeformAttnGrads b = ms_deform_attn_backward(v, ss, lsi, loc, attn, g);
  EXPECT_TRUE(same_bits(a.grad_value, b.grad_value));
  EXPECT_TRUE(same_bits(a.grad_sampling_locations, b.grad_sampling_locations));
  EXPECT_TRUE(same_bits(a.grad_attention_weights, b.grad_attention_weights));
  EXPECT_TRUE(same_bits(ms_deform_attn(v, ss, lsi, loc, attn), ms_deform_attn(v, ss, lsi, loc, attn)));
}

TEST(MsDeformAttn, RejectsBadInputNamingTheArgument) {
  Tensor v = zeros({2, 20, 2, 4});
  Tensor ss = from_vector(std::vector<int64_t>{4, 4, 2, 2}, {2, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 16}, {2});
  Tensor loc = zeros({2, 3, 2, 2, 4, 2}), attn = zeros({2, 3, 2, 2, 4});
  EXPECT_NO_THROW(ms_deform_attn(v, ss, lsi, loc, attn));
  EXPECT_EQ(error_of([&] { ms_deform_attn(zeros({2, 20, 8}), ss, lsi, loc, attn); }),
            "ms_deform_attn: expected value of shape [bs, num_keys, heads, channels], got [2, 20, 8]");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, zeros({2, 3, 2, 2, 4, 3}), attn); }),
            "ms_deform_attn: expected sampling_locations of shape [bs, queries, heads, levels, points, 2], got [2, 3, "
            "2, 2, 4, 3]");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, zeros({1, 3, 2, 2, 4, 2}), zeros({1, 3, 2, 2, 4})); }),
            "ms_deform_attn: sampling_locations [1, 3, 2, 2, 4, 2] does not match value [2, 20, 2, 4] in bs or heads");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, loc, zeros({2, 3, 2, 2, 3})); }),
            "ms_deform_attn: expected attention_weights of shape [2, 3, 2, 2, 4], got [2, 3, 2, 2, 3]");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, from_vector(std::vector<int64_t>{4, 4, 3, 2}, {2, 2}), lsi, loc, attn); }),
            "ms_deform_attn: the levels hold 22 keys (sum of H*W over spatial_shapes), but value has num_keys = 20");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, from_vector(std::vector<int64_t>{0, 15}, {2}), loc, attn); }),
            "ms_deform_attn: level_start_index[1] is 15, but the levels before it hold 16 keys");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss.to(DType::Float32), lsi, loc, attn); }),
            "ms_deform_attn: expected spatial_shapes of dtype int64 or int32, got float32");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi.to(DType::Float64), loc, attn); }),
            "ms_deform_attn: expected level_start_index of dtype int64 or int32, got float64");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, loc.to(DType::Float64), attn); }),
            "ms_deform_attn: expected sampling_locations of value's dtype float32, got float64");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, zeros({3, 2}, DType::Int64), lsi, loc, attn); }),
            "ms_deform_attn: expected spatial_shapes of shape [2, 2] (levels, (H, W)), got [3, 2]");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, from_vector(std::vector<int64_t>{4, 4, 0, 2}, {2, 2}), lsi, loc, attn); }),
            "ms_deform_attn: expected positive level sizes, level 1 has (H, W) = (0, 2)");
  EXPECT_EQ(error_of([&] { ms_deform_attn_backward(v, ss, lsi, loc, attn, zeros({2, 3, 7})); }),
            "ms_deform_attn_backward: expected grad_output of shape [2, 3, 8], got [2, 3, 7]");
}

}  // namespace
}  // namespace tg
