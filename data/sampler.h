// Samplers: the order in which a DataLoader reads a dataset's samples in one epoch (PyTorch's
// torch.utils.data.Sampler). The loader calls set_epoch(e) at the start of each pass over the
// data, then indices(); data/distributed_sampler.h's DistributedSampler is one, giving each
// process of a data-parallel run its shard.
#pragma once

#include <cstdint>
#include <vector>

namespace tg::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual void set_epoch(int64_t epoch) = 0;
  virtual int64_t num_samples() const = 0;        // indices() per epoch
  virtual std::vector<int64_t> indices() const = 0;  // this epoch's, in order
};

// 0 .. size - 1, in order every epoch, or shuffled with a generator seeded by seed + epoch (the
// permutation DistributedSampler draws, so one process of it reads what this does).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t size, bool shuffle, uint64_t seed);
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t num_samples() const override { return size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// The order of an epoch: 0 .. size - 1, shuffled by a generator seeded by seed + epoch (as
// PyTorch's DistributedSampler seeds it) when `shuffle`.
std::vector<int64_t> epoch_order(int64_t size, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace tg::data
