// grid_sample, affine_grid and multi-scale deformable attention in bfloat16 and float16 (issue
// 22), against the fixtures of tools/fixtures/half_gsmsda.py (tests/data/half/gsmsda).
//
// What is checked, per case and dtype:
//  * the forward output and every input gradient against PyTorch's 16-bit result ("ref16":
//    PyTorch float32 on the 16-bit-exact inputs rounded once, where PyTorch 1.13 has no 16-bit
//    CPU kernel, which is every case but affine_grid in bfloat16; see the script). Tolerance,
//    with u the dtype's unit roundoff (bf16 2^-9, fp16 2^-12):
//        |ours - ref16| <= 2u |ref16| + k u max|ref16|
//    2u |ref16| is one unit in the last place: both sides are float32 computations rounded
//    once, whose float32 values differ in the order of their sums (~2^-24 relative to the sum
//    of the terms), which can put them on either side of a rounding boundary. k u max|ref16|
//    covers that float32 difference on elements that cancel (k = 2), and for PyTorch's own
//    bfloat16 affine_grid (k = 8) its base grid rounded to bfloat16 and its bfloat16 sums.
//  * no further from the float64 answer (PyTorch float64 on the same exact inputs) than
//    PyTorch's 16-bit result is: ||ours - ref64|| <= 1.25 ||ref16 - ref64|| + 2^-24 ||ref64||
//    (2-norms per tensor). Both round each element once from float32, so their errors have
//    the same size; 1.25 leaves room for the few elements that round the other way.
//  * gradients come back in the inputs' dtype; int32 and int64 spatial shapes give the same
//    bits; the kernel-level API (grid_sampler_2d_backward with an output mask, the double
//    backwards, affine_grid_generator_backward, ms_deform_attn_backward) agrees with the tape;
//    mixed dtypes and hostile int32 tables are the tg::Errors of int64.
// Double backward has no PyTorch reference (PyTorch 1.13 has none for grid_sample): its 16-bit
// result is checked to be the float32 one rounded once, bit for bit, and against tapegrad's
// float64 double backward: |ours - f64| <= 2u |f64| + 4u max|f64| (the rounding, plus room
// for the double backward kernels' float32 sums, whose terms cancel more than the first-order
// ones). Measured (printed as [half] / [half2] lines): every float32-referenced case matches
// PyTorch's 16-bit result exactly; PyTorch's own bfloat16 affine_grid differs by up to 0.005
// max|ref16| and is the further of the two from float64.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::GoldenCase;

constexpr const char* kTopic = "half/gsmsda";

DType half_dtype(const GoldenCase& c) {
  return c.json["dtype"].get<std::string>() == "bfloat16" ? DType::BFloat16 : DType::Float16;
}

double unit_roundoff(DType dt) { return dt == DType::BFloat16 ? 0x1p-9 : 0x1p-12; }

// A stored 16-bit tensor (kept as float32, exact) back in its dtype.
Tensor load16(const GoldenCase& c, const std::string& key) { return c.tensor(key).to(half_dtype(c)); }

// The references of a case, split by "outputs" / "shapes" out of the flat ref16 or ref64.
std::vector<Tensor> references(const GoldenCase& c, const std::string& key) {
  std::vector<double> all = c.tensor(key).to(DType::Float64).to_vector<double>();
  std::vector<Tensor> out;
  size_t at = 0;
  for (const auto& s : c.json["shapes"]) {
    Shape shape = s.get<Shape>();
    const size_t n = static_cast<size_t>(shape_numel(shape));
    out.push_back(from_vector(std::vector<double>(all.begin() + at, all.begin() + at + n), shape));
    at += n;
  }
  EXPECT_EQ(at, all.size()) << c.name();
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double norm_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

// The comparisons of the file's header for one tensor; prints the errors (the report's table).
void check_against_references(const std::string& what, const Tensor& ours, DType dt, const Tensor& ref16,
                              const Tensor& ref64, double k) {
  ASSERT_TRUE(ours.defined()) << what;
  EXPECT_EQ(ours.dtype(), dt) << what << ": comes back in " << dtype_name(ours.dtype());
  const double u = unit_roundoff(dt);
  const std::vector<double> a = values(ours), e16 = values(ref16), e64 = values(ref64);
  const double scale = max_abs(e16);
  testing::expect_close(ours, ref16, 2 * u, k * u * scale, what + " vs PyTorch 16-bit");
  const double zero = 0, n64 = norm_diff(e64, std::vector<double>(e64.size(), zero));
  const double ours64 = norm_diff(a, e64), torch64 = norm_diff(e16, e64);
  EXPECT_LE(ours64, 1.25 * torch64 + 0x1p-24 * n64)
      << what << ": further from float64 than PyTorch's 16-bit result (" << ours64 << " vs " << torch64 << ")";
  double worst16 = 0, worst64 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst16 = std::max(worst16, std::abs(a[i] - e16[i]));
    worst64 = std::max(worst64, std::abs(a[i] - e64[i]));
  }
  const double m64 = std::max(max_abs(e64), 1e-300);
  std::printf("[half] %-44s max|ours-torch16|/max %.3g  max|ours-f64|/max %.3g  |ours-f64| %.3g  |torch16-f64| %.3g "
              "(2-norms / |f64|)\n",
              what.c_str(), worst16 / std::max(scale, 1e-300), worst64 / m64, ours64 / std::max(n64, 1e-300),
              torch64 / std::max(n64, 1e-300));
}

