// Data parallelism across processes (PyTorch's DistributedDataParallel), on tg::dist
// (framework/dist.h). Every rank holds the whole model and runs its own share of each batch;
// after backward every rank has the gradient of the whole batch, averaged over the ranks, so the
// optimizer steps stay identical everywhere.
//
//   tg::dist::init();
//   auto model = std::make_shared<Net>();
//   tg::DistributedDataParallel ddp(*model);        // rank 0's parameters and buffers everywhere
//   tg::Adam opt(model->parameters(), 1e-3);
//   for (...) {                                      // each rank: its shard of the batch
//     opt.zero_grad();
//     loss_fn(model->forward(x_local), y_local).backward();   // gradients averaged on return
//     opt.step();
//   }
//
// How: the parameters (in reverse registration order, the order backward tends to finish them)
// are packed into buckets of about bucket_cap_mb, one dtype each (the first one, whose gradients
// backward finishes first, of at most first_bucket_mb, as PyTorch does, so that communication
// starts early even for a model smaller than one bucket). A post-accumulate hook on each
// parameter counts it ready; a full bucket is copied into one flat buffer and its reduction
// starts (dist::all_reduce_async, Avg) while backward goes on, buckets always in the same order
// on every rank. When backward has delivered everything (a queued callback), the remaining
// buckets start (a parameter that got no gradient contributes zeros), every reduction is waited
// for and the averages are copied back into each parameter's .grad().
//
// With world_size() == 1 nothing is communicated. The model must be built the same on every
// rank (checked at construction). Gradient accumulation: backward passes inside a no_sync()
// scope only accumulate locally; the first backward after it reduces the accumulated gradients.
#pragma once

#include <chrono>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../framework/dist.h"
#include "module.h"

namespace tg {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;     // PyTorch's default
  double first_bucket_mb = 1;    // PyTorch's default (dist._DEFAULT_FIRST_BUCKET_BYTES)
  bool broadcast_buffers = true;  // forward() sends rank 0's buffers to every rank first
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(Module& module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  // module().forward(x), after sync_buffers() when broadcast_buffers is set.
  Tensor forward(const Tensor& x);
  // Rank 0's buffers (running statistics, ...) to every rank.
  void sync_buffers();

  // Inside the returned guard's scope backward does not reduce (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // The parameter names of each bucket, in reduction order (for tests and logs).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // What the reductions cost in the last synchronised backward: seconds spent waiting at the end
  // of backward for reductions that were not done (communication not hidden by backward).
  double last_wait_seconds() const;
  // When that backward's own work ended (its callback started waiting). On one machine every
  // process reads the same steady clock, so comparing ranks' times tells which arrived last: the
  // last to arrive waits only for communication, the others also for it (load imbalance). In a
  // world of one process nothing is reduced: the clock's epoch, and a wait of 0.
  std::chrono::steady_clock::time_point last_backward_end() const;
  // How many buckets the current synchronised backward has started reducing so far; once it has
  // ended, how many it started before its end, from the post-accumulate hooks, while the rest of
  // backward ran (the others start at its end). With every parameter getting its gradient that is
  // all of them; a parameter that gets none holds back its bucket and every later one. 0 in a
  // world of one process.
  int64_t buckets_started_in_backward() const;
  // The median time of reducing every bucket with nothing to overlap (blocking all_reduce calls
  // of the same sizes), over `repeats` rounds: what last_wait_seconds() would be if backward hid
  // none of the communication. Every rank must call it at the same point.
  double blocking_reduction_seconds(int repeats = 5);

  struct State;

 private:
  Module& module_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<State> state_;  // shared with the hooks (they outlive nothing: see the .cpp)
};

}  // namespace tg
