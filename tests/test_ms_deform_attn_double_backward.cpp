// Second derivatives of multi-scale deformable attention. There is no oracle
// (Deformable-DETR has no double backward), so: gradgradcheck in float64 for every subset of the
// three differentiable inputs; a closed form for one sample (the location Hessian is the cross
// term a*W*H*(v_nw - v_ne - v_sw + v_se)); the double-backward kernel against the first-order
// kernels where the two must agree, with points on pixel borders and outside the levels; the
// same bits for 1, 2 and 3 threads; every output mask; and the errors.
#include <gtest/gtest.h>

#include <random>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using Levels = std::vector<std::pair<int64_t, int64_t>>;  // (H, W) per level

struct Case {
  Tensor value, shapes, start, loc, attn;
  std::vector<Tensor> inputs() const { return {value, shapes, start, loc, attn}; }
};

// Locations whose pixel coordinates stay 0.1 away from integers (bilinear's kinks, where finite
// differences of the first-order gradients would be wrong), some of them outside the level.
Tensor kink_free_locations(const Shape& shape, const Levels& levels, std::mt19937& rng) {
  const int64_t L = shape[3], P = shape[4];
  std::vector<double> d(static_cast<size_t>(shape[0] * shape[1] * shape[2] * L * P * 2));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t i = 0; i < d.size(); ++i) {
    const int64_t l = static_cast<int64_t>(i / (2 * P)) % L;
    const double size = static_cast<double>(i % 2 == 0 ? levels[l].second : levels[l].first);
    const double cell = std::floor(u(rng) * (size + 1)) - 1;  // -1 .. size-1
    d[i] = (cell + 0.1 + 0.8 * u(rng) + 0.5) / size;
  }
  return from_vector(d, shape);
}

Case make_case(int64_t bs, int64_t q, int64_t m, int64_t c, const Levels& levels, int64_t p, DType dt,
               uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  manual_seed(seed);
  std::vector<int64_t> hw, start;
  int64_t keys = 0;
  for (auto [h, w] : levels) {
    hw.insert(hw.end(), {h, w});
    start.push_back(keys);
    keys += h * w;
  }
  const int64_t L = static_cast<int64_t>(levels.size());
  return {randn({bs, keys, m, c}, dt), from_vector(hw, {L, 2}), from_vector(start, {L}),
          kink_free_locations({bs, q, m, L, p, 2}, levels, rng).to(dt), uniform({bs, q, m, L, p}, 0.1, 1.0, dt)};
}

std::vector<Tensor> run(const std::vector<Tensor>& x) { return {ms_deform_attn(x[0], x[1], x[2], x[3], x[4])}; }