// The double backwards have no PyTorch reference: against tapegrad's float64 result on the same
// exact inputs, |ours - f64| <= 2u |f64| + 4u max|f64| (the 2-norm error is printed too).
void check_against_float64(const std::string& what, const Tensor& ours, DType dt, const Tensor& f64) {
  ASSERT_TRUE(ours.defined()) << what;
  EXPECT_EQ(ours.dtype(), dt) << what;
  const double u = unit_roundoff(dt);
  const std::vector<double> a = values(ours), e = values(f64);
  const double scale = max_abs(e);
  testing::expect_close(ours, f64, 2 * u, 4 * u * scale, what + " vs float64");
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
  const double n = norm_diff(e, std::vector<double>(e.size(), 0.0));
  std::printf("[half2] %-52s max|ours-f64|/max %.3g  |ours-f64| %.3g (2-norm / |f64|)\n", what.c_str(),
              worst / std::max(scale, 1e-300), norm_diff(a, e) / std::max(n, 1e-300));
}

std::vector<GoldenCase> cases_of(const std::string& op) {
  std::vector<GoldenCase> out;
  for (GoldenCase& c : testing::load_golden_cases(kTopic))
    if (c.json["op"].get<std::string>() == op) out.push_back(c);
  return out;
}

GridSampleMode mode_of(const GoldenCase& c) {
  return c.json["mode"].get<std::string>() == "nearest" ? GridSampleMode::Nearest : GridSampleMode::Bilinear;
}

GridSamplePadding padding_of(const GoldenCase& c) {
  const std::string p = c.json["padding_mode"].get<std::string>();
  return p == "zeros" ? GridSamplePadding::Zeros : p == "border" ? GridSamplePadding::Border
                                                                 : GridSamplePadding::Reflection;
}

TEST(HalfGridSample, ForwardAndGradientsMatchPyTorchAndFloat64) {
  const auto cases = cases_of("grid_sample");
  ASSERT_EQ(cases.size(), 24u);
  for (const GoldenCase& c : cases) {
    const DType dt = half_dtype(c);
    const bool ac = c.json["align_corners"].get<bool>();
    Tensor input = load16(c, "input").requires_grad_(), grid = load16(c, "grid").requires_grad_();
    Tensor go = load16(c, "grad_output");
    Tensor out = grid_sample(input, grid, mode_of(c), padding_of(c), ac);
    out.backward(go);
    const auto r16 = references(c, "ref16"), r64 = references(c, "ref64");
    check_against_references(c.name() + " output", out, dt, r16[0], r64[0], 2);
    check_against_references(c.name() + " grad_input", input.grad(), dt, r16[1], r64[1], 2);
    check_against_references(c.name() + " grad_grid", grid.grad(), dt, r16[2], r64[2], 2);

    // The kernel API, each gradient alone (output mask), gives the tape's bits.
    const int64_t m = static_cast<int64_t>(mode_of(c)), p = static_cast<int64_t>(padding_of(c));
    GridSampleGrads only_input = grid_sampler_2d_backward(go, input.detach(), grid.detach(), m, p, ac, {true, false});
    GridSampleGrads only_grid = grid_sampler_2d_backward(go, input.detach(), grid.detach(), m, p, ac, {false, true});
    EXPECT_FALSE(only_input.grad_grid.defined()) << c.name();
    EXPECT_FALSE(only_grid.grad_input.defined()) << c.name();
    EXPECT_TRUE(same_bits(only_input.grad_input, input.grad())) << c.name();
    EXPECT_TRUE(same_bits(only_grid.grad_grid, grid.grad())) << c.name();
    EXPECT_EQ(only_grid.grad_grid.dtype(), dt) << c.name();
    EXPECT_TRUE(same_bits(grid_sampler_2d(input.detach(), grid.detach(), m, p, ac), out)) << c.name();
  }
}

