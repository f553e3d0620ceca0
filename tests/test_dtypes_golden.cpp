// Types against PyTorch 1.13 (tools/fixtures/dtypes.py, tests/data/dtypes): type promotion in
// add / sub / mul / div (tensor and scalar), maximum / minimum / pow, where and the comparisons,
// with each gradient in its input's dtype; and the integer reductions sum, max, min, argmax,
// argmin.
//
// Tolerances: integer results and dtypes are exact. Floating outputs are one operation on the
// promoted values, as PyTorch computes them: exact too (rtol 0). Gradients that PyTorch and we
// reduce over a broadcast dim (sum_to) may add in another order: see gradient_rtol.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "golden.h"

namespace tg {
namespace {

using testing::GoldenCase;

DType dtype_named(const std::string& s) {
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "float32") return DType::Float32;
  if (s == "float64") return DType::Float64;
  if (s == "int32") return DType::Int32;
  if (s == "int64") return DType::Int64;
  throw Error("dtypes fixture: unknown dtype " + s);
}

// A fixture tensor in its real dtype (bfloat16 is stored as float32, exactly).
Tensor fixture(const GoldenCase& c, const std::string& key) {
  return c.tensor(key).to(dtype_named(c.json["dtypes"][key].get<std::string>()));
}

std::vector<int64_t> dims_of(const GoldenCase& c) { return c.json["params"]["dims"].get<std::vector<int64_t>>(); }
bool keepdim_of(const GoldenCase& c) { return c.json["params"]["keepdim"].get<bool>(); }
int64_t dim_of(const GoldenCase& c) { return c.json["params"]["dim"].get<int64_t>(); }
double scalar_of(const GoldenCase& c) { return c.json["params"]["scalar"].get<double>(); }

// The tapegrad call of a case's op: its outputs (values, then indices for max / min over a dim).
std::vector<Tensor> run(const GoldenCase& c, const std::map<std::string, Tensor>& in) {
  const std::string op = c.json["op"];
  auto a = [&] { return in.at("a"); };
  auto b = [&] { return in.at("b"); };
  if (op == "add") return {add(a(), b())};
  if (op == "add_alpha") return {add(a(), b(), c.json["params"]["alpha"].get<double>())};
  if (op == "sub") return {sub(a(), b())};
  if (op == "mul") return {mul(a(), b())};
  if (op == "div") return {div(a(), b())};
  if (op == "add_scalar") return {add(a(), scalar_of(c))};
  if (op == "mul_scalar") return {mul(a(), scalar_of(c))};
  if (op == "div_scalar") return {div(a(), scalar_of(c))};
  if (op == "maximum") return {maximum(a(), b())};
  if (op == "minimum") return {minimum(a(), b())};
  if (op == "pow") return {pow(a(), b())};
  if (op == "where") return {where(in.at("cond"), a(), b())};
  if (op == "eq") return {eq(a(), b())};
  if (op == "gt") return {gt(a(), b())};
  if (op == "lt") return {lt(a(), b())};
  if (op == "sum") return {sum(a())};
  if (op == "sum_dims") return {sum(a(), dims_of(c), keepdim_of(c))};
  if (op == "sum_eq") return {sum(eq(in.at("pred"), in.at("y")))};
  if (op == "max_dim") {
    ValuesIndices r = max(a(), dim_of(c), keepdim_of(c));
    return {r.values, r.indices};
  }
  if (op == "min_dim") {
    ValuesIndices r = min(a(), dim_of(c), keepdim_of(c));
    return {r.values, r.indices};
  }
  if (op == "argmax_dim") return {argmax(a(), dim_of(c), keepdim_of(c))};
  if (op == "argmin_dim") return {argmin(a(), dim_of(c), keepdim_of(c))};
  if (op == "argmax_all") return {argmax(a())};
  if (op == "max_all") return {max(a())};
  if (op == "min_all") return {min(a())};
  throw Error("dtypes fixture: unknown op " + op);
}

// A gradient is computed in the case's promoted dtype (the output's) and cast to its input's: a
// float64 0-dim operand of a float32 op gets a float32 sum. Float32 sums of up to 12 terms that
// may add in another order than PyTorch's: rtol 2^-20 plus atol 2^-22 (the values are O(1)).
// pow's gradients hold a pow and a log: PyTorch's vectorised (Sleef, 1 ulp) against our libm
// ones (0.5 ulp) may round a bfloat16 result to its neighbour: rtol 2^-7 there.
double gradient_rtol(const std::string& op, DType computed) {
  if (computed == DType::Float64) return 1e-12;
  if (op == "pow" && computed == DType::BFloat16) return std::ldexp(1.0, -7);
  return std::ldexp(1.0, -20);
}
double gradient_atol(DType computed) { return computed == DType::Float64 ? 0 : std::ldexp(1.0, -22); }

// The dtype that bounds a gradient's precision: the output's, or a less precise floating input's
// (PyTorch's pow backward computes exponent - 1 in the exponent's own dtype: a float32 exponent
// of a float64 pow gets a float32-accurate gradient there).
DType least_precise(const std::map<std::string, Tensor>& in, DType out) {
  auto rank = [](DType d) { return d == DType::Float64 ? 2 : d == DType::Float32 ? 1 : 0; };
  DType least = out;
  for (const auto& [key, t] : in)
    if (is_floating(t.dtype()) && rank(t.dtype()) < rank(least)) least = t.dtype();
  return least;
}

// Outputs are exact, but pow's (Sleef's 1-ulp pow in PyTorch, libm's in ours): 2 float32 ulps,
// 1 bfloat16 ulp (a float32 difference can round to the neighbouring bfloat16), 4 float64 ulps.
double output_rtol(const std::string& op, DType dt) {
  if (op != "pow" || !is_floating(dt)) return 0;
  if (dt == DType::Float64) return std::ldexp(1.0, -50);
  return dt == DType::BFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -22);
}

