#include "fashion_mnist.h"

#include <filesystem>

#include "../framework/check.h"
#include "../framework/idx.h"

namespace tg::data {

ImageDataset load_fashion_mnist(const std::string& split, const std::string& data_dir) {
  TG_CHECK(split == "train" || split == "test", "load_fashion_mnist: expected split \"train\" or \"test\", got \"",
           split, "\"");
  const std::string prefix = data_dir + "/" + (split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& p : {images_path, labels_path}) {
    TG_CHECK(std::filesystem::exists(p), "load_fashion_mnist: ", p, " not found; install the dataset with "
             "`apt-get install dataset-fashion-mnist` (it goes to ", kFashionMnistDir,
             ") or pass the folder that holds the four .gz files");
  }
  ImageDataset ds{load_idx_images(images_path), load_idx_labels(labels_path)};
  TG_CHECK(ds.images.size(0) == ds.labels.size(0), "load_fashion_mnist: ", images_path, " has ", ds.images.size(0),
           " images but ", labels_path, " has ", ds.labels.size(0), " labels");
  const int64_t* labels = ds.labels.data<int64_t>();
  for (int64_t i = 0; i < ds.labels.numel(); ++i) {
    TG_CHECK(labels[i] >= 0 && labels[i] < 10, "load_fashion_mnist: ", labels_path, ": label ", i, " is ",
             labels[i], ", expected a class in [0, 10)");
  }
  return ds;
}

}  // namespace tg::data
