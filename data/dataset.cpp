#include "dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "../framework/check.h"
#include "../framework/storage.h"

namespace tg::data {

void check_sample_index(const char* fn, int64_t i, int64_t size) {
  TG_CHECK(i >= 0 && i < size, fn, ": index ", i, " is out of range for a dataset of ", size, " samples");
}

std::vector<Tensor> Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<std::vector<Tensor>> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(get(i));
  return default_collate(samples);
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

std::vector<Tensor> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  TG_CHECK(!indices.empty(), "TensorDataset::get_batch: expected at least one index, got none");
  for (int64_t i : indices) check_sample_index("TensorDataset::get_batch", i, size_);
  const int64_t b = static_cast<int64_t>(indices.size());
  std::vector<Tensor> batch;
  batch.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    Shape shape = t.shape();
    shape[0] = b;
    Tensor out = Tensor::empty(shape, t.dtype());
    if (t.is_contiguous() && out.numel() > 0) {  // whole rows of bytes: what default_collate's element copy gives
      const size_t row = static_cast<size_t>(out.numel() / std::max<int64_t>(b, 1)) * dtype_size(t.dtype());
      const char* src = static_cast<const char*>(t.impl()->storage->data()) + t.offset() * dtype_size(t.dtype());
      char* dst = static_cast<char*>(out.impl()->storage->data());
      for (int64_t j = 0; j < b; ++j)
        std::memcpy(dst + static_cast<size_t>(j) * row, src + static_cast<size_t>(indices[static_cast<size_t>(j)]) * row,
                    row);
    } else {
      for (int64_t j = 0; j < b; ++j) {
        Tensor dst_row = out.select(0, j);
        detail::copy_into_new(dst_row, t.select(0, indices[static_cast<size_t>(j)]), "TensorDataset::get_batch");
      }
    }
    batch.push_back(std::move(out));
  }
  return batch;
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

std::vector<Tensor> Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    check_sample_index("Subset::get_batch", i, size());
    mapped.push_back(indices_[static_cast<size_t>(i)]);
  }
  return dataset_->get_batch(mapped);
}

std::shared_ptr<Dataset> first_samples(std::shared_ptr<const Dataset> dataset, int64_t n) {
  TG_CHECK(dataset != nullptr, "first_samples: dataset is null");
  TG_CHECK(n >= 0, "first_samples: n: expected >= 0, got ", n);
  std::vector<int64_t> indices(static_cast<size_t>(std::min(n, dataset->size())));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}

}  // namespace tg::data
