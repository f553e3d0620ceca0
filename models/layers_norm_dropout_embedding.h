// LayerNorm, Dropout and Embedding modules over tg::layer_norm, tg::dropout and tg::embedding.
#pragma once

#include <optional>

#include "../framework/random.h"
#include "module.h"

namespace tg {

// Normalises over the trailing dims `normalized_shape`; weight (ones) and bias (zeros) of that
// shape when elementwise_affine, as torch.nn.LayerNorm.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     DType dtype = DType::Float32);
  std::string name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;  // undefined without elementwise_affine
};

// Zeroes elements with probability p and scales the rest by 1/(1-p) while training; the
// identity after eval(). No parameters.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  std::string name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;

  double p;

 private:
  Generator* gen_;
};

// A lookup table: weight (num_embeddings, embedding_dim) initialised N(0, 1) (the padding row
// zeroed), forward(indices int64 of any shape) -> (*indices.shape, embedding_dim).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            DType dtype = DType::Float32, Generator* gen = nullptr);
  std::string name() const override { return "Embedding"; }
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // normalised to be non-negative
  Tensor weight;
};

}  // namespace tg
