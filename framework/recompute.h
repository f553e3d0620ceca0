// Double backward by recomputation, for ops whose kernels have no recorded form: under
// create_graph, an op's backward may return the vector-Jacobian product of the same function
// spelled in recorded ops (a composite), taken through the tape. Its gradients then carry
// history to the op's inputs and to the output gradients, and can be differentiated again.
//
//   std::vector<Tensor> my_op_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
//     if (ctx.create_graph())
//       return recomputed_backward(ctx, {ctx.saved(kInput), ctx.saved(kScale)}, g, [](const std::vector<Tensor>& in) {
//         return std::vector<Tensor>{mul(in[0], exp(in[1]))};    // the op, in recorded ops
//       });
//     ...the fast kernel...
//   }
//
// The composite must compute exactly the op's function; the registry's gradgradcheck of the op
// verifies it. Inputs are the op's inputs as ctx.saved gives them under create_graph (with
// history); one that was not saved (a bias that backward does not read) may be a stand-in of
// the right shape: only its shape matters, as long as the op is affine in it.
#pragma once

#include <functional>
#include <vector>

#include "tape.h"

namespace tg {

using CompositeFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

std::vector<Tensor> recomputed_backward(const BackwardContext& ctx, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& grad_outputs, const CompositeFn& composite);

}  // namespace tg
