#include "tape.h"

#include "dump.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <cmath>
#include <cstring>
#include <ostream>
#include <unordered_map>
#include <string>
#include <unordered_set>
#include <utility>

#include "autocast.h"
#include "grad_mode.h"
#include "inplace.h"

namespace tg {

namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local std::ostream* t_trace = nullptr;
// The callbacks of the backward pass running on this thread (null outside one), and the passes
// started so far.
thread_local std::vector<std::function<void()>>* t_backward_callbacks = nullptr;
thread_local uint64_t t_backward_passes = 0;
thread_local uint64_t t_entries_walked = 0;

Tensor history_free(const Tensor& t) {
  if (!t.defined()) return t;
  return t.detach();
}

// a + b for two gradients of one shape, into a fresh tensor (either may alias others).
Tensor sum_gradients_values(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  Tensor out = a.clone();
  detail::raw_add_(out, b);  // the engine's accumulation: never recorded, never refused
  return out;
}

// The same as a recorded op, for a backward that is itself recorded (create_graph): the
// engine's own sums of gradients are part of the new graph.
std::vector<Tensor> grad_sum_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {ctx.needs_grad(0) ? g[0] : Tensor(), ctx.needs_grad(1) ? g[0] : Tensor()};
}
const OpDef kGradSumOp{"grad_sum", "grad_sum_backward", "a, b", grad_sum_backward, nullptr, true};

Tensor sum_gradients(const Tensor& a, const Tensor& b, bool create_graph) {
  Tensor out = sum_gradients_values(a, b);
  if (!create_graph) return out;
  if (Recorder rec{kGradSumOp, {a, b}}) rec.set_outputs({out});
  return out;
}

// A tensor sharing `t`'s storage and layout whose gradient goes to (fn, output_nr) or `leaf`.
Tensor with_history(const Tensor& t, const std::shared_ptr<Node>& fn, int output_nr) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->requires_grad = true;
  impl->grad_fn = fn;
  impl->output_nr = output_nr;
  impl->grad.reset();
  impl->hooks.clear();
  return Tensor(std::move(impl));
}

// The trace's |g|: unrecorded (the trace must not change the graph it shows) and from a
// contiguous copy (a gradient may be expanded or strided: float64 ones were read as if dense).
double norm_of(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor c = t.detach().to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  double s = 0;
  for (int64_t i = 0; i < c.numel(); ++i) s += p[i] * p[i];
  return std::sqrt(s);
}

}  // namespace

Tensor detail::sum_of_gradients(const Tensor& a, const Tensor& b) {
  return sum_gradients(a, b, GradMode::is_enabled());
}

Node::~Node() {
  // Destroying the last owner of a long chain would recurse once per entry. Instead, take over
  // this entry's references to other entries (its inputs' producers, and those of its saved
  // tensors, which may own the same producer a second time) and release them one at a time;
  // an entry is taken apart only when ours is its last reference.
  std::vector<std::shared_ptr<Node>> pending;
  auto take_references = [&pending](Node& n) {
    for (Edge& e : n.edges_)
      if (e.fn) pending.push_back(std::move(e.fn));
    for (SavedTensor& s : n.saved_)
      if (s.fn) pending.push_back(std::move(s.fn));
  };
  take_references(*this);
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    if (node.use_count() == 1) take_references(*node);
  }  // each `node` dies here (or lives on elsewhere) holding no entries, so it does not recurse
}

void Node::add_output_hook(int output_nr, GradHook hook) {
  if (output_hooks_.size() <= static_cast<size_t>(output_nr)) output_hooks_.resize(output_nr + 1);
  output_hooks_[output_nr].push_back(std::move(hook));
}

bool BackwardContext::needs_grad(int input) const {
  return input >= 0 && input < static_cast<int>(node_.edges_.size()) && node_.edges_[input].needs_grad();
}

