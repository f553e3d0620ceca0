// The op registry: op name -> backward, differentiable inputs and sample cases.
//
// Every differentiable op has one OpDef, defined beside its kernels. A tape entry points at
// its OpDef, and backward dispatches through it. The sample cases let one generic test
// gradcheck every registered op without a test of its own (tests/test_registry_gradcheck.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor.h"

namespace tg {

class BackwardContext;

// Receives the gradients of the entry's outputs (zeros where no gradient arrived) and returns
// one gradient per differentiable input, in OpDef::inputs order: a defined tensor of the
// input's shape and dtype where ctx.needs_grad(i), an undefined Tensor elsewhere.
using BackwardFn = std::vector<Tensor> (*)(const BackwardContext& ctx, const std::vector<Tensor>& grad_outputs);

// A small case for the generic gradcheck: make_inputs builds fresh inputs in the given
// floating dtype (the differentiable ones with requires_grad set), run calls the op's public
// function and returns its differentiable outputs.
struct SampleCase {
  std::string name;
  std::function<std::vector<Tensor>(DType)> make_inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;
};

struct OpDef {
  const char* name;           // forward op name, as in PyTorch: "grid_sample"
  const char* backward_name;  // "grid_sample_backward"
  const char* inputs;         // the differentiable inputs, in order: "input, grid"
  BackwardFn backward;
  std::vector<SampleCase> (*samples)();  // may be null for internal ops (then not gradchecked)
  // Whether backward may run with create_graph: its gradients are computed by recorded ops
  // from saved tensors that are the op's own inputs or outputs, so they can be differentiated
  // again. The generic registry test gradgradchecks every op that says so; create_graph
  // reaching an op that does not is a tg::Error, never a silent zero.
  bool twice_differentiable = false;
};

class Registry {
 public:
  void add(const OpDef& op);  // throws when the name is taken by another OpDef
  const OpDef* find(const std::string& name) const;  // null when absent
  std::vector<const OpDef*> ops() const;            // sorted by name
  std::string table() const;  // "forward  backward  inputs  samples", one op a line

 private:
  std::vector<const OpDef*> ops_;
};

}  // namespace tg