TEST(MsDeformAttnDoubleBackward, GradgradcheckForEverySubsetOfTheInputs) {
  // Three levels (one of 1x1, so every point has corners outside), two heads, three points.
  const Case c = make_case(1, 2, 2, 3, {{3, 4}, {2, 3}, {1, 1}}, 3, DType::Float64, 5);
  const char* names[] = {"value", "sampling_locations", "attention_weights"};
  for (int mask = 1; mask < 8; ++mask) {
    std::vector<Tensor> x = c.inputs();
    std::string which;
    for (int k = 0; k < 3; ++k) {
      Tensor& t = x[k == 0 ? 0 : k + 2];
      t = t.detach().clone();
      if (mask & (1 << k)) {
        t.requires_grad_();
        which += std::string(which.empty() ? "" : ", ") + names[k];
      }
    }
    SCOPED_TRACE(which);
    GradcheckResult r = gradgradcheck(run, x);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// The forward saves its inputs with their history for the recorded backward: a value that is a
// transposed (non-contiguous) view of a leaf still gets its second derivatives.
TEST(MsDeformAttnDoubleBackward, GradgradcheckThroughANonContiguousValue) {
  Case c = make_case(2, 2, 2, 2, {{2, 3}, {2, 2}}, 2, DType::Float64, 6);
  Tensor value_mk = c.value.transpose(1, 2).contiguous().requires_grad_();  // (N, M, K, C)
  std::vector<Tensor> x{value_mk, c.shapes, c.start, c.loc.requires_grad_(), c.attn.requires_grad_()};
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor v = in[0].transpose(1, 2);
    EXPECT_FALSE(v.is_contiguous());
    return std::vector<Tensor>{ms_deform_attn(v, in[1], in[2], in[3], in[4])};
  };
  GradcheckResult r = gradgradcheck(fn, x);
  EXPECT_TRUE(r.ok) << r.message;
}

// One query, one level of 3x4, one head, one point inside a cell: with
// x = loc_x * W - 0.5 = 1.3 and y = loc_y * H - 0.5 = 0.6, the corners are keys nw 1, ne 2,
// sw 5, se 6, fx = 0.3, fy = 0.6, and for L = <go, out>:
//   d2L/dloc_x2 = d2L/dloc_y2 = 0,  d2L/dloc_x dloc_y = a * W * H * <go, v_nw - v_ne - v_sw + v_se>
//   d2L/dloc_x da = W * <go, (1 - fy)(v_ne - v_nw) + fy (v_se - v_sw)>
//   d2L/dloc_y da = H * <go, (1 - fx)(v_sw - v_nw) + fx (v_se - v_ne)>
//   d2L/dloc_x dv_k = a * W * dw_k/dfx * go   (dw/dfx: nw -(1-fy), ne 1-fy, sw -fy, se fy)
TEST(MsDeformAttnDoubleBackward, OneSampleMatchesTheClosedForm) {
  const int64_t H = 3, W = 4, C = 2;
  const double a = 0.7, x = 1.3, y = 0.6, fx = 0.3, fy = 0.6;
  manual_seed(3);
  Tensor value = randn({1, H * W, 1, C}, DType::Float64).requires_grad_();
  Tensor shapes = from_vector(std::vector<int64_t>{H, W}, {1, 2}), start = from_vector(std::vector<int64_t>{0}, {1});
  Tensor loc = from_vector(std::vector<double>{(x + 0.5) / W, (y + 0.5) / H}, {1, 1, 1, 1, 1, 2}).requires_grad_();
  Tensor attn = from_vector(std::vector<double>{a}, {1, 1, 1, 1, 1}).requires_grad_();
  Tensor go = from_vector(std::vector<double>{0.9, -1.7}, {1, 1, C});
  const std::vector<double> v = value.to_vector<double>();
  const std::vector<double> g = go.to_vector<double>();
  auto row = [&](int64_t key, int64_t c) { return v[static_cast<size_t>(key * C + c)]; };
  double cross = 0, dx = 0, dy = 0;
  for (int64_t c = 0; c < C; ++c) {
    cross += g[c] * (row(1, c) - row(2, c) - row(5, c) + row(6, c));
    dx += g[c] * ((1 - fy) * (row(2, c) - row(1, c)) + fy * (row(6, c) - row(5, c)));
    dy += g[c] * ((1 - fx) * (row(5, c) - row(1, c)) + fx * (row(6, c) - row(2, c)));
  }
  Tensor out = ms_deform_attn(value, shapes, start, loc, attn);
  Tensor gl = grad({out}, {loc}, {go}, false, false, /*create_graph=*/true)[0];
  const Tensor seed_x = from_vector(std::vector<double>{1, 0}, loc.shape());
  const Tensor seed_y = from_vector(std::vector<double>{0, 1}, loc.shape());
  std::vector<Tensor> hx = grad({gl}, {loc, attn, value}, {seed_x}, /*retain_graph=*/true);
  std::vector<Tensor> hy = grad({gl}, {loc, attn, value}, {seed_y});
  const std::vector<double> hxx = hx[0].to_vector<double>(), hyy = hy[0].to_vector<double>();
  EXPECT_EQ(hxx[0], 0.0);
  EXPECT_NEAR(hxx[1], a * W * H * cross, 1e-12);
  EXPECT_NEAR(hyy[0], a * W * H * cross, 1e-12);
  EXPECT_EQ(hyy[1], 0.0);
  EXPECT_NEAR(hx[1].item<double>(), W * dx, 1e-12);
  EXPECT_NEAR(hy[1].item<double>(), H * dy, 1e-12);
  const std::vector<double> hxv = hx[2].to_vector<double>();
  const double wx[4] = {-(1 - fy), 1 - fy, -fy, fy};
  const int64_t keys[4] = {1, 2, 5, 6};
  for (int k = 0; k < 4; ++k)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(hxv[static_cast<size_t>(keys[k] * C + c)], a * W * wx[k] * g[c], 1e-12) << k << " " << c;
  double rest = 0;
  for (size_t i = 0; i < hxv.size(); ++i) rest += std::abs(hxv[i]);
  for (int k = 0; k < 4; ++k)
    for (int64_t c = 0; c < C; ++c) rest -= std::abs(hxv[static_cast<size_t>(keys[k] * C + c)]);
  EXPECT_NEAR(rest, 0.0, 1e-12) << "d2L/dloc_x dvalue outside the four corners";
}

// Locations on pixel borders (integer pixel coordinates, exact with power-of-two sizes), on the
// level's edges and outside it: where the double-backward kernel's terms equal first-order
// quantities, they must agree, so it picks the corners the first-order kernels pick.
TEST(MsDeformAttnDoubleBackward, BordersAndOutsideAsTheFirstOrderKernels) {
  const int64_t bs = 2, q = 5, m = 2, c = 3, p = 4;
  const Levels levels{{4, 4}, {2, 2}};
  const std::vector<double> xs{0.0, 0.125, 0.375, 0.5, 1.0, 0.875, -0.25, -0.125, 1.125, 1.25, 0.3};
  std::mt19937 rng(9);
  const Shape loc_shape{bs, q, m, 2, p, 2};
  std::vector<double> d(static_cast<size_t>(bs * q * m * 2 * p * 2));
  for (double& e : d) e = xs[rng() % xs.size()];
  Case cs = make_case(bs, q, m, c, levels, p, DType::Float64, 9);
  Tensor loc = from_vector(d, loc_shape);
  Tensor go = randn({bs, q, m * c}, DType::Float64), ones_attn = ones_like(cs.attn);
  const double rtol = 1e-12, atol = 1e-12;
  {
    // gg_value = value: d/dattn = grad_attn, d/dloc = grad_loc, d/dgo = the output, d/dvalue = 0.
    MsDeformAttnGrads first = ms_deform_attn_backward(cs.value, cs.shapes, cs.start, loc, cs.attn, go);
    MsDeformAttnDoubleGrads r =
        ms_deform_attn_double_backward(cs.value, cs.shapes, cs.start, loc, cs.attn, go, cs.value, Tensor(), Tensor());
    expect_close(r.grad_attention_weights, first.grad_attention_weights, rtol, atol, "d/dattn");
    expect_close(r.grad_sampling_locations, first.grad_sampling_locations, rtol, atol, "d/dloc");
    expect_close(r.grad_grad_output, ms_deform_attn(cs.value, cs.shapes, cs.start, loc, cs.attn), rtol, atol, "d/dgo");
    EXPECT_TRUE(same_bits(r.grad_value, zeros_like(cs.value)));
  }
  {
    // gg_attn = 1: d/dloc, d/dvalue and d/dgo are grad_loc, grad_value and the output with a = 1.
    MsDeformAttnGrads first = ms_deform_attn_backward(cs.value, cs.shapes, cs.start, loc, ones_attn, go);
    MsDeformAttnDoubleGrads r = ms_deform_attn_double_backward(cs.value, cs.shapes, cs.start, loc, cs.attn, go,
                                                               Tensor(), Tensor(), ones_attn);
    expect_close(r.grad_sampling_locations, first.grad_sampling_locations, rtol, atol, "d/dloc");
    expect_close(r.grad_value, first.grad_value, rtol, atol, "d/dvalue");
    expect_close(r.grad_grad_output, ms_deform_attn(cs.value, cs.shapes, cs.start, loc, ones_attn), rtol, atol,
                 "d/dgo");
    EXPECT_TRUE(same_bits(r.grad_attention_weights, zeros_like(cs.attn)));
  }
}

struct BigCase {
  Case c;
  Tensor go, gg_value, gg_loc, gg_attn;
};

// Big enough for the kernel to run in parallel; bs * heads = 2 slices, fewer than 3 threads.
BigCase big_case(DType dt) {
  BigCase b{make_case(1, 200, 2, 8, {{8, 8}, {4, 4}}, 4, dt, 21), {}, {}, {}, {}};
  b.go = randn({1, 200, 16}, dt);
  b.gg_value = randn(b.c.value.shape(), dt);
  b.gg_loc = randn(b.c.loc.shape(), dt);
  b.gg_attn = randn(b.c.attn.shape(), dt);
  return b;
}

MsDeformAttnDoubleGrads run_big(const BigCase& b, std::array<bool, 4> mask) {
  return ms_deform_attn_double_backward(b.c.value, b.c.shapes, b.c.start, b.c.loc, b.c.attn, b.go, b.gg_value,
                                        b.gg_loc, b.gg_attn, mask);
}

std::vector<Tensor> all_of(const MsDeformAttnDoubleGrads& r) {
  return {r.grad_grad_output, r.grad_value, r.grad_sampling_locations, r.grad_attention_weights};
}

TEST(MsDeformAttnDoubleBackward, SameBitsForOneTwoAndThreeThreads) {
  const int saved = num_threads();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const BigCase b = big_case(dt);
    // With grad_value the slices are the tasks; without it, blocks of queries.
    for (std::array<bool, 4> mask : {std::array<bool, 4>{true, true, true, true}, {true, false, true, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (mask[1] ? ", all outputs" : ", no grad_value"));
      set_num_threads(1);
      const std::vector<Tensor> one = all_of(run_big(b, mask));
      for (int t : {2, 3, 2}) {
        set_num_threads(t);
        const std::vector<Tensor> r = all_of(run_big(b, mask));
        for (size_t i = 0; i < r.size(); ++i) {
          if (!mask[i]) continue;
          EXPECT_TRUE(same_bits(r[i], one[i])) << t << " threads vs 1, output " << i;
        }
      }
    }
  }
  set_num_threads(saved);
}

TEST(MsDeformAttnDoubleBackward, EveryOutputMaskComputesExactlyWhatIsAsked) {
  const BigCase b = big_case(DType::Float64);
  const std::vector<Tensor> all = all_of(run_big(b, {true, true, true, true}));
  for (int mask = 0; mask < 16; ++mask) {
    const std::array<bool, 4> m{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0, (mask & 8) != 0};
    const std::vector<Tensor> r = all_of(run_big(b, m));
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(r[i].defined(), m[i]) << mask << " " << i;
      if (m[i]) { EXPECT_TRUE(same_bits(r[i], all[i])) << mask << " " << i; }
    }
  }
}

