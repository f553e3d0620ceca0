// The generic registry test in 16 bits: every registered op, every sample case, run in bfloat16
// and in float16 and compared with the same op in float64 on the very same values (the sample's
// inputs rounded to the 16-bit dtype first, then read by both runs), outputs and input gradients.
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

// Ops of the five operator families being taught 16 bits by other engineers in parallel
// (issue 22): they still refuse bfloat16 / float16 on this branch. Each is run and may fail
// (the test then reports it as skipped, with the error); the lead empties this list at merge.
const std::map<std::string, const char*>& expected_to_fail_on_this_branch() {
  static const std::map<std::string, const char*> ops = {
      {"affine_grid", "grid_sample family"},
      {"affine_grid_generator_backward", "grid_sample family"},
      {"convolution", "convolution family"},
      {"grid_sample", "grid_sample family"},
      {"group_norm", "group_norm family"},
      {"ms_deform_attn", "ms_deform_attn family"},
      {"upsample_bilinear2d", "upsample family"},
  };
  return ops;
}

// Ops that cannot run in 16 bits by design, with the reason (PyTorch refuses them too). Empty:
// every other op of the framework takes bfloat16 and float16.
const std::map<std::string, const char*>& refused_by_design() {
  static const std::map<std::string, const char*> ops = {};
  return ops;
}

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

// The worst error seen per dtype, in units of eps (1 + max|x64|), printed at the end of the suite.
std::map<DType, std::pair<double, std::string>>& worst_seen() {
  static std::map<DType, std::pair<double, std::string>> w;
  return w;
}

// "" when every element of a (16-bit run) is within tolerance of b (float64 run), else a message.
std::string compare(const Tensor& a, const Tensor& b, double tol_factor, const std::string& what) {
  std::ostringstream os;
  if (a.shape() != b.shape()) {
    os << what << ": shape " << format_shape(a.shape()) << " vs float64 " << format_shape(b.shape());
    return os.str();
  }
  std::vector<double> x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  double scale = 0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  const double tol = tol_factor * (1 + scale);
  const double eps = a.dtype() == DType::BFloat16 ? kBf16Eps : kFp16Eps;
  auto& worst = worst_seen()[a.dtype()];
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    const double e = std::abs(x[i] - y[i]) / (eps * (1 + scale));
    if (e > worst.first) worst = {e, what};
    if (!(std::abs(x[i] - y[i]) <= tol)) {
      os << what << " element " << i << ": " << x[i] << " vs float64 " << y[i] << " (tolerance " << tol << ")";
      return os.str();
    }
  }
  return "";
}

// The check itself; returns "" on success, else what differed (or what the op threw).
std::string check_half(const std::string& name, const SampleCase& sample, DType dt, uint64_t seed) {
  const double tol_factor = kTolFactor * (dt == DType::BFloat16 ? kBf16Eps : kFp16Eps);
  try {
    EnableGradGuard grad_on;
    manual_seed(seed);
    std::vector<Tensor> made = sample.make_inputs(DType::Float64);
    std::vector<Tensor> in16, in64;
    for (const Tensor& t : made) {
      if (!t.defined() || !is_floating(t.dtype())) {
        in16.push_back(t);
        in64.push_back(t);
        continue;
      }
      Tensor r = t.detach().to(dt);  // the values both runs read
      Tensor w = r.to(DType::Float64);
      if (t.requires_grad()) {
        r.requires_grad_();
        w.requires_grad_();
      }
      in16.push_back(r);
      in64.push_back(w);
    }
    std::vector<Tensor> out16 = sample.run(in16), out64 = sample.run(in64);
    if (out16.size() != out64.size()) return "the 16-bit run returned a different number of outputs";
    std::vector<Tensor> roots16, roots64, seeds16, seeds64;
    for (size_t i = 0; i < out64.size(); ++i) {
      const std::string what = "output " + std::to_string(i);
      if (out16[i].dtype() != dt) return what + " is " + dtype_name(out16[i].dtype()) + ", not " + dtype_name(dt);
      std::string err = compare(out16[i], out64[i], tol_factor, name + ": " + what);
      if (!err.empty()) return err;
      if (!out64[i].requires_grad()) continue;
      Tensor s = randn(out64[i].shape(), DType::Float64).to(dt);  // a seed both runs read exactly
      roots16.push_back(out16[i]);
      seeds16.push_back(s);
      roots64.push_back(out64[i]);
      seeds64.push_back(s.to(DType::Float64));
    }
    if (roots64.empty()) return "";
    backward(roots64, seeds64);
    backward(roots16, seeds16);
    for (size_t k = 0; k < in64.size(); ++k) {
      if (!in64[k].defined() || !in64[k].requires_grad()) continue;
      const std::string what = "gradient of input " + std::to_string(k);
      Tensor g16 = in16[k].grad(), g64 = in64[k].grad();
      if (!g16.defined() || !g64.defined())
        return what + ": missing in the " + (g16.defined() ? "float64" : "16-bit") + " run";
      if (g16.dtype() != dt) return what + " is " + dtype_name(g16.dtype()) + ", not " + dtype_name(dt);
      std::string err = compare(g16, g64, tol_factor, name + ": " + what);
      if (!err.empty()) return err;
    }
    return "";
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

class RegistryHalf : public ::testing::TestWithParam<HalfSample> {
 public:
  static void TearDownTestSuite() {
    for (const auto& [dt, w] : worst_seen())
      std::cout << "[registry_half] worst " << dtype_name(dt) << " error: " << w.first << " eps (1 + max|float64|), "
                << w.second << " (tolerance " << kTolFactor << ")\n";
  }
};

TEST_P(RegistryHalf, MatchesFloat64OnTheSameValues) {
  const HalfSample& s = GetParam();
  const SampleCase sample = s.op->samples()[s.index];
  const std::string what = std::string(s.op->name) + " / " + sample.name + " in " + dtype_name(s.dtype);
  if (auto it = refused_by_design().find(s.op->name); it != refused_by_design().end())
    GTEST_SKIP() << what << ": refused by design: " << it->second;
  const std::string err = check_half(what, sample, s.dtype, 2200 + s.index);
  if (err.empty()) return;
  if (auto it = expected_to_fail_on_this_branch().find(s.op->name); it != expected_to_fail_on_this_branch().end())
    GTEST_SKIP() << what << ": expected to fail on this branch (" << it->second << "): " << err;
  ADD_FAILURE() << what << ": " << err;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RegistryHalf, ::testing::ValuesIn(all_half_samples()), test_name);

}  // namespace
}  // namespace tg
