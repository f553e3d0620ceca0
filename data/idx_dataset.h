// Image classification datasets from a pair of IDX files (framework/idx.h: MNIST's format), as
// tg::data::Dataset: sample i is {image float32 [1, H, W] in [0, 1], label int64 []}, so the
// DataLoader's batches are {[B, 1, H, W], [B]}, what a convolution and cross_entropy take.
#pragma once

#include <string>

#include "../framework/tensor.h"
#include "dataset.h"

namespace tg::data {

struct ImageDataset {
  Tensor images;  // float32 [N, H, W] in [0, 1] (Fashion-MNIST: [N, 28, 28])
  Tensor labels;  // int64 [N]
};

class IdxDataset : public TensorDataset {
 public:
  // images_path: an IDX file of shape (N, H, W) of bytes; labels_path: one of shape (N). A
  // count that differs between the two is a tg::Error naming both files.
  IdxDataset(const std::string& images_path, const std::string& labels_path);
  // Tensors already loaded: images [N, H, W], labels int64 [N].
  explicit IdxDataset(const ImageDataset& loaded);

  const Tensor& images() const { return tensors()[0]; }  // [N, 1, H, W]
  const Tensor& labels() const { return tensors()[1]; }  // [N]
};

}  // namespace tg::data