// Same dtype and values (within rtol for floats); exact for int64 values beyond 2^53 too.
void expect_identical(const Tensor& actual, const Tensor& expected, const std::string& what, double rtol = 0) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what << ": dtype " << dtype_name(actual.dtype());
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  if (is_floating(expected.dtype()))
    testing::expect_close(actual, expected, rtol, 0, what);
  else
    EXPECT_EQ(actual.to(DType::Int64).to_vector<int64_t>(), expected.to(DType::Int64).to_vector<int64_t>()) << what;
}

TEST(DtypesGolden, PromotionAndIntegerReductionsMatchPyTorch) {
  const std::vector<GoldenCase> cases = testing::load_golden_cases("dtypes");
  ASSERT_GE(cases.size(), 40u);
  int gradients = 0;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::map<std::string, Tensor> in;
    for (const std::string key : {"a", "b", "cond", "pred", "y"}) {
      if (!c.has(key)) continue;
      in[key] = fixture(c, key);
      if (is_floating(in[key].dtype())) in[key].requires_grad_();
    }
    std::vector<Tensor> out = run(c, in);
    const std::string op = c.json["op"];
    expect_identical(out[0], fixture(c, "out"), c.name() + " out", output_rtol(op, out[0].dtype()));
    if (c.has("out1")) expect_identical(out[1], fixture(c, "out1"), c.name() + " indices");
    if (!c.has("gout")) continue;
    out[0].backward(fixture(c, "gout"));
    for (auto& [key, t] : in) {
      if (!is_floating(t.dtype())) continue;
      const Tensor expected = fixture(c, "grad_" + key);
      ASSERT_TRUE(t.grad().defined()) << key;
      ASSERT_EQ(t.grad().dtype(), t.dtype()) << "the gradient of " << key << " comes back in its dtype";
      const DType computed = least_precise(in, out[0].dtype());
      testing::expect_close(t.grad(), expected, gradient_rtol(op, computed), gradient_atol(computed),
                            c.name() + " grad_" + key);
      ++gradients;
    }
  }
  EXPECT_GE(gradients, 15);
}

}  // namespace
}  // namespace tg
