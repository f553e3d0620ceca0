#include "dataset.h"

#include <algorithm>
#include <numeric>

#include "../framework/check.h"

namespace tg::data {

void check_sample_index(const char* fn, int64_t i, int64_t size) {
  TG_CHECK(i >= 0 && i < size, fn, ": index ", i, " is out of range for a dataset of ", size, " samples");
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  TG_CHECK(!tensors_.empty(), "TensorDataset: expected at least one tensor, got none");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    TG_CHECK(t.defined(), "TensorDataset: tensor ", k, " is undefined");
    TG_CHECK(t.dim() >= 1, "TensorDataset: tensor ", k, " is 0-dim; expected a first dim of samples");
    TG_CHECK(t.size(0) == tensors_[0].size(0), "TensorDataset: tensor ", k, " has shape ", format_shape(t.shape()),
             " but tensor 0 has shape ", format_shape(tensors_[0].shape()),
             "; expected every tensor to have the same size of dim 0 (the number of samples)");
  }
  size_ = tensors_[0].size(0);
}

std::vector<Tensor> TensorDataset::get(int64_t i) const {
  check_sample_index("TensorDataset::get", i, size_);
  std::vector<Tensor> sample;
  sample.reserve(tensors_.size());
  for (const Tensor& t : tensors_) sample.push_back(t.select(0, i));
  return sample;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  TG_CHECK(dataset_ != nullptr, "Subset: dataset is null");
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    TG_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: indices[", k, "] is ", indices_[k],
             ", out of range for a dataset of ", n, " samples");
}

std::vector<Tensor> Subset::get(int64_t i) const {
  check_sample_index("Subset::get", i, size());
  return dataset_->get(indices_[static_cast<size_t>(i)]);
}

std::shared_ptr<Dataset> first_samples(std::shared_ptr<const Dataset> dataset, int64_t n) {
  TG_CHECK(dataset != nullptr, "first_samples: dataset is null");
  TG_CHECK(n >= 0, "first_samples: n: expected >= 0, got ", n);
  std::vector<int64_t> indices(static_cast<size_t>(std::min(n, dataset->size())));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}

}  // namespace tg::data
