// The core ops in 16 bits (issue 22): golden tests against PyTorch 1.13's bfloat16 CPU kernels
// (tools/fixtures/half_core.py, tests/data/half_core/) and PyTorch's type promotion for the
// elementwise binary ops (result dtypes, gradient dtypes and values).
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::GoldenCase;

constexpr double kBf16Eps = 1.0 / 256;  // 2^-8, bfloat16's machine epsilon (two unit roundoffs)

DType dtype_named(const std::string& s) {
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "float16") return DType::Float16;
  if (s == "float32") return DType::Float32;
  if (s == "int64") return DType::Int64;
  return DType::Float64;
}

// A fixture tensor in its real dtype (bfloat16 ones are stored as float32, exactly).
Tensor fixture(const GoldenCase& c, const std::string& key) {
  return c.tensor(key).to(dtype_named(c.json["dtypes"][key].get<std::string>()));
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Every golden case: the op (a tapegrad call on the fixture's named inputs) and the names of the
// inputs that get gradients, in the fixture's order.
struct GoldenOp {
  std::function<Tensor(const std::map<std::string, Tensor>&)> run;
  std::vector<std::string> grads;
};

const std::map<std::string, GoldenOp>& golden_ops() {
  using In = std::map<std::string, Tensor>;
  static const std::map<std::string, GoldenOp> ops = {
      {"add_bf16_bf16_broadcast", {[](const In& x) { return add(x.at("a"), x.at("b")); }, {"a", "b"}}},
      {"add_bf16_f32_promotes", {[](const In& x) { return add(x.at("a"), x.at("b")); }, {"a", "b"}}},
      {"mul_f32_bf16_broadcast", {[](const In& x) { return mul(x.at("a"), x.at("b")); }, {"a", "b"}}},
      {"matmul", {[](const In& x) { return matmul(x.at("a"), x.at("b")); }, {"a", "b"}}},
      {"softmax", {[](const In& x) { return softmax(mul(x.at("x"), 3.0), -1); }, {"x"}}},
      {"log_softmax", {[](const In& x) { return log_softmax(mul(x.at("x"), 3.0), 1); }, {"x"}}},
      {"layer_norm",
       {[](const In& x) { return layer_norm(x.at("x"), {48}, x.at("w"), x.at("b"), 1e-5); }, {"x", "w", "b"}}},
      {"sum", {[](const In& x) { return sum(x.at("x"), {1}); }, {"x"}}},
      {"mean_all", {[](const In& x) { return mean(x.at("x")); }, {"x"}}},
      {"gelu", {[](const In& x) { return gelu(x.at("x")); }, {"x"}}},
      {"gelu_tanh", {[](const In& x) { return gelu(x.at("x"), "tanh"); }, {"x"}}},
      {"cross_entropy", {[](const In& x) { return cross_entropy(x.at("x"), x.at("t")); }, {"x"}}},
      {"cross_entropy_smoothing_none",
       {[](const In& x) {
          return cross_entropy(x.at("x"), x.at("t"), CrossEntropyOptions{Reduction::None, -100, 0.1});
        },
        {"x"}}},
  };
  return ops;
}

// One tensor of a golden case, three ways: tapegrad's (a), PyTorch's (p), float64's (r).
//   a against p: |a - p| <= 2 eps |p| + eps max|p| + |p - r|. Where both compute in float32 and
//     round once, the float32 results differ only in summation order and round at most one
//     bfloat16 ulp apart (eps |p|); some of PyTorch's kernels round intermediates to bfloat16
//     (another ulp), and an element that is a cancellation (a centred value, a gradient summed
//     over both signs) carries those roundings at the scale of the tensor (eps max|p|). Some of
//     PyTorch 1.13's bfloat16 kernels (matmul, layer_norm) accumulate in bfloat16 and are much
//     further from float64 than one rounding: PyTorch's own error at the element, |p - r|, is
//     allowed on top (tapegrad is then closer to float64, which the next check measures).
//   a against r: tapegrad no further from float64 than PyTorch is, within a factor 2, plus half
//     an ulp of the largest element (rounding alone, where PyTorch happens to be exact):
//     max|a - r| <= 2 max|p - r| + eps/2 max|r|.
void check_three_ways(const Tensor& a, const Tensor& p, const Tensor& r, const std::string& what) {
  ASSERT_EQ(a.shape(), p.shape()) << what;
  ASSERT_EQ(a.dtype(), p.dtype()) << what << ": " << dtype_name(a.dtype()) << " vs PyTorch " << dtype_name(p.dtype());
  const double eps = p.dtype() == DType::BFloat16 ? kBf16Eps : std::ldexp(1.0, -23);
  std::vector<double> va = a.to(DType::Float64).to_vector<double>(), vp = p.to(DType::Float64).to_vector<double>(),
                      vr = r.to(DType::Float64).to_vector<double>();
  const double pmax = max_abs(vp), rmax = max_abs(vr);
  double err_tg = 0, err_pt = 0, worst_ulps = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::abs(va[i] - vp[i]);
    EXPECT_LE(d, 2 * eps * std::abs(vp[i]) + eps * pmax + std::abs(vp[i] - vr[i]))
        << what << " element " << i << ": tapegrad " << va[i] << ", PyTorch " << vp[i] << ", float64 " << vr[i];
    worst_ulps = std::max(worst_ulps, d / (eps * std::max(pmax, 1e-300)));
    err_tg = std::max(err_tg, std::abs(va[i] - vr[i]));
    err_pt = std::max(err_pt, std::abs(vp[i] - vr[i]));
  }
  EXPECT_LE(err_tg, 2 * err_pt + eps / 2 * rmax)
      << what << ": tapegrad's max error against float64 " << err_tg << ", PyTorch's " << err_pt;
  std::cout << "[half_core] " << what << ": max |tg - f64| / max|f64| = " << err_tg / std::max(rmax, 1e-300)
            << ", PyTorch's " << err_pt / std::max(rmax, 1e-300) << "; max |tg - torch| / max|torch| = " << worst_ulps
            << " eps\n";
}

class HalfCoreGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(HalfCoreGolden, MatchesPyTorchBfloat16) {
  const GoldenCase& c = GetParam();
  auto it = golden_ops().find(c.name());
  ASSERT_NE(it, golden_ops().end()) << "no tapegrad op for golden case " << c.name();
  const GoldenOp& op = it->second;
  std::map<std::string, Tensor> in;
  for (auto& [key, file] : c.json["tensors"].items()) {
    (void)file;
    if (key == "out" || key == "gout" || key.rfind("out_", 0) == 0 || key.rfind("grad_", 0) == 0) continue;
    in[key] = fixture(c, key);
  }
  for (const std::string& k : op.grads) in[k].requires_grad_();
  Tensor out = op.run(in);
  check_three_ways(out, fixture(c, "out"), fixture(c, "out_f64"), c.name() + " output");
  std::vector<Tensor> wrt;
  for (const std::string& k : op.grads) wrt.push_back(in[k]);
  std::vector<Tensor> g = grad({out}, wrt, {fixture(c, "gout")});
  for (size_t i = 0; i < op.grads.size(); ++i) {
    const std::string& k = op.grads[i];
    EXPECT_EQ(g[i].dtype(), in[k].dtype()) << c.name() << ": the gradient of " << k << " comes in its input's dtype";
    check_three_ways(g[i], fixture(c, "grad_" + k), fixture(c, "grad_" + k + "_f64"), c.name() + " grad " + k);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HalfCoreGolden, ::testing::ValuesIn(testing::load_golden_cases("half_core")),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name(); });

// ---- type promotion ----------------------------------------------------------------------

Tensor vec(std::vector<double> v, DType dt) { return from_vector(v, {static_cast<int64_t>(v.size())}).to(dt); }
std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }
double value(const Tensor& t) { return t.to(DType::Float64).item<double>(); }

