#include "recompute.h"

namespace tg {

namespace {

std::vector<Tensor> cut_backward(const BackwardContext&, const std::vector<Tensor>& g) { return {g[0]}; }

// An identity entry in front of each composite input. tg::grad then asks for the gradients at
// these entries, so it takes the composite's partial derivatives only: it never runs into the
// inputs' own history, even where one input depends on another. And since it wants entries'
// gradients only (no leaf's), it does not even walk that history: the entries recorded before
// the cuts cannot lead to them (tape.cpp's Engine::oldest_wanted), so each recomputation costs
// the composite's size, not the graph's.
const OpDef kCutOp{"recompute_input", "recompute_input_backward", "self", cut_backward, nullptr, true};

Tensor cut(const Tensor& t) {
  Tensor alias = t.detach();
  if (Recorder rec{kCutOp, {t}}) rec.set_outputs({alias});
  return alias;
}

}  // namespace

std::vector<Tensor> recomputed_backward(const BackwardContext& ctx, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& grad_outputs, const CompositeFn& composite) {
  std::vector<Tensor> cuts(inputs.size()), wrt;
  std::vector<size_t> wanted;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    Tensor in = inputs[i];
    // a stand-in, behind a cut too: a wanted leaf would make tg::grad walk the whole graph
    if (!in.requires_grad() && ctx.needs_grad(static_cast<int>(i))) in = in.detach().requires_grad_();
    cuts[i] = in.requires_grad() ? cut(in) : in.detach();
    if (ctx.needs_grad(static_cast<int>(i))) {
      wrt.push_back(cuts[i]);
      wanted.push_back(i);
    }
  }
  std::vector<Tensor> outputs = composite(cuts);
  std::vector<Tensor> roots, seeds;
  for (size_t k = 0; k < outputs.size() && k < grad_outputs.size(); ++k) {
    if (!outputs[k].requires_grad()) continue;
    roots.push_back(outputs[k]);
    seeds.push_back(grad_outputs[k]);
  }
  std::vector<Tensor> grads(inputs.size());
  if (roots.empty() || wrt.empty()) return grads;
  std::vector<Tensor> got = grad(roots, wrt, seeds, /*retain_graph=*/false, /*allow_unused=*/true,
                                 /*create_graph=*/true);
  for (size_t j = 0; j < wanted.size(); ++j)
    grads[wanted[j]] = got[j].defined() ? got[j] : zeros_like(inputs[wanted[j]]);
  return grads;
}

}  // namespace tg
