#include "idx_dataset.h"

#include "../framework/check.h"
#include "../framework/idx.h"

namespace tg::data {
namespace {

std::vector<Tensor> image_label_tensors(const ImageDataset& d, const std::string& where) {
  TG_CHECK(d.images.defined() && d.images.dim() == 3, "IdxDataset: ", where, ": expected images of shape [N, H, W], got ",
           d.images.defined() ? format_shape(d.images.shape()) : std::string("an undefined tensor"));
  TG_CHECK(d.labels.defined() && d.labels.dim() == 1 && d.labels.dtype() == DType::Int64, "IdxDataset: ", where,
           ": expected int64 labels of shape [N], got ",
           d.labels.defined() ? dtype_name(d.labels.dtype()) + std::string(" ") + format_shape(d.labels.shape())
                              : std::string("an undefined tensor"));
  TG_CHECK(d.images.size(0) == d.labels.size(0), "IdxDataset: ", where, " has ", d.images.size(0), " images but ",
           d.labels.size(0), " labels");
  return {d.images.unsqueeze(1), d.labels};
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path)
    : TensorDataset(image_label_tensors({load_idx_images(images_path), load_idx_labels(labels_path)},
                                        images_path + " and " + labels_path)) {}

IdxDataset::IdxDataset(const ImageDataset& loaded) : TensorDataset(image_label_tensors(loaded, "the tensors given")) {}

}  // namespace tg::data