TEST(HalfPromotion, ResultDtypesFollowPyTorch) {
  struct Case {
    DType a, b, result;
  };
  const DType bf = DType::BFloat16, fp = DType::Float16, f32 = DType::Float32, f64 = DType::Float64, i64 = DType::Int64;
  for (const Case& c : {Case{bf, f32, f32}, Case{f32, bf, f32}, Case{f32, f64, f64}, Case{i64, f32, f32},
                        Case{bf, fp, f32}, Case{fp, f64, f64}, Case{i64, bf, bf}, Case{bf, bf, bf}}) {
    const Tensor a = vec({1, -2}, c.a), b = vec({0.5, 4}, c.b);
    const std::string what = std::string(dtype_name(c.a)) + " and " + dtype_name(c.b);
    EXPECT_EQ(add(a, b).dtype(), c.result) << "add of " << what;
    EXPECT_EQ(sub(a, b).dtype(), c.result) << "sub of " << what;
    EXPECT_EQ(mul(a, b).dtype(), c.result) << "mul of " << what;
    EXPECT_EQ(div(a, b).dtype(), c.result) << "div of " << what;
    EXPECT_EQ(where(vec({1, 0}, i64), a, b).dtype(), c.result) << "where of " << what;
    EXPECT_EQ(gt(a, b).dtype(), DType::Int64) << "gt of " << what;
    EXPECT_EQ(values(add(a, b)), (std::vector<double>{1.5, 2})) << "add of " << what;
    EXPECT_EQ(values(where(vec({1, 0}, i64), a, b)), (std::vector<double>{1, 4})) << what;
  }
}

