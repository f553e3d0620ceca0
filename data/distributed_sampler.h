// Which samples each process of a data-parallel run takes (PyTorch's DistributedSampler): every
// epoch the indices 0 .. size-1 are shuffled with a generator seeded by seed + epoch (the same
// order on every rank), then rank r takes positions r, r + world, r + 2 world, ... So the ranks'
// shards are disjoint and together are the whole epoch. When size is not a multiple of world, the
// order is padded with its first indices (every rank gets the same count; a few samples are seen
// twice), or with drop_last the tail is dropped instead. It is a Sampler: given to a DataLoader
// (DataLoaderOptions().sampler(...)), each rank's loader iterates its shard and sets the epoch.
#pragma once

#include <cstdint>
#include <vector>

#include "../framework/dist.h"
#include "sampler.h"

namespace tg::data {

class DistributedSampler : public Sampler {
 public:
  explicit DistributedSampler(int64_t size, int rank = dist::rank(), int world = dist::world_size(),
                              bool shuffle = true, uint64_t seed = 0, bool drop_last = false);
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const override;          // this rank's count per epoch
  std::vector<int64_t> indices() const override;  // this rank's, in order, for the current epoch

 private:
  int64_t size_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
};

}  // namespace tg::data
