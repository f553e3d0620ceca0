#include "layers_norm_dropout_embedding.h"

#include "../framework/grad_mode.h"
#include "../ops/dropout.h"
#include "../ops/embedding.h"
#include "../ops/layer_norm.h"
#include "init.h"

namespace tg {

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine, DType dtype)
    : normalized_shape(std::move(shape)), eps(eps_) {
  TG_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t d : normalized_shape)
    TG_CHECK(d > 0, "LayerNorm: normalized_shape must be positive, got ", format_shape(normalized_shape));
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape, dtype));
    bias = register_parameter("bias", zeros(normalized_shape, dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

Dropout::Dropout(double p_, Generator* gen) : p(p_), gen_(gen) {
  TG_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), gen_); }

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, DType dtype, Generator* gen)
    : num_embeddings(num), embedding_dim(dim) {
  TG_CHECK(num >= 0 && dim >= 0, "Embedding: expected non-negative num_embeddings and embedding_dim, got ", num,
           " and ", dim);  // an empty table is PyTorch's too (any index into it is then an error)
  if (pad) {
    TG_CHECK(*pad >= -num && *pad < num, "Embedding: padding_idx must be within num_embeddings, got ", *pad);
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = register_parameter("weight", Tensor::empty({num, dim}, dtype));
  init::normal_(weight, 0.0, 1.0, gen);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

}  // namespace tg