Tensor BackwardContext::saved(int i) const {
  TG_CHECK(i >= 0 && i < static_cast<int>(node_.saved_.size()) && node_.saved_[i].tensor.defined(),
           node_.op_->backward_name, ": internal error: saved tensor ", i, " was not saved");
  const SavedTensor& s = node_.saved_[i];
  uint64_t now = s.tensor.version();
  TG_CHECK(now == s.version, node_.op_->backward_name, ": a tensor of shape ", format_shape(s.tensor.shape()),
           " saved by ", node_.op_->name, " for backward was modified in place: it was saved at version ",
           s.version, " and is now at version ", now,
           ". Clone it before changing it, or change it after backward.");
  if (!create_graph_) return s.tensor;
  if (s.output_nr_of_self >= 0)
    return with_history(s.tensor, std::const_pointer_cast<Node>(node_.shared_from_this()), s.output_nr_of_self);
  if (s.fn) return with_history(s.tensor, s.fn, s.output_nr);
  if (s.leaf) return Tensor(s.leaf);
  return s.tensor;
}

Tensor BackwardContext::input_history(int i, const Tensor& stand_in) const {
  TG_CHECK(!stand_in.defined() || stand_in.shape() == input_shape(i), node_.op_->backward_name,
           ": internal error: a stand-in of shape ", format_shape(stand_in.shape()), " for input ", i, " of shape ",
           format_shape(input_shape(i)));
  if (!create_graph_ || !needs_grad(i)) return stand_in;
  const Edge& e = node_.edges_[i];
  if (e.fn) return with_history(stand_in, e.fn, e.output_nr);
  return Tensor(e.leaf);
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

// The number of names in an OpDef::inputs list ("input, grid": 2) and whether the last is a
// list of any length ("tensors...").
std::pair<size_t, bool> declared_inputs(const char* names) {
  size_t n = 0;
  bool word = false;
  for (const char* c = names; *c != '\0'; ++c) {
    if (*c == ',') word = false;
    else if (*c != ' ' && !word) word = true, ++n;
  }
  const size_t length = std::strlen(names);
  return {n, length >= 3 && std::strcmp(names + length - 3, "...") == 0};
}

}  // namespace

Recorder::Recorder(const OpDef& op, std::vector<Tensor> inputs) {
  if (!GradMode::is_enabled()) return;
  // Before any_requires_grad: a stale tensor that does not require grad may be one that should
  // (its view was filled from a tensor that does), and its gradient would be lost in silence.
  for (const Tensor& t : inputs) detail::check_history_current(t, op.name);
  // Checked on every call in grad mode, not only when recording, so a test of the op without
  // gradients finds a mismatch too.
  const std::pair<size_t, bool> declared_list = declared_inputs(op.inputs);
  const size_t declared = declared_list.first;
  TG_CHECK(declared_list.second ? inputs.size() + 1 >= declared : inputs.size() == declared, op.name,
           ": internal error: recorded with ", inputs.size(), " inputs, but the op declares ", declared, " (",
           op.inputs, ")");
  if (!any_requires_grad(inputs)) return;
  node_ = std::make_shared<Node>(&op, g_next_sequence_nr.fetch_add(1));
  node_->edges_.resize(inputs.size());
  node_->input_meta_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    node_->input_meta_[i] = {t.shape(), t.dtype(), true};
    if (!t.requires_grad()) continue;
    Edge& e = node_->edges_[i];
    if (t.grad_fn()) {
      e.fn = t.grad_fn();
      e.output_nr = t.output_nr();
    } else {
      e.leaf = t.impl_ptr();
    }
  }
}

bool Recorder::needs_grad(int input) const {
  return node_ && input >= 0 && input < static_cast<int>(node_->edges_.size()) &&
         node_->edges_[input].needs_grad();
}

void Recorder::save(int slot, const Tensor& t) {
  TG_CHECK(slot >= 0 && slot < 64, node_->op_->name, ": internal error: saved slot ", slot, " out of range");
  if (static_cast<size_t>(slot) >= node_->saved_.size()) node_->saved_.resize(static_cast<size_t>(slot) + 1);
  TG_CHECK(!node_->saved_[slot].tensor.defined(), node_->op_->name, ": internal error: saved slot ", slot,
           " saved twice");
  node_->saved_[slot] = make_saved(t);
}

SavedTensor Recorder::make_saved(const Tensor& t) const {
  SavedTensor s;
  s.tensor = history_free(t);
  s.version = t.defined() ? t.version() : 0;
  if (t.defined()) {
    s.origin = t.impl();
    if (t.grad_fn() == node_) {
      s.output_nr_of_self = t.output_nr();  // saved after set_outputs
    } else if (t.grad_fn()) {
      s.fn = t.grad_fn();
      s.output_nr = t.output_nr();
    } else if (t.requires_grad()) {
      s.leaf = t.impl_ptr();
    }
  }
  return s;
}