TEST(HalfGridSample, DoubleBackwardIsTheFloat32OneRoundedOnceAndCloseToFloat64) {
  for (const GoldenCase& c : cases_of("grid_sample")) {
    if (mode_of(c) != GridSampleMode::Bilinear) continue;
    const DType dt = half_dtype(c);
    const bool ac = c.json["align_corners"].get<bool>();
    const int64_t m = 0, p = static_cast<int64_t>(padding_of(c));
    Tensor input = load16(c, "input"), grid = load16(c, "grid"), go = load16(c, "grad_output");
    // A 16-bit-exact upstream gradient of grad_grid.
    Tensor gg = add(mul(grid.to(DType::Float32), -1.5), 0.25).to(dt);
    auto run = [&](DType as) {
      return grid_sampler_2d_double_backward(go.to(as), input.to(as), grid.to(as), gg.to(as), m, p, ac);
    };
    GridSampleDoubleGrads h = run(dt), f = run(DType::Float32), d = run(DType::Float64);
    const std::vector<std::pair<Tensor, Tensor>> pairs{
        {h.grad_grad_output, f.grad_grad_output}, {h.grad_input, f.grad_input}, {h.grad_grid, f.grad_grid}};
    for (const auto& [half, single] : pairs) {
      EXPECT_EQ(half.dtype(), dt) << c.name();
      EXPECT_TRUE(same_bits(half, single.to(dt))) << c.name();
    }
    check_against_float64(c.name() + " 2nd grad_grad_output", h.grad_grad_output, dt, d.grad_grad_output);
    check_against_float64(c.name() + " 2nd grad_input", h.grad_input, dt, d.grad_input);
    check_against_float64(c.name() + " 2nd grad_grid", h.grad_grid, dt, d.grad_grid);

    // Through the tape (create_graph): the gradient of <gg, grad_grid> in grid. (Only grid
    // requires grad: with input too, the tape sums two second-order terms with tg::add, which
    // computes 16-bit tensors only once the core ops learn them.)
    auto second = [&](DType as) {
      Tensor g = grid.to(as).detach().requires_grad_();
      Tensor out = grid_sample(input.to(as), g, GridSampleMode::Bilinear, padding_of(c), ac);
      std::vector<Tensor> first = tg::grad({out}, {g}, {go.to(as)}, false, true, true);
      return tg::grad({first[0]}, {g}, {gg.to(as)}, false, true, false)[0];
    };
    Tensor sh = second(dt), sd = second(DType::Float64);
    ASSERT_TRUE(sh.defined()) << c.name();
    EXPECT_EQ(sh.dtype(), dt) << c.name();
    EXPECT_TRUE(same_bits(sh, h.grad_grid)) << c.name();
    check_against_float64(c.name() + " create_graph 2nd grid", sh, dt, sd);
  }
}

TEST(HalfAffineGrid, ForwardAndGradientMatchPyTorchAndFloat64) {
  const auto cases = cases_of("affine_grid");
  ASSERT_EQ(cases.size(), 4u);
  for (const GoldenCase& c : cases) {
    const DType dt = half_dtype(c);
    const bool ac = c.json["align_corners"].get<bool>();
    const double k = c.json["native"].get<bool>() ? 8 : 2;
    const std::vector<int64_t> size = c.json["size"].get<std::vector<int64_t>>();
    Tensor theta = load16(c, "theta").requires_grad_(), gg = load16(c, "grad_output");
    Tensor grid = affine_grid(theta, size, ac);
    grid.backward(gg);
    const auto r16 = references(c, "ref16"), r64 = references(c, "ref64");
    check_against_references(c.name() + " output", grid, dt, r16[0], r64[0], k);
    check_against_references(c.name() + " grad_theta", theta.grad(), dt, r16[1], r64[1], k);
    EXPECT_TRUE(same_bits(affine_grid_generator_backward(gg, size, ac), theta.grad())) << c.name();
  }
}

