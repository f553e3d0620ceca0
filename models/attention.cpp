// Scaled dot-product attention over num_heads heads of head_dim = E / num_heads channels.
// Shape legend: B batch, L queries, S keys, E embedding, H heads, D head_dim.
//
//   q, k, v = x W_{q,k,v}^T + b            (B, L|S, E) -> (B, H, L|S, D)
//   scores  = (q / sqrt(D)) k^T + masks    (B, H, L, S)
//   out     = softmax(scores) v            -> (B, L, E) -> out_proj
#include "attention.h"

#include <cmath>
#include <limits>

#include "../ops/dropout.h"
#include "../ops/elementwise.h"
#include "../ops/matmul.h"
#include "../ops/reduce.h"
#include "../ops/softmax.h"
#include "../ops/where.h"
#include "init.h"

namespace tg {

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, double dropout, bool bias,
                                       bool batch_first_, DType dtype, Generator* gen)
    : embed_dim(embed_dim_), num_heads(num_heads_), dropout_p(dropout), batch_first(batch_first_), gen_(gen) {
  TG_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
           "MultiheadAttention: expected embed_dim (", embed_dim, ") to be a positive multiple of num_heads (",
           num_heads, ")");
  TG_CHECK(dropout >= 0 && dropout <= 1, "MultiheadAttention: expected dropout in [0, 1], got ", dropout);
  head_dim = embed_dim / num_heads;
  in_proj_weight = register_parameter("in_proj_weight", zeros({3 * embed_dim, embed_dim}, dtype));
  init::xavier_uniform_(in_proj_weight, 1.0, gen);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}, dtype));
  out_proj = add_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, dtype, gen));
  if (bias) init::zeros_(out_proj->bias);
}

namespace {

// (B, T, E) -> (B, H, T, D)
Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), T = x.size(1), E = x.size(2);
  return x.reshape({B, T, heads, E / heads}).permute({0, 2, 1, 3});
}

Tensor projection(const Tensor& x, const Tensor& w, const Tensor& b, int64_t index, int64_t E) {
  return linear(x, w.narrow(0, index * E, E), b.defined() ? b.narrow(0, index * E, E) : Tensor());
}

// A mask as the term added to the scores: a floating one as it is, an integer one (PyTorch's
// bool) as -inf where non-zero and 0 elsewhere, as PyTorch turns a bool mask into a float one.
// Added, not written with masked_fill: where a query's keys are all masked its softmax is NaN,
// and the gradients through it must be NaN too, as PyTorch's (masked_fill's backward would
// drop them, giving finite gradients under a NaN output).
Tensor additive_mask(const Tensor& m, DType dtype) {
  if (is_floating(m.dtype())) return m.to(dtype);
  return masked_fill(zeros(m.shape(), dtype), m, -std::numeric_limits<double>::infinity());
}

}  // namespace

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const Tensor& key_padding_mask, bool need_weights,
                                            const Tensor& attn_mask) {
  const char* op = "MultiheadAttention";
  TG_CHECK(query.defined() && key.defined() && value.defined(), op, ": expected query, key and value");
  if (query.dim() == 2 && key.dim() == 2 && value.dim() == 2) {  // unbatched: a batch of one
    TG_CHECK(!key_padding_mask.defined() || key_padding_mask.dim() == 1, op,
             ": expected a 1-D key_padding_mask [S] with unbatched (2-D) query, key and value, got ",
             format_shape(key_padding_mask.shape()));
    const int64_t b = batch_first ? 0 : 1;
    const AttentionOutput r =
        forward(query.unsqueeze(b), key.unsqueeze(b), value.unsqueeze(b),
                key_padding_mask.defined() ? key_padding_mask.unsqueeze(0) : Tensor(), need_weights, attn_mask);
    return {r.output.squeeze(b), r.weights.defined() ? r.weights.squeeze(0) : Tensor()};
  }
  TG_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, op,
           ": expected 3-D (batched) or 2-D (unbatched) query, key and value, got ", format_shape(query.shape()),
           ", ", format_shape(key.shape()), ", ", format_shape(value.shape()));
  Tensor q_in = batch_first ? query : query.transpose(0, 1);
  Tensor k_in = batch_first ? key : key.transpose(0, 1);
  Tensor v_in = batch_first ? value : value.transpose(0, 1);
  const int64_t B = q_in.size(0), L = q_in.size(1), S = k_in.size(1), E = embed_dim, H = num_heads;
  TG_CHECK(q_in.size(2) == E && k_in.size(2) == E && v_in.size(2) == E, op, ": expected embedding size ", E,
           ", got query ", format_shape(query.shape()), ", key ", format_shape(key.shape()), ", value ",
           format_shape(value.shape()));
  TG_CHECK(k_in.size(0) == B && v_in.size(0) == B && v_in.size(1) == S, op,
           ": key and value must have the batch of query and one length, got query ", format_shape(query.shape()),
           ", key ", format_shape(key.shape()), ", value ", format_shape(value.shape()));

  Tensor q = split_heads(projection(q_in, in_proj_weight, in_proj_bias, 0, E), H);
  Tensor k = split_heads(projection(k_in, in_proj_weight, in_proj_bias, 1, E), H);
  Tensor v = split_heads(projection(v_in, in_proj_weight, in_proj_bias, 2, E), H);

  Tensor scores = matmul(mul(q, 1.0 / std::sqrt(static_cast<double>(head_dim))), k.transpose(-2, -1));
  if (attn_mask.defined()) {
    Tensor m = attn_mask;
    if (m.dim() == 3) {
      TG_CHECK(m.shape() == (Shape{B * H, L, S}), op, ": expected a 3-D attn_mask of shape ",
               format_shape({B * H, L, S}), ", got ", format_shape(m.shape()));
      m = m.reshape({B, H, L, S});
    } else {
      TG_CHECK(m.shape() == (Shape{L, S}), op, ": expected attn_mask of shape ", format_shape({L, S}), " or ",
               format_shape({B * H, L, S}), ", got ", format_shape(m.shape()));
    }
    scores = add(scores, additive_mask(m, scores.dtype()));
  }
  if (key_padding_mask.defined()) {
    TG_CHECK(key_padding_mask.shape() == (Shape{B, S}), op, ": expected key_padding_mask of shape ",
             format_shape({B, S}), ", got ", format_shape(key_padding_mask.shape()));
    scores = add(scores, additive_mask(key_padding_mask.reshape({B, 1, 1, S}), scores.dtype()));
  }
  Tensor attn = dropout(softmax(scores, -1), dropout_p, is_training(), gen_);
  Tensor out = matmul(attn, v).permute({0, 2, 1, 3}).reshape({B, L, E});
  out = out_proj->forward(out);
  if (!batch_first) out = out.transpose(0, 1);
  return {out, need_weights ? mean(attn, {1}) : Tensor()};
}

}  // namespace tg
