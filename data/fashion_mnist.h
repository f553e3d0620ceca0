// Fashion-MNIST (Zalando's 28x28 grey images of 10 kinds of clothing), as Debian's
// dataset-fashion-mnist package installs it: four gzip IDX files (framework/idx.h reads them).
#pragma once

#include <string>

#include "../framework/tensor.h"

namespace tg::data {

// Where Debian's dataset-fashion-mnist package installs the four gzip IDX files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
  Tensor images;  // float32 [N, 28, 28] in [0, 1]
  Tensor labels;  // int64 [N], each in [0, 10)
};

// Loads Fashion-MNIST's "train" (60000 items) or "test" (10000) split from data_dir, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (the names of the original distribution).
// A missing file gives a message that says to `apt-get install dataset-fashion-mnist`; images
// and labels that disagree in count, or a label outside [0, 10), throw tg::Error.
ImageDataset load_fashion_mnist(const std::string& split, const std::string& data_dir = kFashionMnistDir);

}  // namespace tg::data
