#include "op_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "grad_mode.h"
#include "random.h"
#include "tape.h"

namespace tg {

namespace {

GradcheckResult failed(const std::string& what, const std::string& check, const std::string& why) {
  return {false, what + ": " + check + ": " + why};
}

// Runs one check, turning an exception thrown by the op into a failure that says where.
template <class F>
GradcheckResult guarded(const std::string& what, const std::string& check, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return failed(what, check, std::string("threw: ") + e.what());
  }
}

bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

GradcheckResult check_sample_gradcheck(const std::string& what, const SampleCase& sample, uint64_t seed,
                                       const OpCheckOptions& options) {
  return guarded(what, "gradcheck", [&]() -> GradcheckResult {
    manual_seed(seed);
    std::vector<Tensor> inputs = sample.make_inputs(DType::Float64);
    GradcheckResult r = gradcheck(sample.run, inputs, options.gradcheck);
    if (!r.ok) r.message = what + ": " + r.message;  // gradcheck's own message says "gradcheck: ..."
    return r;
  });
}

GradcheckResult check_sample_gradgradcheck(const std::string& what, const SampleCase& sample, uint64_t seed,
                                           const OpCheckOptions& options) {
  return guarded(what, "gradgradcheck", [&]() -> GradcheckResult {
    manual_seed(seed);
    std::vector<Tensor> inputs = sample.make_inputs(DType::Float64);
    GradcheckResult r = gradgradcheck(sample.run, inputs, options.gradcheck);
    if (!r.ok) r.message = what + ": " + r.message;
    return r;
  });
}

GradcheckResult check_sample_float32(const std::string& what, const SampleCase& sample, uint64_t seed,
                                     const OpCheckOptions& options) {
  return guarded(what, "float32 vs float64", [&]() -> GradcheckResult {
    const std::string check = "float32 vs float64";
    EnableGradGuard grad_on;  // called under a NoGradGuard, nothing would be recorded or checked
    manual_seed(seed);
    std::vector<Tensor> in64 = sample.make_inputs(DType::Float64);
    std::vector<Tensor> in32;
    for (const Tensor& t : in64) {
      if (!t.defined() || !is_floating(t.dtype())) {
        in32.push_back(t);
        continue;
      }
      Tensor c = t.detach().to(DType::Float32);
      if (t.requires_grad()) c.requires_grad_();
      in32.push_back(c);
    }
    std::vector<Tensor> out64 = sample.run(in64), out32 = sample.run(in32);
    if (out64.size() != out32.size())
      return failed(what, check, "the float32 run returned " + std::to_string(out32.size()) + " outputs, float64 " +
                                     std::to_string(out64.size()));
    std::vector<Tensor> roots32, roots64, seeds32, seeds64;
    for (size_t i = 0; i < out64.size(); ++i) {
      std::ostringstream os;
      // a floating output is float32 in the float32 run; an integer one (indices) keeps its dtype
      const DType want = is_floating(out64[i].dtype()) ? DType::Float32 : out64[i].dtype();
      if (out32[i].dtype() != want) {
        os << "output " << i << " of the float32 run is " << dtype_name(out32[i].dtype()) << ", not "
           << dtype_name(want);
        return failed(what, check, os.str());
      }
      if (out32[i].shape() != out64[i].shape()) {
        os << "output " << i << " has shape " << format_shape(out32[i].shape()) << " in float32 and "
           << format_shape(out64[i].shape()) << " in float64";
        return failed(what, check, os.str());
      }
      std::vector<double> a = out32[i].to(DType::Float64).to_vector<double>(),
                          b = out64[i].to(DType::Float64).to_vector<double>();
      for (size_t k = 0; k < a.size(); ++k) {
        if (!(std::abs(a[k] - b[k]) <= options.float32_atol + options.float32_rtol * std::abs(b[k]))) {
          os << "output " << i << " element " << k << ": float32 " << a[k] << ", float64 " << b[k] << " (atol "
             << options.float32_atol << ", rtol " << options.float32_rtol << ")";
          return failed(what, check, os.str());
        }
      }
      if (!out64[i].requires_grad()) continue;
      Tensor seed64 = randn(out64[i].shape(), DType::Float64);
      roots64.push_back(out64[i]);
      seeds64.push_back(seed64);
      roots32.push_back(out32[i]);
      seeds32.push_back(seed64.to(DType::Float32));
    }
    if (roots64.empty()) return {};
    backward(roots64, seeds64);
    backward(roots32, seeds32);
    for (size_t k = 0; k < in64.size(); ++k) {
      if (!wants_grad(in64[k])) continue;
      std::ostringstream os;
      Tensor g32 = in32[k].grad(), g64 = in64[k].grad();
      if (!g32.defined() || !g64.defined()) {
        os << "input " << k << " got no gradient in " << (g32.defined() ? "float64" : "float32");
        return failed(what, check, os.str());
      }
      if (g32.dtype() != DType::Float32) {
        os << "the gradient of input " << k << " is " << dtype_name(g32.dtype()) << " in the float32 run";
        return failed(what, check, os.str());
      }
      std::vector<double> a = g32.to(DType::Float64).to_vector<double>(), b = g64.to_vector<double>();
      double scale = 0;
      for (double v : b) scale = std::max(scale, std::abs(v));
      for (size_t e = 0; e < a.size(); ++e) {
        if (!(std::abs(a[e] - b[e]) <= options.float32_grad_tol * (1 + scale))) {
          os << "gradient of input " << k << " element " << e << ": float32 " << a[e] << ", float64 " << b[e]
             << " (tolerance " << options.float32_grad_tol << " x (1 + " << scale << "))";
          return failed(what, check, os.str());
        }
      }
    }
    return {};
  });
}

GradcheckResult check_sample_each_input_alone(const std::string& what, const SampleCase& sample, uint64_t seed,
                                              const OpCheckOptions&) {
  return guarded(what, "each input alone", [&]() -> GradcheckResult {
    const std::string check = "each input alone";
    EnableGradGuard grad_on;
    manual_seed(seed);
    std::vector<Tensor> all = sample.make_inputs(DType::Float64);
    std::vector<Tensor> outs = sample.run(all);
    std::vector<Tensor> roots, seeds, seed_of(outs.size());  // seed_of[i]: output i's, if it requires grad
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      seed_of[i] = randn(outs[i].shape(), DType::Float64);
      roots.push_back(outs[i]);
      seeds.push_back(seed_of[i]);
    }
    if (roots.empty()) return {};
    backward(roots, seeds);
    for (size_t k = 0; k < all.size(); ++k) {
      if (!wants_grad(all[k])) continue;
      std::vector<Tensor> only_k;
      for (size_t j = 0; j < all.size(); ++j) {
        if (!all[j].defined() || !is_floating(all[j].dtype())) {
          only_k.push_back(all[j]);
          continue;
        }
        Tensor c = all[j].detach();
        if (j == k) c.requires_grad_();
        only_k.push_back(c);
      }
      std::vector<Tensor> outs_k = sample.run(only_k);
      // The outputs that depend on input k (an output of other inputs alone requires no grad now),
      // each with the seed it had when every input required grad.
      std::vector<Tensor> roots_k, seeds_k;
      std::ostringstream os;
      for (size_t i = 0; i < outs_k.size() && i < outs.size(); ++i) {
        if (!outs_k[i].requires_grad()) continue;
        if (!seed_of[i].defined()) {
          os << "with only input " << k << " requiring grad, output " << i
             << " requires grad, but not when every input does";
          return failed(what, check, os.str());
        }
        roots_k.push_back(outs_k[i]);
        seeds_k.push_back(seed_of[i]);
      }
      if (roots_k.empty()) {
        os << "with only input " << k << " requiring grad, no output requires grad";
        return failed(what, check, os.str());
      }
      backward(roots_k, seeds_k);
      if (!only_k[k].grad().defined()) {
        os << "with only input " << k << " requiring grad, it got no gradient";
        return failed(what, check, os.str());
      }
      std::vector<double> a = only_k[k].grad().to_vector<double>(), b = all[k].grad().to_vector<double>();
      for (size_t e = 0; e < a.size(); ++e) {
        if (!(std::abs(a[e] - b[e]) <= 1e-12 * (1 + std::abs(b[e])))) {
          os << "gradient of input " << k << " element " << e << " is " << a[e]
             << " when it alone requires grad, but " << b[e] << " when every input does";
          return failed(what, check, os.str());
        }
      }
    }
    return {};
  });
}