// The promoted op computes on the promoted values: 1 + 2^-10 is not a bfloat16 (it rounds to 1),
// but in float32 it is, and adding it to a bfloat16 1 gives float32 2 + 2^-10.
TEST(HalfPromotion, ValuesAreComputedInThePromotedDtype) {
  const double tiny = std::ldexp(1.0, -10);
  Tensor a = vec({1}, DType::BFloat16), b = vec({1 + tiny}, DType::Float32);
  EXPECT_EQ(value(add(a, b)), 2 + tiny);
  EXPECT_EQ(value(mul(b, a)), 1 + tiny);
  // Comparisons of mixed dtypes compare the promoted values, as PyTorch.
  EXPECT_EQ(lt(a, b).item<int64_t>(), 1);
  EXPECT_EQ(eq(vec({1}, DType::Float16), vec({1}, DType::BFloat16)).item<int64_t>(), 1);
  // In 16 bits the result is rounded once: bfloat16 has 8 significant bits, so 1 + 2^-8 is a tie
  // between 1 and 1 + 2^-7, rounded to even (1); float16 (11 bits) holds 1 + 2^-10 exactly.
  EXPECT_EQ(value(add(vec({1}, DType::BFloat16), vec({std::ldexp(1.0, -8)}, DType::BFloat16))), 1.0);
  EXPECT_EQ(value(add(vec({1}, DType::Float16), vec({std::ldexp(1.0, -10)}, DType::Float16))), 1 + tiny);
}

