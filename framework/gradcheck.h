// Finite-difference gradient checking, in the manner of torch.autograd.gradcheck.
//
// The analytical Jacobian (from the tape's backward) is compared with central differences in
// float64. Full mode builds the whole Jacobian (small inputs); fast mode compares one random
// projection u^T J v per input (large inputs), as torch's fast_mode does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor.h"

namespace tg {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // Full Jacobian while (outputs x inputs) elements stay below this, fast mode above it (PyTorch
  // checks the full Jacobian unless asked; a projection can miss an error confined to a few
  // elements: raise this, up to INT64_MAX, for a full check of a large op).
  int64_t full_jacobian_limit = 40000;
  bool force_fast_mode = false;
  uint64_t seed = 0;  // for the fast mode's projections and the random output gradients
  // The extra checks, all on by default.
  bool check_repeatable = true;        // two backward runs give the same bits
  bool check_zero_grad_output = true;  // a zero output gradient gives zero input gradients
  // backward adds into an existing .grad(): a real backward, after which every .grad() it
  // reached is put back as it was (hooks on those leaves do run)
  bool check_accumulates = true;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // on failure: which check, which input, the worst element, both values
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Checks the gradients of fn's outputs with respect to every input that requires grad. Inputs
// must be float64 where they require grad (others pass through unchanged). Outputs that do not
// require grad when fn runs on the tape are not checked, as PyTorch's (when none does, their
// finite differences must be zero). A failure names the input and its element, the output and
// its element. fn must be deterministic; it is called many times.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// Second derivatives, as torch.autograd.gradgradcheck: the first-order gradients of fn's
// outputs (for fixed random output gradients v) with respect to its inputs, computed through
// the tape with create_graph, are gradchecked as a function of the inputs and v. Every op fn
// uses must be twice differentiable (OpDef::twice_differentiable).
GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace tg
