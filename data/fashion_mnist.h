// Fashion-MNIST (Zalando's 28x28 grey images of 10 kinds of clothing), as Debian's
// dataset-fashion-mnist package installs it: four gzip IDX files (framework/idx.h reads them).
#pragma once

#include <string>

#include "../framework/tensor.h"
#include "idx_dataset.h"

namespace tg::data {

// Where Debian's dataset-fashion-mnist package installs the four gzip IDX files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads Fashion-MNIST's "train" (60000 items) or "test" (10000) split from data_dir, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (the names of the original distribution).
// A missing file gives a message that says to `apt-get install dataset-fashion-mnist`; images
// and labels that disagree in count, or a label outside [0, 10), throw tg::Error.
// images float32 [N, 28, 28] in [0, 1], labels int64 [N], each in [0, 10).
ImageDataset load_fashion_mnist(const std::string& split, const std::string& data_dir = kFashionMnistDir);

// The same split as a Dataset (torchvision's FashionMNIST with ToTensor): sample i is
// {image float32 [1, 28, 28] in [0, 1], label int64 []}; a DataLoader's batches are
// {[B, 1, 28, 28], [B]}. images() and labels() are the whole split, for evaluation in bulk.
class FashionMNIST : public IdxDataset {
 public:
  explicit FashionMNIST(const std::string& split, const std::string& data_dir = kFashionMnistDir)
      : IdxDataset(load_fashion_mnist(split, data_dir)) {}
};

}  // namespace tg::data