TEST(HalfPromotion, EachGradientComesBackInItsInputsDtype) {
  Tensor a = vec({1.5, -2, 0.25}, DType::BFloat16).requires_grad_();
  Tensor b = vec({0.5, 4, -3}, DType::Float32).requires_grad_();
  Tensor c = vec({2}, DType::Float64).requires_grad_();
  // (a * b + c) / b, then where of a and b: every binary op of the issue on two dtypes.
  Tensor y = div(add(mul(a, b), c), b);
  EXPECT_EQ(y.dtype(), DType::Float64);
  Tensor z = sum(add(y, where(vec({1, 0, 1}, DType::Int64), a, b)));
  backward({z});
  ASSERT_TRUE(a.grad().defined() && b.grad().defined() && c.grad().defined());
  EXPECT_EQ(a.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
  EXPECT_EQ(c.grad().dtype(), DType::Float64);
  // y = a + c / b: dy/da = 1 (+1 from where where the mask is 1), dy/db = -c / b^2 (+1 where 0),
  // dy/dc = sum 1/b. Exact in each dtype for these values but b = -3's float32 -2/9.
  EXPECT_EQ(values(a.grad()), (std::vector<double>{2, 1, 2}));
  const std::vector<double> gb = values(b.grad());
  EXPECT_EQ(gb[0], -8.0);
  EXPECT_EQ(gb[1], 1 - 0.125);
  EXPECT_FLOAT_EQ(gb[2], static_cast<float>(-2.0 / 9));
  EXPECT_DOUBLE_EQ(value(c.grad()), 2 + 0.25 - 1.0 / 3);
}

// The tape stays readable: a promotion is one `to` entry before the op, named as such.
TEST(HalfPromotion, TheCastIsARecordedToEntryAndSameDtypesRecordNone) {
  Tensor a = vec({1, 2}, DType::BFloat16).requires_grad_();
  Tensor b = vec({3, 4}, DType::Float32).requires_grad_();
  Tensor y = mul(a, b);
  const std::string tape = tape_to_text(y);
  EXPECT_NE(tape.find(" to "), std::string::npos) << tape;
  EXPECT_NE(tape.find(" mul "), std::string::npos) << tape;
  EXPECT_LT(tape.find(" to "), tape.find(" mul ")) << tape;
  Tensor a2 = vec({1, 2}, DType::BFloat16).requires_grad_();
  const std::string same = tape_to_text(mul(a2, a2));
  EXPECT_EQ(same.find(" to "), std::string::npos) << same;
}

// In place, the result is computed in the promoted dtype and written back in self's, as PyTorch.
TEST(HalfPromotion, InPlaceOpsKeepSelfsDtype) {
  Tensor x = vec({1, 2}, DType::BFloat16);
  mul_(x, vec({1.5, 0.25}, DType::Float32));
  EXPECT_EQ(x.dtype(), DType::BFloat16);
  EXPECT_EQ(values(x), (std::vector<double>{1.5, 0.5}));
  Tensor a = vec({1, 2}, DType::BFloat16).requires_grad_();
  Tensor w = vec({3, 4}, DType::Float32).requires_grad_();
  Tensor y = add(a, 0.0);
  sub_(y, w);
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(values(y), (std::vector<double>{-2, -2}));
  backward({sum(y)});
  EXPECT_EQ(a.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{-1, -1}));
}

TEST(HalfPromotion, WhatPyTorchRefusesStaysAnError) {
  // Integer operands compute in integers (tests/test_dtypes_behaviour.cpp), but a fractional
  // alpha with them is refused, as PyTorch does; a shape mismatch is still reported after promotion.
  EXPECT_NE(error_of([] { add(vec({1}, DType::Int64), vec({2}, DType::Int64), 0.5); }).find("alpha must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              add(vec({1, 2}, DType::BFloat16), vec({1, 2, 3}, DType::Float32));
            }).find("add"),
            std::string::npos);
  // Ops outside the elementwise family keep one dtype per call, naming the argument.
  EXPECT_NE(error_of([] {
              matmul(zeros({2, 2}, DType::BFloat16), zeros({2, 2}));
            }).find("same dtype"),
            std::string::npos);
}

// ---- 16-bit ops: a few properties the registry test does not see --------------------------

TEST(HalfCoreOps, ReductionsAccumulateInFloat32AndRoundOnce) {
  // 4096 ones plus one: a bfloat16 running sum would stall at 256; float32 gets 4096 exactly.
  Tensor x = ones({4096}, DType::BFloat16);
  EXPECT_EQ(value(sum(x)), 4096.0);
  EXPECT_EQ(value(mean(x)), 1.0);
  Tensor h = full({3000}, 0.1, DType::Float16);
  // 3000 float16 0.1 (= 0.0999755859375) sum to 299.93 in float32, rounded once to float16: 300
  // (float16's step is 0.25 there). A float16 running sum would stall at 256 (step 0.25 > 0.1 x 2).
  EXPECT_EQ(value(sum(h)), 300.0);
  EXPECT_EQ(sum(h).dtype(), DType::Float16);
}

