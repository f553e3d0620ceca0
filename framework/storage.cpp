#include "storage.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace tg {

namespace {
std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_count{0};

// 64 bytes: one cache line, and the width of an AVX-512 register.
constexpr size_t kAlignment = 64;

// Freed buffers of 64 KB and more are kept, up to 64 MB in all (the oldest go first), and
// handed out again for a request of the same rounded size. glibc gives blocks this large back
// to the kernel when they are freed (munmap, or trimming the top of the heap), so every new
// MB-sized tensor was fresh memory: a page fault per 4 KB page on first touch, hundreds per
// forward + backward of one op. A training loop asks for the same sizes step after step.
// The cache is not counted in memory_stats(), which reports the tensors' live bytes.
class BlockCache {
 public:
  static constexpr size_t kMinBlock = size_t{64} << 10;
  static constexpr size_t kMaxBytes = size_t{64} << 20;

  void* take(size_t nbytes) {
    if (nbytes < kMinBlock) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = blocks_.size(); i-- > 0;) {  // the most recently freed first: warm in cache
      if (blocks_[i].nbytes != nbytes) continue;
      void* p = blocks_[i].data;
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
      bytes_ -= nbytes;
      return p;
    }
    return nullptr;
  }

  // Keeps p, or frees it; also frees the oldest blocks to stay under kMaxBytes.
  void give(void* p, size_t nbytes) {
    if (nbytes < kMinBlock || nbytes > kMaxBytes) {
      std::free(p);
      return;
    }
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (bytes_ + nbytes > kMaxBytes) {
        evicted.push_back(blocks_.front().data);
        bytes_ -= blocks_.front().nbytes;
        blocks_.erase(blocks_.begin());
      }
      blocks_.push_back({p, nbytes});
      bytes_ += nbytes;
    }
    for (void* q : evicted) std::free(q);
  }

 private:
  struct Block {
    void* data;
    size_t nbytes;
  };
  std::mutex mutex_;
  std::vector<Block> blocks_;  // oldest first
  size_t bytes_ = 0;
};

// Never destroyed: a tensor that outlives static destruction can still be freed.
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;
  return *cache;
}

size_t rounded_size(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}
}  // namespace

Storage::Storage(size_t nbytes) : nbytes_(nbytes) {
  const size_t rounded = rounded_size(nbytes);
  data_ = block_cache().take(rounded);
  if (!data_) data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  int64_t now = g_allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  g_count.fetch_add(1);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

Storage::~Storage() {
  block_cache().give(data_, rounded_size(nbytes_));
  g_allocated.fetch_sub(static_cast<int64_t>(nbytes_));
  g_count.fetch_sub(1);
}

MemoryStats memory_stats() { return {g_allocated.load(), g_peak.load(), g_count.load()}; }

void reset_peak_memory() { g_peak.store(g_allocated.load()); }

}  // namespace tg