// The MSDA case's inputs with the level tables in `index` (int64 or int32).
struct MsdaInputs {
  Tensor value, shapes, start, loc, attn, go;
};

MsdaInputs msda_inputs(const GoldenCase& c, DType index) {
  return {load16(c, "value").requires_grad_(), c.tensor("spatial_shapes").to(index),
          c.tensor("level_start_index").to(index), load16(c, "sampling_locations").requires_grad_(),
          load16(c, "attention_weights").requires_grad_(), load16(c, "grad_output")};
}

TEST(HalfMsDeformAttn, ForwardAndGradientsMatchPyTorchAndFloat64WithInt32AndInt64Shapes) {
  const auto cases = cases_of("ms_deform_attn");
  ASSERT_EQ(cases.size(), 2u);
  for (const GoldenCase& c : cases) {
    const DType dt = half_dtype(c);
    std::vector<std::vector<Tensor>> results;
    for (DType index : {DType::Int64, DType::Int32}) {
      MsdaInputs in = msda_inputs(c, index);
      EXPECT_EQ(in.shapes.dtype(), index);
      Tensor out = ms_deform_attn(in.value, in.shapes, in.start, in.loc, in.attn);
      out.backward(in.go);
      results.push_back({out, in.value.grad(), in.loc.grad(), in.attn.grad()});
      // The kernel API, with an output mask, gives the tape's bits.
      MsDeformAttnGrads k = ms_deform_attn_backward(in.value.detach(), in.shapes, in.start, in.loc.detach(),
                                                    in.attn.detach(), in.go, {false, true, true});
      EXPECT_FALSE(k.grad_value.defined());
      EXPECT_TRUE(same_bits(k.grad_sampling_locations, in.loc.grad())) << c.name();
      EXPECT_TRUE(same_bits(k.grad_attention_weights, in.attn.grad())) << c.name();
    }
    const auto r16 = references(c, "ref16"), r64 = references(c, "ref64");
    const char* names[] = {" output", " grad_value", " grad_sampling_locations", " grad_attention_weights"};
    for (size_t i = 0; i < 4; ++i) {
      check_against_references(c.name() + names[i], results[0][i], dt, r16[i], r64[i], 2);
      EXPECT_TRUE(same_bits(results[0][i], results[1][i])) << c.name() << names[i] << ": int32 and int64 differ";
    }
  }
}

TEST(HalfMsDeformAttn, DoubleBackwardIsTheFloat32OneRoundedOnceAndCloseToFloat64) {
  for (const GoldenCase& c : cases_of("ms_deform_attn")) {
    const DType dt = half_dtype(c);
    MsdaInputs in = msda_inputs(c, DType::Int32);
    Tensor value = in.value.detach(), loc = in.loc.detach(), attn = in.attn.detach();
    // 16-bit-exact upstream gradients of the three first-order gradients.
    Tensor ggv = add(mul(value.to(DType::Float32), -0.75), 0.125).to(dt);
    Tensor ggl = add(mul(loc.to(DType::Float32), 2.0), -1.0).to(dt);
    Tensor gga = add(attn.to(DType::Float32), -0.5).to(dt);
    auto run = [&](DType as, DType index) {
      return ms_deform_attn_double_backward(value.to(as), in.shapes.to(index), in.start.to(index), loc.to(as),
                                            attn.to(as), in.go.to(as), ggv.to(as), ggl.to(as), gga.to(as));
    };
    MsDeformAttnDoubleGrads h = run(dt, DType::Int32), h64 = run(dt, DType::Int64);
    MsDeformAttnDoubleGrads f = run(DType::Float32, DType::Int64), d = run(DType::Float64, DType::Int64);
    const std::vector<std::array<Tensor, 4>> rows{
        {h.grad_grad_output, h64.grad_grad_output, f.grad_grad_output, d.grad_grad_output},
        {h.grad_value, h64.grad_value, f.grad_value, d.grad_value},
        {h.grad_sampling_locations, h64.grad_sampling_locations, f.grad_sampling_locations,
         d.grad_sampling_locations},
        {h.grad_attention_weights, h64.grad_attention_weights, f.grad_attention_weights, d.grad_attention_weights}};
    const char* names[] = {" 2nd grad_grad_output", " 2nd grad_value", " 2nd grad_sampling_locations",
                           " 2nd grad_attention_weights"};
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      EXPECT_TRUE(same_bits(r[0], r[1])) << c.name() << ": int32 and int64 differ";
      EXPECT_TRUE(same_bits(r[0], r[2].to(dt))) << c.name() << ": not the float32 result rounded once";
      check_against_float64(c.name() + names[i], r[0], dt, r[3]);
    }
    // Through the tape (create_graph), 16-bit end to end: the gradients of
    // <ggl, grad_sampling_locations> are the double backward's for that upstream alone.
    auto second = [&](DType as) {
      Tensor v = value.to(as).detach().requires_grad_(), l = loc.to(as).detach().requires_grad_();
      Tensor a = attn.to(as).detach().requires_grad_();
      Tensor out = ms_deform_attn(v, in.shapes, in.start, l, a);
      std::vector<Tensor> first = tg::grad({out}, {v, l, a}, {in.go.to(as)}, false, true, true);
      return tg::grad({first[1]}, {v, l, a}, {ggl.to(as)}, false, true, false);
    };
    std::vector<Tensor> sh = second(dt), sd = second(DType::Float64);
    for (size_t i = 0; i < sh.size(); ++i)
      check_against_float64(c.name() + " create_graph" + names[i + 1], sh[i], dt, sd[i]);
  }
}

