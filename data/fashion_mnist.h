// Fashion-MNIST (Zalando's 28x28 grey images of 10 kinds of clothing), as Debian's
// dataset-fashion-mnist package installs it: four gzip IDX files (framework/idx.h reads them).
#pragma once

#include <string>

#include "../framework/tensor.h"
#include "idx_dataset.h"

namespace tg::data {

// Where Debian's dataset-fashion-mnist package installs the four gzip IDX files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The paths of a split's two files in data_dir, {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
// (the names of the original distribution), e.g. for a program to refuse an output path that
// would overwrite one. A split other than "train" or "test" is a tg::Error.
struct FashionMnistFiles {
  std::string images, labels;
};
FashionMnistFiles fashion_mnist_files(const std::string& split, const std::string& data_dir = kFashionMnistDir);

// Loads Fashion-MNIST's "train" (60000 items) or "test" (10000) split from data_dir's two files
// (fashion_mnist_files). A data_dir that is empty, missing or not a folder, or a missing file,
// gives a message that says to `apt-get install dataset-fashion-mnist`; a split without images,
// images other than 28x28, images and labels that disagree in count, or a label outside
// [0, 10), throw tg::Error naming the file.
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
