// Loading Fashion-MNIST for the examples: both splits, the training split optionally cut to
// its first `limit` items (0: all), for quick runs.
#pragma once

#include <tapegrad/tapegrad.h>

#include <string>
#include <utility>

namespace tg::examples {

inline std::pair<data::ImageDataset, data::ImageDataset> load_fashion_mnist_splits(const std::string& data_dir, int64_t limit) {
  data::ImageDataset train = data::load_fashion_mnist("train", data_dir);
  data::ImageDataset test = data::load_fashion_mnist("test", data_dir);
  if (limit > 0 && limit < train.images.size(0)) {
    train.images = train.images.narrow(0, 0, limit).contiguous();
    train.labels = train.labels.narrow(0, 0, limit).contiguous();
  }
  return {train, test};
}

}  // namespace tg::examples
