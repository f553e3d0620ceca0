// Datasets (PyTorch's torch.utils.data.Dataset): a size and a sample by index, each sample a few
// tensors (an image and its label, say). tg::data::DataLoader (data/data_loader.h) batches them.
//
//   tg::data::TensorDataset ds({images, labels});  // images [N, ...], labels [N]
//   std::vector<tg::Tensor> sample = ds.get(7);     // {images[7], labels[7]}: views, no copy
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../framework/tensor.h"
#include "collate.h"

namespace tg::data {

// A dataset a DataLoader reads. With prefetching on, the loader calls get() on its own thread
// (one thread, in the order of the batches), while the training step runs on the caller's:
// get() must not touch state the caller changes meanwhile, such as the default generator (give
// a dataset with random augmentations a tg::Generator of its own; it is then deterministic).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<Tensor> get(int64_t i) const = 0;  // sample i, for 0 <= i < size()
  // The samples `indices` as one batch: default_collate of their get(i), which is what a
  // DataLoader without a collate of its own asks for. A dataset that can gather a batch faster
  // overrides it, and must give the same tensors, bit for bit.
  virtual std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const;
};

// Tensors that share their first dim N: sample i is row i of each (a view of it, sharing
// storage; the DataLoader's collate copies rows into the batch). Copying a TensorDataset shares
// the tensors, so it is cheap.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  std::vector<Tensor> get(int64_t i) const override;
  // Each tensor's rows `indices`, copied straight into the batch (no tensor per sample).
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The samples `indices` of another dataset, in that order (PyTorch's Subset): sample i is
// dataset->get(indices[i]). Indices are checked against the dataset's size on construction.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  std::vector<Tensor> get(int64_t i) const override;
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;  // the dataset's

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// The first min(n, dataset's size) samples of a dataset, e.g. for a quick run.
std::shared_ptr<Dataset> first_samples(std::shared_ptr<const Dataset> dataset, int64_t n);

// Throws a tg::Error naming `fn` unless 0 <= i < size.
void check_sample_index(const char* fn, int64_t i, int64_t size);

}  // namespace tg::data
