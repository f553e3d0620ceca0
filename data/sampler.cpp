#include "sampler.h"

#include <numeric>

#include "../framework/check.h"
#include "../framework/random.h"

namespace tg::data {

std::vector<int64_t> epoch_order(int64_t size, bool shuffle, uint64_t seed, int64_t epoch) {
  if (shuffle) {
    Generator gen(seed + static_cast<uint64_t>(epoch));
    return randperm(size, &gen).to_vector<int64_t>();
  }
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t size, bool shuffle, uint64_t seed) : size_(size), shuffle_(shuffle), seed_(seed) {
  TG_CHECK(size >= 0, "RandomSampler: size: expected >= 0, got ", size);
}

std::vector<int64_t> RandomSampler::indices() const { return epoch_order(size_, shuffle_, seed_, epoch_); }

}  // namespace tg::data
