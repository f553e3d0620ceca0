// The generic registry test in 16 bits: every registered op, every sample case, run in bfloat16
// and in float16 and compared with the same op in float64 on the very same values (the sample's
// inputs rounded to the 16-bit dtype first, then read by both runs): outputs, input gradients
// and, for twice differentiable ops, second derivatives.
// A newly registered op is covered here without a test of its own.
//
// Tolerance, for outputs and gradients alike: |x16 - x64| <= k * eps * (1 + max |x64|), eps the
// dtype's machine epsilon (2^-8 bfloat16, 2^-11 float16: twice the unit roundoff), the max over
// the tensor being compared, k = 4. Why: an op reads exact inputs, computes in float32 (error
// ~2^-24, nothing next to eps) and rounds its output once: eps / 2 relative. A sample case that
// is a composite (x (x + 2), layer_norm's recorded backward, the seed of a gradient rounded to
// 16 bits and then the gradient rounded again) rounds a few intermediates, each by eps / 2 of a
// value no larger than the scale of the result; k = 4 covers eight such roundings. The scale
// term (1 + max) keeps elements that are the difference of larger terms (a centred value, a
// gradient summed over signs) from being held to a relative bound they cannot meet in any
// 16-bit arithmetic, PyTorch's included; it is the float32 check's form (framework/op_check.h).
// Measured: the worst first-order error is 1.05 eps (bfloat16) and 0.85 eps (float16).
//
// Second derivatives (every op declaring itself twice differentiable): the first backward is
// recorded with create_graph, so each of its recorded ops rounds once more (a gradient formula of
// three to five ops), then the dot with a random direction and the second backward: k = 8.
// Measured: 5.47 eps (bfloat16), 3.02 eps (float16), both at batch_norm's training mode, whose
// recorded backward (the composite's mean, centring, variance, rsqrt and products over the
// batch) rounds the most intermediates; 1.56 and 2.17 eps (at rsqrt) before batch_norm.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

