// Hand-written batching for the classifier examples (train_mlp, train_cnn): batches of rows of
// an [N, ...] float32 image tensor in a given order, and the accuracy of a model over a split.
// (tg::data::DataLoader will take the batching over.)
#pragma once

#include <tapegrad/tapegrad.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tg::examples {

// Rows `order[begin, end)` of a row-major [N, ...] float32 tensor and its int64 labels, as a
// batch x of shape [end - begin, *item_shape] (item_shape's elements: one row) and labels y.
inline void gather_batch(const Tensor& images, const Tensor& labels, const std::vector<int64_t>& order,
                         int64_t begin, int64_t end, const Shape& item_shape, Tensor& x, Tensor& y) {
  const int64_t row = images.numel() / images.size(0), n = end - begin;
  Shape shape{n};
  shape.insert(shape.end(), item_shape.begin(), item_shape.end());
  x = Tensor::empty(shape, DType::Float32);
  TG_CHECK(x.numel() == n * row, "gather_batch: item shape ", format_shape(item_shape), " does not hold a row of ",
           row, " values");
  y = Tensor::empty({n}, DType::Int64);
  const float* src = images.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  float* dst = x.data<float>();
  int64_t* dl = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * row, src + order[begin + i] * row, sizeof(float) * row);
    dl[i] = lab[order[begin + i]];
  }
}

// Fraction of `images` whose arg-max logit is the label, in eval mode (restored to train after).
inline double accuracy(Module& model, const Tensor& images, const Tensor& labels, int64_t batch,
                       const Shape& item_shape) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t n = images.size(0);
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  int64_t correct = 0;
  for (int64_t b = 0; b < n; b += batch) {
    Tensor x, y;
    gather_batch(images, labels, order, b, std::min(n, b + batch), item_shape, x, y);
    Tensor logits = model.forward(x);
    const int64_t rows = logits.size(0), classes = logits.size(1);
    std::vector<float> v = logits.to_vector<float>();
    const int64_t* t = y.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = v.data() + r * classes;
      correct += std::max_element(row, row + classes) - row == t[r];
    }
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace tg::examples
