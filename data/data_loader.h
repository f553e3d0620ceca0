// DataLoader (PyTorch's torch.utils.data.DataLoader): batches of a dataset in a range-for, in a
// shuffled order drawn from a seed, built on a background thread while the step runs.
//
//   auto train = std::make_shared<tg::data::FashionMNIST>("train");
//   tg::data::DataLoader loader(train, tg::data::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (const std::vector<tg::Tensor>& batch : loader) {  // {images [B, 1, 28, 28], labels [B]}
//       tg::Tensor loss = tg::cross_entropy(model.forward(batch[0]), batch[1]);
//       ...
//     }
//
// Epochs. Each pass (each begin(), i.e. each range-for) uses the loader's epoch() and then
// advances it by one, so the passes of a program read epochs 0, 1, 2, ... with no call needed;
// set_epoch(e) makes the next pass epoch e (to resume a run). The order of epoch e is a pure
// function of (dataset size, shuffle, seed, e): the permutation of a tg::Generator seeded by
// seed + e (as PyTorch's DistributedSampler seeds it), or, with a sampler, the sampler's
// indices() after set_epoch(e).
//
// Batches. Batch b holds the samples order[b * batch_size, ...), batch_size of them (the last
// may be smaller, or is dropped with drop_last); the collate turns that list of samples into
// the batch. The default, default_collate (data/collate.h), stacks each field along a new dim 0:
// samples of {image [1, 28, 28], label []} give {[B, 1, 28, 28], [B]}. Without a collate of its
// own the loader asks the dataset for the whole batch (Dataset::get_batch), which a
// TensorDataset gathers row by row without a tensor per sample.
//
// Prefetch. With prefetch(depth) (the default: 2), a thread of the loader builds the next
// batches, up to `depth` ahead, while the caller's step runs; prefetch(false) builds each batch
// when the loop asks for it. Both build the same batches with the same code, in the same order:
// their bits are identical. Batches are built with grad mode off either way; the thread reads
// the dataset (see data/dataset.h for what get() may touch) and runs the collate with OpenMP
// limited to one thread, so it does not take cores from the step. An exception thrown while building a batch is rethrown to the
// loop (by begin() or ++, where the batch is asked for), and the pass ends; leaving the loop
// early (break, an exception from the step) stops and joins the thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "../framework/tensor.h"
#include "collate.h"
#include "dataset.h"
#include "sampler.h"

namespace tg::data {

class DataLoaderOptions {
 public:
  DataLoaderOptions& batch_size(int64_t n);
  DataLoaderOptions& shuffle(bool on) { shuffle_ = on; return *this; }
  DataLoaderOptions& seed(uint64_t s) { seed_ = s; return *this; }
  DataLoaderOptions& drop_last(bool on) { drop_last_ = on; return *this; }
  DataLoaderOptions& prefetch(bool on) { prefetch_ = on ? kDefaultPrefetch : 0; return *this; }
  DataLoaderOptions& prefetch(int depth);  // batches built ahead; 0 = off
  // The order of each epoch, instead of shuffle(): e.g. a DistributedSampler. The loader calls
  // its set_epoch at every pass; shuffle(true) with a sampler is an error (the sampler decides).
  DataLoaderOptions& sampler(std::shared_ptr<Sampler> s) { sampler_ = std::move(s); return *this; }
  DataLoaderOptions& collate(Collate fn) { collate_ = std::move(fn); return *this; }

  int64_t batch_size() const { return batch_size_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }
  int prefetch() const { return prefetch_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  const Collate& collate() const { return collate_; }

  static constexpr int kDefaultPrefetch = 2;

 private:
  int64_t batch_size_ = 1;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  bool drop_last_ = false;
  int prefetch_ = kDefaultPrefetch;
  std::shared_ptr<Sampler> sampler_;
  Collate collate_;  // empty: default_collate
};

class DataLoader {
 public:
  struct Pass;  // one pass over the data (data_loader.cpp): its order, its batches, its thread

  // The loop's iterator: an input iterator over one pass (copies share the pass).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = std::vector<Tensor>;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    Iterator() = default;  // the end
    reference operator*() const { return batch_; }
    pointer operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Pass> pass);
    bool at_end() const { return pass_ == nullptr; }
    void fetch();  // the next batch into batch_, or the end

    std::shared_ptr<Pass> pass_;
    std::vector<Tensor> batch_;
  };

  // The loader shares the dataset (and keeps it alive while a pass runs).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = DataLoaderOptions());
  // A dataset given by value is copied into the loader (a TensorDataset or FashionMNIST copy
  // shares its tensors); pass a std::shared_ptr to share one instead.
  template <class D, class = std::enable_if_t<std::is_base_of_v<Dataset, std::decay_t<D>>>>
  DataLoader(D&& dataset, DataLoaderOptions options = DataLoaderOptions())
      : DataLoader(std::make_shared<std::decay_t<D>>(std::forward<D>(dataset)), std::move(options)) {}

  // Starts a pass over epoch(), then advances epoch() by one.
  Iterator begin();
  Iterator end() const { return Iterator(); }

  int64_t size() const;            // batches per pass
  int64_t num_samples() const;     // samples per pass (before drop_last drops a partial batch)
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;  // options_.sampler(), or a RandomSampler from shuffle and seed
  int64_t epoch_ = 0;
};

}  // namespace tg::data