TEST(MsDeformAttnDoubleBackward, Float32MatchesFloat64) {
  const BigCase b = big_case(DType::Float64);
  auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
  const std::vector<Tensor> r64 = all_of(run_big(b, {true, true, true, true}));
  const std::vector<Tensor> r32 = all_of(ms_deform_attn_double_backward(
      f32(b.c.value), b.c.shapes, b.c.start, f32(b.c.loc), f32(b.c.attn), f32(b.go), f32(b.gg_value), f32(b.gg_loc),
      f32(b.gg_attn)));
  const char* names[] = {"d/dgrad_output", "d/dvalue", "d/dloc", "d/dattn"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r32[i].dtype(), DType::Float32);
    expect_close(r32[i].to(DType::Float64), r64[i], 1e-4, 1e-3, names[i]);
  }
}

// Under create_graph the first-order gradients come from the same kernel: the same bits.
TEST(MsDeformAttnDoubleBackward, CreateGraphLeavesTheFirstOrderGradientsAsTheyWere) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    BigCase b = big_case(dt);
    std::vector<Tensor> x{b.c.value.requires_grad_(), b.c.loc.requires_grad_(), b.c.attn.requires_grad_()};
    Tensor out = ms_deform_attn(x[0], b.c.shapes, b.c.start, x[1], x[2]);
    std::vector<Tensor> plain = grad({out}, x, {b.go}, /*retain_graph=*/true);
    std::vector<Tensor> recorded = grad({out}, x, {b.go}, false, false, /*create_graph=*/true);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_FALSE(plain[i].requires_grad());
      EXPECT_TRUE(recorded[i].requires_grad());
      EXPECT_TRUE(same_bits(plain[i], recorded[i])) << dtype_name(dt) << " input " << i;
    }
  }
}

