// Storage: one aligned, reference-counted buffer shared by a tensor and its views, with the
// version counter that in-place writes bump (saved tensors compare against it at backward).
// Every byte the framework allocates passes through here and is counted.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tg {

class Storage {
 public:
  explicit Storage(size_t nbytes);  // uninitialised contents
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Bumped when a recorded in-place op gives one handle to this memory a new history. Every
  // other handle (a view, a sibling view) then holds history that no longer matches the values,
  // which the tape regenerates or refuses where it is read (framework/inplace.h).
  uint64_t history_epoch() const { return history_epoch_.load(std::memory_order_relaxed); }
  const char* last_rebase_op() const { return last_rebase_op_.load(std::memory_order_relaxed); }
  void bump_history_epoch(const char* op) {
    last_rebase_op_.store(op, std::memory_order_relaxed);
    history_epoch_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> history_epoch_{0};
  std::atomic<const char*> last_rebase_op_{nullptr};
};

struct MemoryStats {
  int64_t allocated_bytes;  // live now
  int64_t peak_bytes;       // high-water mark since start or the last reset_peak_memory()
  int64_t allocations;      // number of live buffers
};

MemoryStats memory_stats();
void reset_peak_memory();

}  // namespace tg