namespace tg {
namespace {

constexpr double kBf16Eps = 1.0 / 256;   // 2^-8
constexpr double kFp16Eps = 1.0 / 2048;  // 2^-11
constexpr double kTolFactor = 4;
constexpr double kSecondOrderTolFactor = 8;

struct HalfSample {
  const OpDef* op;
  size_t index;
  DType dtype;
};

std::vector<HalfSample> all_half_samples() {
  std::vector<HalfSample> out;
  for (const OpDef* op : registry().ops()) {
    if (!op->samples) continue;
    const size_t n = op->samples().size();
    for (DType dt : {DType::BFloat16, DType::Float16})
      for (size_t i = 0; i < n; ++i) out.push_back({op, i, dt});
  }
  return out;
}

std::string test_name(const ::testing::TestParamInfo<HalfSample>& info) {
  std::string n =
      std::string(info.param.op->name) + "_" + std::to_string(info.param.index) + "_" + dtype_name(info.param.dtype);
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// The worst error seen per dtype and order, in units of eps (1 + max|x64|), printed at the end.
std::map<std::string, std::pair<double, std::string>>& worst_seen() {
  static std::map<std::string, std::pair<double, std::string>> w;
  return w;
}

double eps_of(DType dt) { return dt == DType::BFloat16 ? kBf16Eps : kFp16Eps; }

// "" when every element of a (16-bit run) is within k eps (1 + max|b|) of b (float64 run), else a
// message. `tally` names the worst_seen entry it updates.
std::string compare(const Tensor& a, const Tensor& b, double k, const std::string& tally, const std::string& what) {
  std::ostringstream os;
  if (a.shape() != b.shape()) {
    os << what << ": shape " << format_shape(a.shape()) << " vs float64 " << format_shape(b.shape());
    return os.str();
  }
  std::vector<double> x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  double scale = 0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  const double unit = eps_of(a.dtype()) * (1 + scale);
  auto& worst = worst_seen()[tally];
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    const double e = std::abs(x[i] - y[i]) / unit;
    if (e > worst.first) worst = {e, what};
    if (!(e <= k)) {
      os << what << " element " << i << ": " << x[i] << " vs float64 " << y[i] << " (tolerance " << k * unit << ")";
      return os.str();
    }
  }
  return "";
}

// One sample run twice on the same values: in the 16-bit dtype and in float64.
struct TwoRuns {
  std::vector<Tensor> in16, in64;       // the sample's inputs rounded to 16 bits; the same in float64
  std::vector<Tensor> roots16, roots64;  // the outputs that require grad
  std::vector<Tensor> seeds16, seeds64;  // a random output gradient, 16-bit values in both
  std::vector<size_t> wrt;               // the inputs that require grad
};

// Runs the sample both ways and compares the outputs; "" on success.
std::string run_both(const std::string& name, const SampleCase& sample, DType dt, TwoRuns& r) {
  for (const Tensor& t : sample.make_inputs(DType::Float64)) {
    if (!t.defined() || !is_floating(t.dtype())) {
      r.in16.push_back(t);
      r.in64.push_back(t);
      continue;
    }
    Tensor h = t.detach().to(dt);  // the values both runs read
    Tensor w = h.to(DType::Float64);
    if (t.requires_grad()) {
      h.requires_grad_();
      w.requires_grad_();
      r.wrt.push_back(r.in16.size());
    }
    r.in16.push_back(h);
    r.in64.push_back(w);
  }
  std::vector<Tensor> out16 = sample.run(r.in16), out64 = sample.run(r.in64);
  if (out16.size() != out64.size()) return "the 16-bit run returned a different number of outputs";
  for (size_t i = 0; i < out64.size(); ++i) {
    const std::string what = name + ": output " + std::to_string(i);
    if (out16[i].dtype() != dt) return what + " is " + dtype_name(out16[i].dtype()) + ", not " + dtype_name(dt);
    std::string err = compare(out16[i], out64[i], kTolFactor, dtype_name(dt), what);
    if (!err.empty()) return err;
    if (!out64[i].requires_grad()) continue;
    Tensor s = randn(out64[i].shape(), DType::Float64).to(dt);
    r.roots16.push_back(out16[i]);
    r.seeds16.push_back(s);
    r.roots64.push_back(out64[i]);
    r.seeds64.push_back(s.to(DType::Float64));
  }
  return "";
}

// Compares gradients g16[j] and g64[j] of input wrt[j]; "" on success.
std::string compare_grads(const std::string& name, const TwoRuns& r, const std::vector<Tensor>& g16,
                          const std::vector<Tensor>& g64, double k, const std::string& tally, const char* kind) {
  for (size_t j = 0; j < r.wrt.size(); ++j) {
    const std::string what = name + ": " + kind + " of input " + std::to_string(r.wrt[j]);
    if (g16[j].defined() != g64[j].defined())
      return what + ": missing in the " + (g16[j].defined() ? "float64" : "16-bit") + " run";
    if (!g16[j].defined()) continue;
    const DType dt = r.in16[r.wrt[j]].dtype();
    if (g16[j].dtype() != dt) return what + " is " + dtype_name(g16[j].dtype()) + ", not " + dtype_name(dt);
    std::string err = compare(g16[j], g64[j], k, tally, what);
    if (!err.empty()) return err;
  }
  return "";
}

std::vector<Tensor> pick(const std::vector<Tensor>& all, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

// Outputs and first derivatives; returns "" on success, else what differed (or what the op threw).
std::string check_half(const std::string& name, const SampleCase& sample, DType dt, uint64_t seed) {
  try {
    EnableGradGuard grad_on;
    manual_seed(seed);
    TwoRuns r;
    std::string err = run_both(name, sample, dt, r);
    if (!err.empty() || r.roots64.empty()) return err;
    backward(r.roots64, r.seeds64);
    backward(r.roots16, r.seeds16);
    std::vector<Tensor> g16, g64;
    for (size_t k : r.wrt) {
      g16.push_back(r.in16[k].grad());
      g64.push_back(r.in64[k].grad());
      if (!g16.back().defined() || !g64.back().defined())
        return name + ": input " + std::to_string(k) + " got no gradient";
    }
    return compare_grads(name, r, g16, g64, kTolFactor, dtype_name(dt), "gradient");
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

// Second derivatives, for the ops whose backward is twice differentiable: the gradients recorded
// with create_graph (their own backward ops then run in 16 bits too), dotted with a random
// direction v, differentiated again; kSecondOrderTolFactor (see the top of the file).
std::string check_half_second_order(const std::string& name, const SampleCase& sample, DType dt, uint64_t seed) {
  try {
    EnableGradGuard grad_on;
    manual_seed(seed);
    TwoRuns r;
    std::string err = run_both(name, sample, dt, r);
    if (!err.empty() || r.roots64.empty()) return err;
    const std::vector<Tensor> x16 = pick(r.in16, r.wrt), x64 = pick(r.in64, r.wrt);
    std::vector<Tensor> g16 = grad(r.roots16, x16, r.seeds16, true, true, /*create_graph=*/true);
    std::vector<Tensor> g64 = grad(r.roots64, x64, r.seeds64, true, true, /*create_graph=*/true);
    Tensor z16, z64;  // sum_j <g_j, v_j> over the gradients that depend on the inputs
    for (size_t j = 0; j < g64.size(); ++j) {
      if (!g16[j].defined() || !g64[j].defined() || !g64[j].requires_grad()) continue;
      if (!g16[j].requires_grad()) return name + ": the 16-bit gradient of input " + std::to_string(r.wrt[j]) +
                                         " has no history but the float64 one has";
      Tensor v = randn(g64[j].shape(), DType::Float64).to(dt);
      Tensor t16 = sum(mul(g16[j], v)), t64 = sum(mul(g64[j], v.to(DType::Float64)));
      z16 = z16.defined() ? add(z16, t16) : t16;
      z64 = z64.defined() ? add(z64, t64) : t64;
    }
    if (!z64.defined()) return "";
    std::vector<Tensor> gg16 = grad({z16}, x16), gg64 = grad({z64}, x64);
    return compare_grads(name, r, gg16, gg64, kSecondOrderTolFactor, std::string(dtype_name(dt)) + " second order",
                         "second derivative");
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

class RegistryHalf : public ::testing::TestWithParam<HalfSample> {
 public:
  static void TearDownTestSuite() {
    for (const auto& [tally, w] : worst_seen())
      std::cout << "[registry_half] worst " << tally << " error: " << w.first << " eps (1 + max|float64|), "
                << w.second << "\n";
  }
};

// Runs `check` on the parameter's sample. Every registered op takes both 16-bit dtypes: none is
// skipped.
template <class Check>
void run_check(const HalfSample& s, Check check) {
  const SampleCase sample = s.op->samples()[s.index];
  const std::string what = std::string(s.op->name) + " / " + sample.name + " in " + dtype_name(s.dtype);
  const std::string err = check(what, sample, s.dtype, 2200 + s.index);
  if (err.empty()) return;
  ADD_FAILURE() << what << ": " << err;
}

TEST_P(RegistryHalf, MatchesFloat64OnTheSameValues) { run_check(GetParam(), check_half); }

TEST_P(RegistryHalf, SecondDerivativesMatchFloat64) {
  if (!GetParam().op->twice_differentiable) GTEST_SKIP() << GetParam().op->name << " is not twice differentiable";
  run_check(GetParam(), check_half_second_order);
}

INSTANTIATE_TEST_SUITE_P(AllOps, RegistryHalf, ::testing::ValuesIn(all_half_samples()), test_name);

}  // namespace
}  // namespace tg