// pow's backward on 16-bit inputs runs its formula in float32 and rounds each gradient once: in
// float16, a^(b-1) of a small a overflowed to inf (1.8e5 here) where b a^(b-1) is about -9e3.
TEST(HalfCoreOps, PowGradientsAreTheFloat32FormulaRoundedOnce) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor a = vec({1e-5, 0.75, 1.5}, dt).requires_grad_();
    Tensor b = vec({-0.05, 2.5, -0.5}, dt).requires_grad_();
    const std::vector<Tensor> g = grad({pow(a, b)}, {a, b}, {vec({1, -2, 0.5}, dt)});
    Tensor a64 = a.detach().to(DType::Float64).requires_grad_(), b64 = b.detach().to(DType::Float64).requires_grad_();
    const std::vector<Tensor> g64 = grad({pow(a64, b64)}, {a64, b64}, {vec({1, -2, 0.5}, DType::Float64)});
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(g[i].dtype(), dt);
      const std::vector<double> got = values(g[i]), want = values(g64[i].to(DType::Float32).to(dt));
      for (size_t k = 0; k < got.size(); ++k)  // float32 formula: within one 16-bit step of float64's
        EXPECT_NEAR(got[k], want[k], std::abs(want[k]) * (dt == DType::Float16 ? 0x1p-10 : 0x1p-7))
            << dtype_name(dt) << " input " << i << " element " << k;
    }
  }
}

TEST(HalfCoreOps, MaxArgmaxAndIndexOpsKeep16BitValuesExactly) {
  Tensor x = from_vector(std::vector<double>{0.1, 3.3, -2.7, 3.3, 0.5, 9.1}, {2, 3}).to(DType::BFloat16);
  ValuesIndices m = max(x, 1);
  EXPECT_EQ(m.values.dtype(), DType::BFloat16);
  EXPECT_EQ(m.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values(m.values), (std::vector<double>{values(x)[1], values(x)[5]}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 5);
  // int32 (issue 22's index dtype) is searched as int64, exactly.
  EXPECT_EQ(argmax(from_vector(std::vector<int32_t>{3, 7, -1}, {3})).item<int64_t>(), 1);
  EXPECT_EQ(values(max(from_vector(std::vector<int32_t>{3, 7, -1, 9}, {2, 2}), 1).values), (std::vector<double>{7, 9}));
  Tensor idx = from_vector(std::vector<int64_t>{2, 0}, {2});
  EXPECT_EQ(index_select(x, 1, idx).dtype(), DType::BFloat16);
  Tensor w = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).to(DType::Float16).requires_grad_();
  Tensor e = embedding(w, from_vector(std::vector<int64_t>{1, 1, 0}, {3}));
  EXPECT_EQ(e.dtype(), DType::Float16);
  backward({sum(e)});
  EXPECT_EQ(w.grad().dtype(), DType::Float16);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1, 1, 2, 2}));
}

TEST(HalfCoreOps, DropoutAndPoolingTake16Bits) {
  Tensor x = ones({4, 4}, DType::BFloat16).requires_grad_();
  Generator gen(3);
  Tensor y = dropout(x, 0.5, true, &gen);
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  for (double v : values(y)) EXPECT_TRUE(v == 0.0 || v == 2.0) << v;
  Tensor p = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4})
                 .to(DType::Float16)
                 .requires_grad_();
  Tensor mp = max_pool2d(p, {2});
  EXPECT_EQ(mp.dtype(), DType::Float16);
  EXPECT_EQ(values(mp), (std::vector<double>{6, 8, 14, 16}));
  Tensor ap = avg_pool2d(p, {2});
  EXPECT_EQ(values(ap), (std::vector<double>{3.5, 5.5, 11.5, 13.5}));
  backward({sum(add(mp, ap))});
  EXPECT_EQ(p.grad().dtype(), DType::Float16);
  EXPECT_EQ(values(p.grad())[5], 1.25);
}

}  // namespace
}  // namespace tg
