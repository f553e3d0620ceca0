// The generic checks of an op, on its sample cases: the checks the registry test runs on every
// built-in op (tests/test_registry_gradcheck.cpp), callable on any op, a user's included
// (tg::check_custom_op in framework/custom_op.h).
//
// For each sample case (SampleCase in framework/registry.h):
//   gradcheck    finite differences in float64 (tg::gradcheck, which also checks that two
//                backward runs give the same bits, that a zero output gradient gives zero
//                input gradients, and that backward adds into an existing .grad())
//   float32      the float32 path (outputs and gradients) against the float64 one
//   each_input   with only input k requiring grad, backward gives input k the same gradient
//                as with every input requiring grad (the output mask is honoured)
//
// Each check seeds the default generator (manual_seed) before building its inputs, so a
// result is the same from run to run.
#pragma once

#include <string>
#include <vector>

#include "gradcheck.h"
#include "registry.h"

namespace tg {

struct OpCheckOptions {
  GradcheckOptions gradcheck;  // tolerances of the float64 finite differences
  bool check_float32 = true;
  // float32 carries ~7 digits; small samples lose at most a few of them.
  double float32_rtol = 1e-4;        // outputs: |f32 - f64| <= atol + rtol * |f64|
  double float32_atol = 1e-5;
  double float32_grad_tol = 1e-4;    // gradients: |f32 - f64| <= tol * (1 + max |f64|)
  bool check_each_input_alone = true;
  // gradgradcheck on every sample too; check_op and check_custom_op turn it on for an op that
  // declares itself twice differentiable.
  bool check_second_derivatives = false;
};

struct OpCheckResult {
  bool ok = true;
  int samples = 0;      // sample cases checked
  std::string message;  // one line per failure: op / sample / check: what differed
  explicit operator bool() const { return ok; }
};

// One check on one sample case; `seed` goes to manual_seed before the inputs are built.
// `what` names the op and the sample in a failure message. Exceptions thrown by the op are
// caught and reported as failures.
GradcheckResult check_sample_gradcheck(const std::string& what, const SampleCase& sample, uint64_t seed,
                                       const OpCheckOptions& options = {});
GradcheckResult check_sample_float32(const std::string& what, const SampleCase& sample, uint64_t seed,
                                     const OpCheckOptions& options = {});
GradcheckResult check_sample_gradgradcheck(const std::string& what, const SampleCase& sample, uint64_t seed,
                                           const OpCheckOptions& options = {});
GradcheckResult check_sample_each_input_alone(const std::string& what, const SampleCase& sample, uint64_t seed,
                                              const OpCheckOptions& options = {});

// Every enabled check on every sample case. Fails (with a message) when there are no samples.
OpCheckResult check_samples(const std::string& op_name, const std::vector<SampleCase>& samples,
                            const OpCheckOptions& options = {});

// A registered op, on the sample cases of its OpDef.
OpCheckResult check_op(const OpDef& op, const OpCheckOptions& options = {});

// The seeds check_samples gives sample i's checks (those the registry test has always used).
struct OpCheckSeeds {
  static uint64_t gradcheck(size_t sample_index) { return 1234 + sample_index; }
  static uint64_t float32(size_t sample_index) { return 99 + sample_index; }
  static uint64_t each_input(size_t sample_index) { return 7 + sample_index; }
  static uint64_t gradgradcheck(size_t sample_index) { return 4321 + sample_index; }
};

}  // namespace tg
