#include "distributed_sampler.h"

#include "../framework/check.h"

namespace tg::data {

DistributedSampler::DistributedSampler(int64_t size, int rank, int world, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(size), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  TG_CHECK(size >= 0, "DistributedSampler: size: expected >= 0, got ", size);
  TG_CHECK(world >= 1, "DistributedSampler: world: expected >= 1, got ", world);
  TG_CHECK(rank >= 0 && rank < world, "DistributedSampler: rank: expected a rank in [0, ", world, "), got ", rank);
}

int64_t DistributedSampler::num_samples() const {
  return drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order = epoch_order(size_, shuffle_, seed_, epoch_);
  const int64_t total = num_samples() * world_;
  for (int64_t i = size_; i < total; ++i) order.push_back(order[static_cast<size_t>(i - size_)]);  // pad
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace tg::data
