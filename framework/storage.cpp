#include "storage.h"

#include <cstdlib>
#include <new>

namespace tg {

namespace {
std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_count{0};

// 64 bytes: one cache line, and the width of an AVX-512 register.
constexpr size_t kAlignment = 64;
}  // namespace

Storage::Storage(size_t nbytes) : nbytes_(nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  int64_t now = g_allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  g_count.fetch_add(1);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

Storage::~Storage() {
  std::free(data_);
  g_allocated.fetch_sub(static_cast<int64_t>(nbytes_));
  g_count.fetch_sub(1);
}

MemoryStats memory_stats() { return {g_allocated.load(), g_peak.load(), g_count.load()}; }

void reset_peak_memory() { g_peak.store(g_allocated.load()); }

}  // namespace tg