void Recorder::save(std::vector<Tensor> tensors) {
  node_->saved_.clear();
  for (const Tensor& t : tensors) node_->saved_.push_back(make_saved(t));
}

void Recorder::set_outputs(const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* impl = outputs[i].impl();
    TG_CHECK(impl != nullptr, node_->op_->name, ": internal error: output ", i, " is undefined");
    TG_CHECK(is_floating(impl->dtype), node_->op_->name, ": internal error: output ", i,
             " is not floating and cannot carry a gradient");
    impl->requires_grad = true;
    impl->grad_fn = node_;
    impl->output_nr = static_cast<int>(i);
    impl->history_epoch = impl->storage->history_epoch();
    if (impl->retains_grad) detail::retain_grad_hook(outputs[i].impl_ptr());  // rebased in place
    node_->output_meta_.push_back({impl->shape, impl->dtype});
    for (SavedTensor& s : node_->saved_)  // saved before it became an output of this entry
      if (s.origin == impl) s.output_nr_of_self = static_cast<int>(i);
  }
}

// ---------------------------------------------------------------------------------------
// The engine.

struct Engine {
  // Where the caller of tg::grad wants a gradient captured instead of accumulated.
  struct Capture {
    std::unordered_map<const TensorImpl*, size_t> leaves;
    std::unordered_map<const Node*, std::vector<std::pair<int, size_t>>> outputs;  // (output_nr, slot)
    std::vector<Tensor> grads;
  };

  bool retain_graph = false;
  bool create_graph = false;
  Capture* capture = nullptr;  // null: accumulate into leaves' .grad()
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  // With a trace on: each entry's position in the graph, oldest first (tape_to_text's numbers).
  // The trace stream as the pass began (one set by a hook during the pass applies to the next).
  std::ostream* trace = nullptr;
  std::unordered_map<const Node*, size_t> trace_number;
  DType trace_dtype = DType::Float32;  // the first root's: the trace names the other dtypes
  // For tg::grad: the entries whose backward can reach a wanted gradient; the others only
  // have their gradients captured (if wanted) and are not run.
  std::unordered_set<const Node*> leads_to_capture;
  // For tg::grad when every wanted gradient is an entry's: the oldest of those entries. An entry
  // recorded before it cannot lead to one (its inputs are older still), so the walk does not
  // look behind it. Without this, each double backward by recomputation (framework/recompute.h)
  // walked the whole history behind its composite: quadratic in the length of the graph.
  uint64_t oldest_wanted = 0;  // 0: walk everything
  // Leaves with hooks (gradient hooks or post-accumulate hooks): the deliveries still to come in
  // this pass (one per edge of a reachable entry, one per root that is the leaf) and their sum so
  // far. The leaf gets the sum at the last delivery, so its hooks run once and see the pass's
  // whole gradient, as PyTorch's AccumulateGrad (a leaf used twice gets two deliveries; a
  // gradient hook run on each part gave a wrong .grad() for any hook not linear in its input);
  // a leaf whose remaining deliveries never come (an entry gave no gradient to it) gets what
  // arrived at the pass's end.
  struct Pending {
    std::shared_ptr<TensorImpl> leaf;
    int remaining = 0;
    Tensor sum;
  };
  std::unordered_map<TensorImpl*, Pending> pending_hooks;
  std::vector<TensorImpl*> pending_order;  // first seen first: the end-of-pass order

  static Tensor apply_hooks(const std::vector<GradHook>& hooks, Tensor g) {
    for (const GradHook& hook : hooks) {
      Tensor replaced = hook(g);
      if (replaced.defined()) {
        TG_CHECK(replaced.shape() == g.shape() && replaced.dtype() == g.dtype(),
                 "gradient hook: expected a gradient of shape ", format_shape(g.shape()), " and dtype ",
                 dtype_name(g.dtype()), ", got ", format_shape(replaced.shape()), " ",
                 dtype_name(replaced.dtype()));
        g = replaced;
      }
    }
    return g;
  }

  void add_to_buffer(Node* node, int output_nr, const Tensor& g) {
    std::vector<Tensor>& slots = buffers[node];
    if (slots.empty()) slots.resize(node->output_meta_.size());
    Tensor& slot = slots.at(output_nr);
    slot = slot.defined() ? sum_gradients(slot, g, create_graph) : g;
  }