TEST(HalfGridSampleMsda, MixedFloatingDtypesAreErrorsNamingTheArgument) {
  Tensor x = zeros({1, 2, 3, 4}, DType::BFloat16), grid = zeros({1, 2, 2, 2}, DType::BFloat16);
  EXPECT_EQ(error_of([&] { grid_sample(x, grid.to(DType::Float32)); }),
            "grid_sample: expected grid of input's dtype bfloat16, got float32");
  EXPECT_EQ(error_of([&] { grid_sample(x.to(DType::Float16), grid); }),
            "grid_sample: expected grid of input's dtype float16, got bfloat16");
  EXPECT_EQ(error_of([&] { grid_sampler_2d_backward(zeros({1, 2, 2, 2}), x, grid, 0, 0, false); }),
            "grid_sampler_2d_backward: expected grad_output of input's dtype bfloat16, got float32");
  EXPECT_EQ(error_of([&] {
              grid_sampler_2d_double_backward(zeros({1, 2, 2, 2}, DType::BFloat16), x, grid,
                                              zeros({1, 2, 2, 2}, DType::Float16), 0, 0, false);
            }),
            "grid_sampler_2d_double_backward: expected gg_grid of input's dtype bfloat16, got float16");

  const Tensor ss = from_vector(std::vector<int32_t>{2, 2, 1, 1}, {2, 2});
  const Tensor lsi = from_vector(std::vector<int32_t>{0, 4}, {2});
  Tensor v = zeros({1, 5, 1, 2}, DType::BFloat16), loc = zeros({1, 3, 1, 2, 1, 2}, DType::BFloat16);
  Tensor attn = zeros({1, 3, 1, 2, 1}, DType::BFloat16), go = zeros({1, 3, 2}, DType::BFloat16);
  EXPECT_NO_THROW(ms_deform_attn(v, ss, lsi, loc, attn));
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, loc.to(DType::Float32), attn); }),
            "ms_deform_attn: expected sampling_locations of value's dtype bfloat16, got float32");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss, lsi, loc, attn.to(DType::Float16)); }),
            "ms_deform_attn: expected attention_weights of value's dtype bfloat16, got float16");
  EXPECT_EQ(error_of([&] { ms_deform_attn_backward(v, ss, lsi, loc, attn, go.to(DType::Float32)); }),
            "ms_deform_attn_backward: expected grad_output of value's dtype bfloat16, got float32");
  EXPECT_EQ(error_of([&] { ms_deform_attn_double_backward(v, ss, lsi, loc, attn, go, v.to(DType::Float32), {}, {}); }),
            "ms_deform_attn_double_backward: expected grad_grad_value of value's dtype bfloat16, got float32");
  EXPECT_EQ(error_of([&] { ms_deform_attn(v, ss.to(DType::BFloat16), lsi, loc, attn); }),
            "ms_deform_attn: expected spatial_shapes of dtype int64 or int32, got bfloat16");
}

