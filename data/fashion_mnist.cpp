#include "fashion_mnist.h"

#include <filesystem>

#include "../framework/check.h"
#include "../framework/idx.h"

namespace tg::data {
namespace {

constexpr int64_t kSide = 28;  // Fashion-MNIST's images are 28x28, which the examples' models assume

// What to do about a missing or wrong data folder, the end of each message about it.
std::string where_to_get_it() {
  return std::string("; install the dataset with `apt-get install dataset-fashion-mnist` (it goes to ") +
         kFashionMnistDir + ") or pass the folder that holds the four .gz files";
}

// The folder itself first: otherwise an empty path searches "/train-images-..." and a file
// given as the folder is reported as "<file>/train-images-... not found".
void check_data_dir(const std::string& data_dir) {
  namespace fs = std::filesystem;
  TG_CHECK(!data_dir.empty(), "load_fashion_mnist: the data folder is an empty path", where_to_get_it());
  std::error_code ec;
  const fs::file_status st = fs::status(data_dir, ec);
  TG_CHECK(fs::exists(st), "load_fashion_mnist: the data folder ", data_dir, " does not exist", where_to_get_it());
  TG_CHECK(fs::is_directory(st), "load_fashion_mnist: the data folder ", data_dir, " is not a folder",
           where_to_get_it());
}

}  // namespace

FashionMnistFiles fashion_mnist_files(const std::string& split, const std::string& data_dir) {
  TG_CHECK(split == "train" || split == "test", "load_fashion_mnist: expected split \"train\" or \"test\", got \"",
           split, "\"");
  const std::string prefix = data_dir + "/" + (split == "train" ? "train" : "t10k");
  return {prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz"};
}

ImageDataset load_fashion_mnist(const std::string& split, const std::string& data_dir) {
  const FashionMnistFiles files = fashion_mnist_files(split, data_dir);
  check_data_dir(data_dir);
  for (const std::string& p : {files.images, files.labels})
    TG_CHECK(std::filesystem::exists(p), "load_fashion_mnist: ", p, " not found", where_to_get_it());
  ImageDataset ds{load_idx_images(files.images), load_idx_labels(files.labels)};
  // An empty split trains on nothing (a NaN loss) or divides by zero test images; images of
  // another size fail deep inside the first Linear layer, naming neither file.
  TG_CHECK(ds.images.size(0) > 0, "load_fashion_mnist: ", files.images, " holds no images; the ", split,
           " split needs at least one");
  TG_CHECK(ds.images.size(1) == kSide && ds.images.size(2) == kSide, "load_fashion_mnist: ", files.images,
           " holds images of ", ds.images.size(1), "x", ds.images.size(2), " pixels, expected Fashion-MNIST's ", kSide,
           "x", kSide);
  TG_CHECK(ds.images.size(0) == ds.labels.size(0), "load_fashion_mnist: ", files.images, " has ", ds.images.size(0),
           " images but ", files.labels, " has ", ds.labels.size(0), " labels");
  const int64_t* labels = ds.labels.data<int64_t>();
  for (int64_t i = 0; i < ds.labels.numel(); ++i) {
    TG_CHECK(labels[i] >= 0 && labels[i] < 10, "load_fashion_mnist: ", files.labels, ": label ", i, " is ",
             labels[i], ", expected a class in [0, 10)");
  }
  return ds;
}

}  // namespace tg::data
