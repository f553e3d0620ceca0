#include "distributed_data_parallel.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <string>

#include "../framework/check.h"
#include "../framework/grad_mode.h"
#include "../framework/tape.h"

namespace tg {

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;  // indices into State::params
    std::vector<int64_t> offsets;
    Tensor flat;                 // the bucket's gradients, one after the other
    int ready = 0;
    bool launched = false;
    dist::Work work;
  };
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<size_t> bucket_of;   // parameter -> bucket
  std::vector<char> param_ready;  // this pass
  // Parameters this rank gave a gradient since the last reduction (no_sync passes included): one
  // that no rank used keeps its .grad() as it was, as PyTorch's reducer leaves it.
  std::vector<char> used_since_sync;
  Tensor used_anywhere;  // int32, one per parameter, reduced with max beside the last bucket
  dist::Work used_work;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;
  size_t launched_before_end = 0;  // next_launch when the last pass's backward ended
  bool in_pass = false;
  uint64_t pass = 0;
  bool syncing = true;     // false inside no_sync
  double wait_seconds = 0;
  std::chrono::steady_clock::time_point backward_end{};

  void start_pass() {
    in_pass = true;
    pass = backward_pass_count();
    next_launch = 0;
    std::fill(param_ready.begin(), param_ready.end(), 0);
    for (Bucket& b : buckets) {
      b.ready = 0;
      b.launched = false;
    }
    std::weak_ptr<State> self = shared;
    queue_backward_callback([self] {
      if (auto s = self.lock()) s->finish_pass();
    });
  }

  // Copies the bucket's gradients into its flat buffer (zeros for a parameter without one; a
  // .grad() left from an earlier reduction, the same on every rank, counts as PyTorch counts it).
  void pack(Bucket& b) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      const Tensor& p = params[b.params[j]];
      Tensor slot = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.shape());
      const Tensor g = p.grad();
      if (g.defined())
        detail::raw_copy_(slot, g);
      else
        detail::raw_fill_(slot, 0.0);
    }
  }

  // Starts every bucket that is next in order and complete (or all of them at the end).
  void launch_ready(bool all) {
    while (next_launch < buckets.size()) {
      Bucket& b = buckets[next_launch];
      if (!all && b.ready < int(b.params.size())) break;
      pack(b);
      b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::Avg);
      b.launched = true;
      ++next_launch;
    }
    for (size_t i = 0; i < next_launch; ++i) (void)buckets[i].work.is_completed();  // lets MPI progress
  }

  void on_gradient(size_t param) {
    used_since_sync[param] = 1;
    if (!syncing) return;
    if (!in_pass || pass != backward_pass_count()) start_pass();
    if (param_ready[param]) return;
    param_ready[param] = 1;
    ++buckets[bucket_of[param]].ready;
    launch_ready(false);
  }

  void finish_pass() {
    if (!in_pass) return;
    backward_end = std::chrono::steady_clock::now();
    launched_before_end = next_launch;
    launch_ready(true);
    int32_t* used = used_anywhere.data<int32_t>();
    for (size_t k = 0; k < params.size(); ++k) used[k] = used_since_sync[k];
    used_work = dist::all_reduce_async(used_anywhere, dist::ReduceOp::Max);  // after every bucket, on every rank
    for (Bucket& b : buckets) b.work.wait();
    used_work.wait();
    wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - backward_end).count();
    std::fill(used_since_sync.begin(), used_since_sync.end(), 0);
    NoGradGuard no_grad;
    for (Bucket& b : buckets)
      for (size_t j = 0; j < b.params.size(); ++j) {
        if (!used[b.params[j]]) continue;  // no rank used it: its .grad() stays as it was
        Tensor p = params[b.params[j]];
        const Tensor averaged = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.shape());
        if (p.grad().defined()) {
          Tensor g = p.grad();
          detail::raw_copy_(g, averaged);
        } else {
          p.set_grad(averaged.clone());
        }
      }
    in_pass = false;
  }

  std::weak_ptr<State> shared;  // itself, for the callback it queues
};