// Hostile int32 tables fail exactly as the same values in int64 do (they are read as int64).
TEST(HalfGridSampleMsda, HostileInt32ShapesGiveTheErrorsOfInt64) {
  const int32_t big = 2147483647;
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> tables{
      {{-2, 2, 1, 1}, {0, 4}},                       // a negative height
      {{2, 2, 1, 1}, {0, -4}},                       // a negative level start
      {{65536, 65536, 1, 1}, {0, 0}},                // H*W = 2^32 wraps to 0 in int32
      {{big, big, big, big}, {0, 0}},                // H*W near 2^62
  };
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> three{
      {{big, big, big, big, big, big}, {0, 0, 0}}};  // the sum of H*W overflows int64
  Tensor v = zeros({1, 5, 1, 2}, DType::Float16);
  auto check = [&](const std::vector<int32_t>& hw, const std::vector<int32_t>& start) {
    const int64_t L = static_cast<int64_t>(start.size());
    Tensor loc = zeros({1, 3, 1, L, 1, 2}, DType::Float16), attn = zeros({1, 3, 1, L, 1}, DType::Float16);
    Tensor ss32 = from_vector(hw, {L, 2}), lsi32 = from_vector(start, {L});
    const std::string e32 = error_of([&] { ms_deform_attn(v, ss32, lsi32, loc, attn); });
    const std::string e64 =
        error_of([&] { ms_deform_attn(v, ss32.to(DType::Int64), lsi32.to(DType::Int64), loc, attn); });
    EXPECT_NE(e32, "<no error>");
    EXPECT_EQ(e32, e64);
    const std::string b32 = error_of([&] { ms_deform_attn_backward(v, ss32, lsi32, loc, attn, zeros({1, 3, 2})); });
    EXPECT_NE(b32.find("ms_deform_attn_backward: "), std::string::npos) << b32;
  };
  for (const auto& [hw, start] : tables) check(hw, start);
  for (const auto& [hw, start] : three) check(hw, start);
  // Mixed int32 and int64 tables are fine (each is read as int64).
  Tensor loc = zeros({1, 3, 1, 2, 1, 2}, DType::Float16), attn = zeros({1, 3, 1, 2, 1}, DType::Float16);
  EXPECT_NO_THROW(ms_deform_attn(v, from_vector(std::vector<int32_t>{2, 2, 1, 1}, {2, 2}),
                                 from_vector(std::vector<int64_t>{0, 4}, {2}), loc, attn));
}

// Strided 16-bit views go through the same widening copy: the results are those of their
// contiguous copies, bit for bit, and an empty batch gives empty results.
TEST(HalfGridSampleMsda, NonContiguousAndEmptyInputs) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Tensor x = randn({2, 3, 5, 4}).to(dt).transpose(2, 3), grid = (0.6 * randn({2, 3, 4, 2})).to(dt);
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_TRUE(same_bits(grid_sample(x, grid), grid_sample(x.contiguous(), grid)));
    Tensor go = randn({2, 3, 3, 4}).to(dt);
    GridSampleGrads a = grid_sampler_2d_backward(go, x, grid, 0, 1, true);
    GridSampleGrads b = grid_sampler_2d_backward(go, x.contiguous(), grid, 0, 1, true);
    EXPECT_TRUE(same_bits(a.grad_input, b.grad_input));
    EXPECT_TRUE(same_bits(a.grad_grid, b.grad_grid));
    Tensor theta = randn({2, 3, 2}).to(dt).transpose(1, 2);
    EXPECT_TRUE(same_bits(affine_grid(theta, {2, 1, 3, 4}), affine_grid(theta.contiguous(), {2, 1, 3, 4})));
    EXPECT_EQ(grid_sample(zeros({0, 3, 5, 4}, dt), zeros({0, 3, 4, 2}, dt)).dtype(), dt);

    const Tensor ss = from_vector(std::vector<int32_t>{2, 2, 1, 3}, {2, 2});
    const Tensor lsi = from_vector(std::vector<int32_t>{0, 4}, {2});
    Tensor v = randn({1, 2, 7, 4}).to(dt).transpose(1, 2), loc = (0.5 * randn({1, 3, 2, 2, 2, 2})).to(dt);
    Tensor attn = randn({1, 3, 2, 2, 2}).to(dt);
    ASSERT_FALSE(v.is_contiguous());
    EXPECT_TRUE(same_bits(ms_deform_attn(v, ss, lsi, loc, attn), ms_deform_attn(v.contiguous(), ss, lsi, loc, attn)));
    EXPECT_TRUE(same_bits(ms_deform_attn(v, ss.transpose(0, 1).contiguous().transpose(0, 1), lsi, loc, attn),
                          ms_deform_attn(v, ss, lsi, loc, attn)));  // strided int32 table
  }
}

}  // namespace
}  // namespace tg