OpCheckResult check_samples(const std::string& op_name, const std::vector<SampleCase>& samples,
                            const OpCheckOptions& options) {
  OpCheckResult result;
  std::ostringstream failures;
  auto note = [&](const GradcheckResult& r) {
    if (r.ok) return;
    result.ok = false;
    failures << r.message << "\n";
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string what = op_name + " / " + samples[i].name;
    note(check_sample_gradcheck(what, samples[i], OpCheckSeeds::gradcheck(i), options));
    if (options.check_float32) note(check_sample_float32(what, samples[i], OpCheckSeeds::float32(i), options));
    if (options.check_each_input_alone)
      note(check_sample_each_input_alone(what, samples[i], OpCheckSeeds::each_input(i), options));
    if (options.check_second_derivatives)
      note(check_sample_gradgradcheck(what, samples[i], OpCheckSeeds::gradgradcheck(i), options));
    ++result.samples;
  }
  if (samples.empty()) {
    result.ok = false;
    failures << op_name << ": no sample cases to check (OpDef::samples, or CustomOp::add_sample for a user's op)\n";
  }
  result.message = failures.str();
  return result;
}

OpCheckResult check_op(const OpDef& op, const OpCheckOptions& options) {
  OpCheckOptions o = options;
  o.check_second_derivatives = o.check_second_derivatives || op.twice_differentiable;
  return check_samples(op.name, op.samples ? op.samples() : std::vector<SampleCase>{}, o);
}

}  // namespace tg
