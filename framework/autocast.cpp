#include "autocast.h"

#include <unordered_map>

#include "grad_mode.h"
#include "tape.h"

namespace tg {

namespace {

// One cached cast of a float32 parameter: the source is held, so that its TensorImpl (the key)
// cannot be freed and reused by another tensor while the entry lives.
struct CachedCast {
  Tensor source;
  uint64_t source_version;
  Tensor cast;
};

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::BFloat16;
  int nesting = 0;  // guards alive; the cache empties when the last one ends
  std::unordered_map<const TensorImpl*, CachedCast> cache[2];  // [0] bfloat16, [1] float16
};

thread_local AutocastState t_state;

std::unordered_map<const TensorImpl*, CachedCast>& cache_for(DType dtype) {
  return t_state.cache[dtype == DType::Float16 ? 1 : 0];
}

// PyTorch's rule: only float32 leaves that require grad (parameters) are cached, and not views.
bool cacheable(const Tensor& t) {
  return t.dtype() == DType::Float32 && t.requires_grad() && t.is_leaf() && !t.impl()->view_base;
}

// A cached cast still stands for its source: the source was not changed in place since, and
// under grad mode the copy carries the history that brings a gradient back (a copy made under
// NoGradGuard has none). Its entry saves nothing, so backward never frees it.
bool still_valid(const CachedCast& c) {
  if (c.source.version() != c.source_version) return false;
  return !GradMode::is_enabled() || c.cast.grad_fn();
}

}  // namespace

bool is_autocast_enabled() { return t_state.enabled; }
DType autocast_dtype() { return t_state.dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(t_state.enabled), previous_dtype_(t_state.dtype) {
  TG_CHECK(dtype == DType::BFloat16 || dtype == DType::Float16,
           "AutocastGuard: expected dtype to be bfloat16 or float16, got ", dtype_name(dtype));
  t_state.enabled = enabled;
  t_state.dtype = dtype;
  ++t_state.nesting;
}

AutocastGuard::~AutocastGuard() {
  t_state.enabled = previous_enabled_;
  t_state.dtype = previous_dtype_;
  if (--t_state.nesting == 0)
    for (auto& c : t_state.cache) c.clear();
}

AutocastSuspend::AutocastSuspend() : previous_enabled_(t_state.enabled) { t_state.enabled = false; }
AutocastSuspend::~AutocastSuspend() { t_state.enabled = previous_enabled_; }

namespace autocast {

Tensor lower_one(const Tensor& t) {
  const DType target = t_state.dtype;
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::Float64 || t.dtype() == target) return t;
  if (!cacheable(t)) return t.to(target);
  auto& cache = cache_for(target);
  auto it = cache.find(t.impl());
  if (it != cache.end() && still_valid(it->second)) return it->second.cast;
  Tensor cast = t.to(target);
  cache.insert_or_assign(t.impl(), CachedCast{t, t.version(), cast});
  return cast;
}

Tensor to_float32_one(const Tensor& t) {
  if (!t.defined() || !is_reduced_floating(t.dtype())) return t;
  return t.to(DType::Float32);
}

size_t cache_size() { return t_state.cache[0].size() + t_state.cache[1].size(); }

}  // namespace autocast

}  // namespace tg
