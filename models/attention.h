// MultiheadAttention with the semantics and parameter names of PyTorch's nn.MultiheadAttention
// (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias), so weights load by name.
#pragma once

#include <memory>

#include "linear.h"
#include "module.h"

namespace tg {

struct AttentionOutput {
  Tensor output;   // (B, L, E) with batch_first, else (L, B, E)
  Tensor weights;  // (B, L, S), averaged over heads; undefined unless need_weights
};

class MultiheadAttention : public Module {
 public:
  // PyTorch's init: xavier_uniform_ in_proj_weight, zero biases, out_proj as a Linear. `gen`
  // draws the initial weights and, as Dropout's, the attention dropout's masks (it must
  // outlive the module); the default generator when null.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, DType dtype = DType::Float32, Generator* gen = nullptr);
  std::string name() const override { return "MultiheadAttention"; }

  // query (L, B, E), key and value (S, B, E) (batch first: (B, L, E), (B, S, E)); unbatched,
  // as PyTorch: query (L, E), key and value (S, E), key_padding_mask (S), attn_mask (L, S) or
  // (num_heads, L, S), output (L, E) and weights (L, S).
  // key_padding_mask (B, S): non-zero marks a key to ignore (PyTorch's True).
  // attn_mask (L, S) or (B * num_heads, L, S): floating masks are added to the scores,
  // integer masks mark with non-zero the pairs to ignore (added as -inf, as PyTorch adds a bool
  // mask: a query whose keys are all ignored gets NaN outputs and NaN gradients, as in PyTorch).
  // Both masks are added when both are given (PyTorch 1.13 instead turns every non-zero value
  // of a floating key_padding_mask into -inf when attn_mask is a bool one, and refuses or drops
  // a floating key_padding_mask beside a floating attn_mask).
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                          const Tensor& attn_mask = Tensor());

  int64_t embed_dim, num_heads, head_dim;
  double dropout_p;
  bool batch_first;
  Tensor in_proj_weight;  // (3E, E): the query, key and value projections stacked
  Tensor in_proj_bias;    // (3E) or undefined
  std::shared_ptr<Linear> out_proj;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
  Generator* gen_;
};

}  // namespace tg