  // g is the only handle to its TensorImpl, which is the only one to use its storage, all of it.
  static bool sole_owner(const Tensor& g) {
    const std::shared_ptr<TensorImpl>& impl = g.impl_ptr();
    return impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->requires_grad &&
           impl->offset == 0 && g.is_contiguous() &&
           impl->storage->nbytes() == size_t(g.numel()) * dtype_size(g.dtype());
  }

  void deliver_to_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    if (capture) {  // tg::grad: summed here; grad() runs the leaf's hooks once on the sum
      auto it = capture->leaves.find(leaf.get());
      if (it != capture->leaves.end()) {
        Tensor& slot = capture->grads[it->second];
        slot = slot.defined() ? sum_gradients(slot, g, create_graph) : g;
      }
      return;
    }
    auto it = pending_hooks.find(leaf.get());
    if (it != pending_hooks.end() && it->second.remaining > 0) {
      Pending& p = it->second;
      p.sum = p.sum.defined() ? sum_gradients(p.sum, g, create_graph) : g;
      if (--p.remaining > 0) return;
      g = std::move(p.sum);
      p.sum = Tensor();
      p.remaining = -1;  // delivered: the end of the pass skips it
    }
    accumulate_into_leaf(leaf, apply_hooks(leaf->hooks, std::move(g)));  // (moved: a sole owner is adopted)
  }

  // The leaf's whole gradient of the pass (hooks applied) into .grad(), then its post-accumulate
  // hooks.
  void accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    // A leaf frozen since the forward (requires_grad_(false)) gets nothing, as PyTorch's
    // AccumulateGrad.
    if (!leaf->requires_grad) return;
    if (create_graph) {
      // The gradient keeps its history: .grad() can be differentiated again. A clone, since g
      // may be handed to other inputs too (as add's backward does).
      leaf->grad = leaf->grad ? sum_gradients(Tensor(leaf->grad), g, true).impl_ptr() : g.clone().impl_ptr();
      run_post_accumulate_hooks(leaf);
      return;
    }
    if (!leaf->grad) {
      // Own the gradient. A gradient nothing else holds (no other handle, no other view of its
      // memory) is adopted as it is, as PyTorch steals it; otherwise it may alias a gradient
      // given to another input, or the caller's tensor, so the leaf gets a copy.
      if (sole_owner(g)) {
        leaf->grad = g.impl_ptr();
      } else {
        const Tensor dense = g.contiguous();  // a copy already when g is not contiguous
        leaf->grad = (dense.impl_ptr() == g.impl_ptr() ? g.clone() : dense).impl_ptr();
      }
    } else if (Tensor acc(leaf->grad); detail::shares_elements(acc)) {
      // a .grad set to an expanded tensor: adding into it would add several times into one
      // location, so the leaf gets the sum as a new tensor
      leaf->grad = sum_gradients_values(acc, g).impl_ptr();
    } else {
      detail::raw_add_(acc, g);
    }
    run_post_accumulate_hooks(leaf);
  }

  void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
    const Tensor handle(leaf);
    for (const PostAccumulateGradHook& hook : leaf->post_accumulate_hooks) hook(handle);
  }

  void count_pending(const std::shared_ptr<TensorImpl>& leaf) {
    if (leaf->hooks.empty() && leaf->post_accumulate_hooks.empty()) return;
    Pending& p = pending_hooks[leaf.get()];
    if (!p.leaf) {
      p.leaf = leaf;
      pending_order.push_back(leaf.get());
    }
    ++p.remaining;
  }

  void count_pending_hooks(const std::vector<Node*>& order, const std::vector<Tensor>& root_leaves) {
    for (const Tensor& r : root_leaves) count_pending(r.impl_ptr());
    for (const Node* n : order)
      for (const Edge& e : n->edges_)
        if (e.leaf) count_pending(e.leaf);
  }

  void deliver_remaining() {
    for (TensorImpl* impl : pending_order) {
      Pending& p = pending_hooks[impl];
      if (p.remaining > 0 && p.sum.defined()) accumulate_into_leaf(p.leaf, apply_hooks(impl->hooks, std::move(p.sum)));
    }
    pending_hooks.clear();
    pending_order.clear();
  }

  void deliver(const Edge& e, Tensor g) {
    if (e.fn)
      add_to_buffer(e.fn.get(), e.output_nr, g);
    else if (e.leaf)
      deliver_to_leaf(e.leaf, std::move(g));
  }

  // Every entry reachable from the roots, latest first. Sequence numbers grow in recording
  // order and an entry's inputs were always recorded before it, so this order guarantees
  // that all of an entry's gradient has arrived before the entry runs.
  // Entries older than `walk_from` are listed but not walked behind: their backwards do not run,
  // but one may still receive a gradient, and then its output hooks run (run_node).
  static std::vector<Node*> reachable_in_reverse(const std::vector<Node*>& roots, uint64_t walk_from) {
    std::vector<Node*> order;
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (Node* r : roots)
      if (r && seen.insert(r).second) stack.push_back(r);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      order.push_back(n);
      if (n->sequence_nr_ < walk_from) continue;
      for (const Edge& e : n->edges_)
        if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
    std::sort(order.begin(), order.end(),
              [](const Node* a, const Node* b) { return a->sequence_nr_ > b->sequence_nr_; });
    t_entries_walked += order.size();
    return order;
  }

  void trace_step(const Node& node, const std::vector<Tensor>& grad_outputs, const std::vector<Tensor>& grads) {
    std::ostream& os = *trace;
    // numbered as tape_to_text / tape_to_dot number the entries: by position in the graph
    os << "backward #" << trace_number.at(&node) << " " << node.op_->backward_name << ": grad_output";
    // (shapes and dtypes as tape_to_text prints them, against the first root's dtype)
    for (const Tensor& g : grad_outputs)
      os << " " << describe_tensor(g.shape(), g.dtype(), trace_dtype) << " |" << norm_of(g) << "|";
    os << " -> grad_input";
    for (const Tensor& g : grads) {
      if (g.defined())
        os << " " << describe_tensor(g.shape(), g.dtype(), trace_dtype) << " |" << norm_of(g) << "|";
      else
        os << " -";
    }
    os << "\n";
  }

  void run_node(Node& node) {
    auto it = buffers.find(&node);
    if (it == buffers.end()) return;  // no gradient reached this entry's outputs
    std::vector<Tensor> grad_outputs = std::move(it->second);
    buffers.erase(it);

    TG_CHECK(!node.released_, node.op_->backward_name,
             ": trying to backward through the graph a second time (its saved tensors were freed "
             "after the first backward). Pass retain_graph = true to the first backward if you need to.");

    for (size_t i = 0; i < grad_outputs.size(); ++i) {
      if (!grad_outputs[i].defined())
        grad_outputs[i] = zeros(node.output_meta_[i].shape, node.output_meta_[i].dtype);
      if (i < node.output_hooks_.size()) grad_outputs[i] = apply_hooks(node.output_hooks_[i], grad_outputs[i]);
    }
    if (capture) {
      auto c = capture->outputs.find(&node);
      if (c != capture->outputs.end())
        for (auto [output_nr, slot] : c->second) capture->grads[slot] = grad_outputs.at(output_nr);
      if (!leads_to_capture.count(&node)) return;  // nothing wanted lies behind this entry
    }

    std::vector<Tensor> grads;
    if (create_graph) {
      TG_CHECK(node.op_->twice_differentiable, node.op_->backward_name,
               ": double backward (create_graph = true) is not implemented for ", node.op_->name,
               "; its backward cannot be differentiated again");
      EnableGradGuard grad_on;  // the backward's ops record: a graph of the gradients
      grads = node.op_->backward(BackwardContext(node, true), grad_outputs);
    } else {
      NoGradGuard no_grad;  // backward does not record
      grads = node.op_->backward(BackwardContext(node), grad_outputs);
    }
    TG_CHECK(grads.size() == node.edges_.size(), node.op_->backward_name, ": internal error: returned ",
             grads.size(), " gradients for ", node.edges_.size(), " inputs");
    if (trace) trace_step(node, grad_outputs, grads);
    grad_outputs.clear();  // a gradient passed through (as by add) may then go to a leaf uncopied

    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node.edges_[i];
      if (!e.needs_grad()) continue;
      const Tensor& g = grads[i];
      TG_CHECK(g.defined(), node.op_->backward_name, ": internal error: no gradient for input ", i,
               " although it was asked for");
      TG_CHECK(g.shape() == node.input_meta_[i].shape && g.dtype() == node.input_meta_[i].dtype,
               node.op_->backward_name, ": internal error: gradient of input ", i, " has shape ",
               format_shape(g.shape()), " ", dtype_name(g.dtype()), ", expected ",
               format_shape(node.input_meta_[i].shape), " ", dtype_name(node.input_meta_[i].dtype));
      deliver(e, std::move(grads[i]));
    }
    if (!retain_graph) {
      // Only an entry that lost saved tensors refuses another backward, as PyTorch: one that
      // saved none (add, sum, expand, a cast) computes the same gradient again, so two losses
      // that share it can each run their own backward.
      for (const SavedTensor& s : node.saved_) node.released_ = node.released_ || s.tensor.defined();
      node.saved_.clear();
      node.saved_.shrink_to_fit();
    }
  }

  // Runs one pass, then the callbacks its hooks queued (queue_backward_callback).
  void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs) {
    // Each backward computes in the dtypes its forward ran in, whatever the caller's autocast
    // (framework/autocast.h); so do gradient hooks, callbacks and the engine's own sums.
    AutocastSuspend no_autocast;
    std::vector<std::function<void()>> callbacks;
    struct Scope {  // the pass's callback list is the thread's while it runs, also on throw
      std::vector<std::function<void()>>* previous;
      explicit Scope(std::vector<std::function<void()>>* mine) : previous(t_backward_callbacks) {
        t_backward_callbacks = mine;
        ++t_backward_passes;
      }
      ~Scope() { t_backward_callbacks = previous; }
    } scope(&callbacks);
    run_pass(roots, grad_outputs);
    for (size_t i = 0; i < callbacks.size(); ++i) {
      std::function<void()> f = std::move(callbacks[i]);  // a callback may queue more
      f();
    }
  }

  void run_pass(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs) {
    TG_CHECK(grad_outputs.empty() || grad_outputs.size() == roots.size(), "backward: got ", grad_outputs.size(),
             " gradients for ", roots.size(), " outputs");
    std::vector<Node*> root_nodes;
    std::vector<Tensor> root_leaves, root_leaf_grads;  // delivered once the pending counts are known
    for (size_t i = 0; i < roots.size(); ++i) {
      const Tensor& root = roots[i];
      TG_CHECK(root.defined(), "backward: output ", i, " is undefined");
      detail::check_history_current(root, "backward");
      TG_CHECK(root.requires_grad(), "backward: output ", i,
               " does not require grad and has no grad_fn (was it computed under NoGradGuard, or from "
               "tensors that do not require grad?)");
      Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
      if (!g.defined()) {
        TG_CHECK(root.numel() == 1, "backward: a gradient can be implied only for a scalar output; output ", i,
                 " has shape ", format_shape(root.shape()), ", so pass grad_output");
        g = ones(root.shape(), root.dtype());
      }
      TG_CHECK(g.shape() == root.shape(), "backward: expected grad_output of shape ", format_shape(root.shape()),
               ", got ", format_shape(g.shape()));
      TG_CHECK(g.dtype() == root.dtype(), "backward: expected grad_output of dtype ", dtype_name(root.dtype()),
               ", got ", dtype_name(g.dtype()));
      if (root.grad_fn()) {
        add_to_buffer(root.grad_fn().get(), root.output_nr(), g);
        root_nodes.push_back(root.grad_fn().get());
      } else {
        root_leaves.push_back(root);
        root_leaf_grads.push_back(g);
      }
    }
    // The pass runs with recording on exactly when it builds a graph of the gradients, as
    // PyTorch's engine: without create_graph, a grad_output or a hook's result that requires
    // grad gives no .grad() with history (the leaf's copy and sums would have recorded).
    std::optional<NoGradGuard> no_grad;
    std::optional<EnableGradGuard> grad_on;
    if (create_graph) grad_on.emplace(); else no_grad.emplace();
    trace = t_trace;
    // A trace numbers the entries by their place in the whole graph (tape_to_text's): it walks all.
    const std::vector<Node*> order = reachable_in_reverse(root_nodes, trace ? 0 : oldest_wanted);
    if (trace) {
      for (size_t i = 0; i < order.size(); ++i) trace_number[order[i]] = order.size() - 1 - i;
      if (!roots.empty()) trace_dtype = roots[0].dtype();
    }
    if (capture) mark_entries_leading_to_capture(order);
    if (!capture) count_pending_hooks(order, root_leaves);
    for (size_t i = 0; i < root_leaves.size(); ++i) deliver_to_leaf(root_leaves[i].impl_ptr(), root_leaf_grads[i]);
    for (Node* node : order) run_node(*node);
    deliver_remaining();
  }

  // An entry leads to a wanted gradient when one of its inputs is a wanted leaf, the wanted
  // output of another entry, or an entry that leads to one. Inputs come earlier in `order`'s
  // reverse, so one pass from the oldest entry decides them all. (Without this, tg::grad
  // would run, and under create_graph require twice differentiable, every entry behind the
  // outputs, including ones that cannot reach the inputs asked for.)
  void mark_entries_leading_to_capture(const std::vector<Node*>& order) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const Node* n = *it;
      for (const Edge& e : n->edges_) {
        const bool wanted = (e.leaf && capture->leaves.count(e.leaf.get())) ||
                            (e.fn && (capture->outputs.count(e.fn.get()) || leads_to_capture.count(e.fn.get())));
        if (wanted) {
          leads_to_capture.insert(n);
          break;
        }
      }
    }
  }
};

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  Engine engine;
  engine.retain_graph = retain_graph || create_graph;
  engine.create_graph = create_graph;
  std::optional<EnableGradGuard> record;  // the engine's own sums of gradients record too
  if (create_graph) record.emplace();
  engine.run(roots, grad_outputs);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused,
                         bool create_graph) {
  Engine::Capture capture;
  capture.grads.resize(inputs.size());
  std::vector<std::pair<size_t, size_t>> repeated_leaves;  // (input i, the first input j of that leaf)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    detail::check_history_current(t, "grad");
    TG_CHECK(t.defined() && t.requires_grad(), "grad: input ", i, " does not require grad");
    if (t.grad_fn()) {
      capture.outputs[t.grad_fn().get()].push_back({t.output_nr(), i});
    } else if (auto [first, fresh] = capture.leaves.emplace(t.impl(), i); !fresh) {
      repeated_leaves.push_back({i, first->second});
    }
  }
  Engine engine;
  engine.retain_graph = retain_graph || create_graph;
  engine.create_graph = create_graph;
  engine.capture = &capture;
  // Only the entries recorded since the oldest wanted one can lead to it; a wanted leaf, though,
  // may be an input of any entry, however old.
  if (capture.leaves.empty() && !capture.outputs.empty()) {
    engine.oldest_wanted = UINT64_MAX;
    for (const auto& [node, slots] : capture.outputs)
      engine.oldest_wanted = std::min(engine.oldest_wanted, node->sequence_nr());
  }
  std::optional<EnableGradGuard> record;
  if (create_graph) record.emplace();
  engine.run(outputs, grad_outputs);
  for (size_t i = 0; i < inputs.size(); ++i)  // a leaf's hooks, once on its whole gradient
    if (!inputs[i].grad_fn() && capture.grads[i].defined() && capture.leaves.at(inputs[i].impl()) == i)
      capture.grads[i] = Engine::apply_hooks(inputs[i].impl()->hooks, capture.grads[i]);
  for (const auto& [i, j] : repeated_leaves) capture.grads[i] = capture.grads[j];  // the same gradient
  for (size_t i = 0; i < inputs.size(); ++i)
    TG_CHECK(allow_unused || capture.grads[i].defined(), "grad: input ", i,
             " was not used to compute the outputs (pass allow_unused = true)");
  return capture.grads;
}

void set_backward_trace(std::ostream* os) { t_trace = os; }

void queue_backward_callback(std::function<void()> callback) {
  TG_CHECK(t_backward_callbacks != nullptr,
           "queue_backward_callback: expected to be called during a backward pass (from a hook), got a call outside one");
  t_backward_callbacks->push_back(std::move(callback));
}

uint64_t backward_pass_count() { return t_backward_passes; }

uint64_t detail::backward_entries_walked() { return t_entries_walked; }

BackwardTraceGuard::BackwardTraceGuard(std::ostream& os) : previous_(t_trace) { t_trace = &os; }
BackwardTraceGuard::~BackwardTraceGuard() { t_trace = previous_; }

}  // namespace tg