TEST(MsDeformAttnDoubleBackward, ThirdDerivativesAreAnErrorNamingTheOp) {
  Case c = make_case(1, 2, 1, 2, {{3, 4}}, 2, DType::Float64, 4);
  Tensor loc = c.loc.requires_grad_();
  Tensor out = ms_deform_attn(c.value, c.shapes, c.start, loc, c.attn);
  Tensor gl = grad({out}, {loc}, {ones_like(out)}, false, false, /*create_graph=*/true)[0];
  const std::string msg = error_of([&] { grad({gl}, {loc}, {ones_like(gl)}, false, true, /*create_graph=*/true); });
  EXPECT_NE(msg.find("ms_deform_attn_backward_backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("create_graph"), std::string::npos) << msg;
}

TEST(MsDeformAttnDoubleBackward, RejectsBadInputNamingTheArgument) {
  Tensor v = zeros({2, 20, 2, 4});
  Tensor ss = from_vector(std::vector<int64_t>{4, 4, 2, 2}, {2, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 16}, {2});
  Tensor loc = zeros({2, 3, 2, 2, 4, 2}), attn = zeros({2, 3, 2, 2, 4}), go = zeros({2, 3, 8});
  auto call = [&](const Tensor& value, const Tensor& g, const Tensor& ggv, const Tensor& ggl, const Tensor& gga) {
    return error_of([&] { ms_deform_attn_double_backward(value, ss, lsi, loc, attn, g, ggv, ggl, gga); });
  };
  EXPECT_EQ(call(v, go, v, loc, attn), "<no error>");
  EXPECT_EQ(call(v, go, Tensor(), Tensor(), Tensor()), "<no error>");
  EXPECT_EQ(call(zeros({2, 20, 8}), go, Tensor(), Tensor(), Tensor()),
            "ms_deform_attn_double_backward: expected value of shape [bs, num_keys, heads, channels], got [2, 20, 8]");
  EXPECT_EQ(call(v, zeros({2, 3, 7}), Tensor(), Tensor(), Tensor()),
            "ms_deform_attn_double_backward: expected grad_output of shape [2, 3, 8], got [2, 3, 7]");
  EXPECT_EQ(call(v, go.to(DType::Float64), Tensor(), Tensor(), Tensor()),
            "ms_deform_attn_double_backward: expected grad_output of value's dtype float32, got float64");
  EXPECT_EQ(call(v, go, zeros({2, 20, 2, 3}), Tensor(), Tensor()),
            "ms_deform_attn_double_backward: expected grad_grad_value of shape [2, 20, 2, 4], got [2, 20, 2, 3]");
  EXPECT_EQ(call(v, go, Tensor(), zeros({2, 3, 2, 2, 4, 2}, DType::Float64), Tensor()),
            "ms_deform_attn_double_backward: expected grad_grad_sampling_locations of value's dtype float32, got float64");
  EXPECT_EQ(call(v, go, Tensor(), Tensor(), zeros({2, 3, 2, 2, 5})),
            "ms_deform_attn_double_backward: expected grad_grad_attention_weights of shape [2, 3, 2, 2, 4], got [2, "
            "3, 2, 2, 5]");
}

}  // namespace
}  // namespace tg