namespace {

// Every rank must hold the same model: the same parameters (trainable or not) and buffers, by
// name, dtype and shape, in the same order. Compared through a hash of their list, with the
// counts for the message; a mismatch is a tg::Error on every rank, before the broadcasts that
// would otherwise pair different tensors (or hang on a different number of them).
void check_same_model_everywhere(Module& module) {
  std::string list;
  int64_t n_params = 0, n_trainable = 0, n_buffers = 0, elements = 0;
  auto add = [&](const std::string& kind, const std::string& name, const Tensor& t) {
    list += kind + " " + name + " " + dtype_name(t.dtype()) + " " + format_shape(t.shape()) + "\n";
    elements += t.numel();
  };
  for (const auto& [name, p] : module.named_parameters()) {
    add(p.requires_grad() ? "trainable" : "frozen", name, p);
    ++n_params;
    n_trainable += p.requires_grad();
  }
  for (const auto& [name, b] : module.named_buffers()) {
    add("buffer", name, b);
    ++n_buffers;
  }
  const int64_t hash = int64_t(std::hash<std::string>{}(list) >> 1);
  const std::vector<Tensor> all =
      dist::all_gather(from_vector(std::vector<int64_t>{hash, n_params, n_trainable, n_buffers, elements}, {5}));
  auto describe = [](const std::vector<int64_t>& v) {
    return std::to_string(v[1]) + " parameters (" + std::to_string(v[2]) + " trainable), " + std::to_string(v[3]) +
           " buffers, " + std::to_string(v[4]) + " elements";
  };
  const std::vector<int64_t> first = all[0].to_vector<int64_t>();
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<int64_t> other = all[r].to_vector<int64_t>();
    const std::string got = describe(first) == describe(other)
                                ? describe(first) + " on rank 0 and on rank " + std::to_string(r) +
                                      ", but not the same names, dtypes, shapes or order"
                                : describe(first) + " on rank 0 and " + describe(other) + " on rank " + std::to_string(r);
    TG_CHECK(other == first, "DistributedDataParallel: module: expected the same parameters and buffers (names, ",
             "dtypes, shapes, which require grad) on every rank, got ", got);
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module& module, DistributedDataParallelOptions options)
    : module_(module), options_(options), state_(std::make_shared<State>()) {
  TG_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb: expected > 0, got ",
           options.bucket_cap_mb);
  TG_CHECK(options.first_bucket_mb > 0, "DistributedDataParallel: first_bucket_mb: expected > 0, got ",
           options.first_bucket_mb);
  State& s = *state_;
  s.shared = state_;
  const StateDict named = module.named_parameters();
  for (const auto& [name, p] : named) {
    if (!p.requires_grad()) continue;
    s.names.push_back(name);
    s.params.push_back(p);
  }
  check_same_model_everywhere(module);
  {  // rank 0's values everywhere
    NoGradGuard no_grad;
    for (const auto& [name, p] : named) {
      Tensor t = p.detach();
      dist::broadcast(t, 0);
    }
  }
  sync_buffers();
  // Buckets: reverse registration order, one dtype each, about bucket_cap_mb each (the first at
  // most first_bucket_mb).
  auto bytes_of_mb = [](double mb) {  // 2^43 MB and more: no cap (and no overflow of int64)
    return mb >= 0x1p43 ? std::numeric_limits<int64_t>::max() : int64_t(mb * 1024 * 1024);
  };
  const int64_t full_cap = bytes_of_mb(options.bucket_cap_mb);
  const int64_t first_cap = std::min(full_cap, bytes_of_mb(options.first_bucket_mb));
  s.bucket_of.assign(s.params.size(), 0);
  s.param_ready.assign(s.params.size(), 0);
  s.used_since_sync.assign(s.params.size(), 0);
  s.used_anywhere = zeros({int64_t(s.params.size())}, DType::Int32);
  int64_t bytes = 0;
  for (size_t k = s.params.size(); k-- > 0;) {
    const Tensor& p = s.params[k];
    const int64_t size = p.numel() * int64_t(dtype_size(p.dtype()));
    const int64_t cap = s.buckets.size() <= 1 ? first_cap : full_cap;
    const bool fresh = s.buckets.empty() || bytes + size > cap ||
                       s.params[s.buckets.back().params.front()].dtype() != p.dtype();
    if (fresh) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    State::Bucket& b = s.buckets.back();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    s.bucket_of[k] = s.buckets.size() - 1;
    bytes += size;
  }
  for (State::Bucket& b : s.buckets) {
    const Tensor& last = s.params[b.params.back()];
    b.flat = zeros({b.offsets.back() + last.numel()}, last.dtype());
  }
  if (dist::world_size() == 1) return;  // nothing to reduce
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < s.params.size(); ++k)
    s.params[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto st = weak.lock()) st->on_gradient(k);
    });
}

// The hooks hold the state weakly: once this object is gone they do nothing.
DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers) sync_buffers();
  return module_.forward(x);
}

void DistributedDataParallel::sync_buffers() {
  if (dist::world_size() == 1) return;
  NoGradGuard no_grad;
  for (const auto& [name, b] : module_.named_buffers()) {
    Tensor t = b.detach();
    dist::broadcast(t, 0);
  }
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->syncing) {
  ddp.state_->syncing = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->syncing = previous_; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const State::Bucket& b : state_->buckets) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(state_->names[k]);
  }
  return out;
}

double DistributedDataParallel::last_wait_seconds() const { return state_->wait_seconds; }

std::chrono::steady_clock::time_point DistributedDataParallel::last_backward_end() const {
  return state_->backward_end;
}

int64_t DistributedDataParallel::buckets_started_in_backward() const {
  const State& s = *state_;
  return int64_t(s.in_pass ? s.next_launch : s.launched_before_end);
}

double DistributedDataParallel::blocking_reduction_seconds(int repeats) {
  std::vector<double> times;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    dist::barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (State::Bucket& b : state_->buckets) {
      Tensor scratch = zeros(b.flat.shape(), b.flat.dtype());
      dist::all_reduce(scratch);
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace tg
