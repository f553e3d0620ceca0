// The tape. Every differentiable op, when grad mode is on and one of its inputs requires grad,
// records an entry (a Node): which op, where its inputs' gradients go (edges), the tensors its
// backward needs (saved with their versions), its outputs' shapes, and its parameters.
// Backward replays the entries reachable from the root in reverse recording order.
//
// Ownership: an op's outputs own their entry (TensorImpl::grad_fn), and each entry owns the
// entries of its inputs (Edge::fn). When an iteration's tensors die, its entries die with them.
// Saved tensors are stored without history, so an entry never owns itself (no cycles). One
// cycle the user can make, as in PyTorch: backward(create_graph=true) into a leaf gives its
// .grad() a history that leads back to the leaf; the graph lives until zero_grad() or
// set_grad() drops that gradient (PyTorch warns of the same cycle; use tg::grad instead).
//
// How an op records itself (see ops/elementwise.cpp for the simplest examples):
//
//   enum MulSaved { kSelf, kOther };              // the op's saved slots, by name
//   Tensor out = ...compute...;
//   if (Recorder rec{kMulOp, {a, b}}) {          // false unless recording is needed
//     if (rec.needs_grad(1)) rec.save(kSelf, a);  // what backward needs, and only that
//     if (rec.needs_grad(0)) rec.save(kOther, b);
//     rec.set_outputs({out});
//   }
//   ... and in the backward: ctx.saved(kOther)
#pragma once

#include <any>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "registry.h"
#include "tensor.h"

namespace tg {

// Where the gradient of one input goes: into another entry's output slot, or into a leaf.
struct Edge {
  std::shared_ptr<Node> fn;          // the entry that produced a non-leaf input
  std::shared_ptr<TensorImpl> leaf;  // or the leaf itself (a parameter, an input)
  int output_nr = 0;
  bool needs_grad() const { return fn != nullptr || leaf != nullptr; }
};

struct TensorMeta {
  Shape shape;
  DType dtype;
  bool defined = false;  // false for an absent optional input (an undefined bias)
};

struct SavedTensor {
  Tensor tensor;  // shares storage with what was saved, but carries no history
  uint64_t version = 0;
  // Where the saved tensor's own gradient would go, for a backward that is itself recorded
  // (create_graph): its producing entry and output slot, or its leaf. An output of the entry
  // that saves it keeps no pointer (the entry would own itself); `output_nr_of_self` says which
  // output it is, and the entry stands in when it is unpacked.
  std::shared_ptr<Node> fn;
  int output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  int output_nr_of_self = -1;
  const TensorImpl* origin = nullptr;  // identity only, to find the entry's own outputs
};

// One tape entry.
class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(const OpDef* op, uint64_t sequence_nr) : op_(op), sequence_nr_(sequence_nr) {}
  ~Node();  // iterative: a chain of 100,000 entries must not overflow the stack
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const OpDef& op() const { return *op_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<TensorMeta>& input_meta() const { return input_meta_; }
  const std::vector<TensorMeta>& output_meta() const { return output_meta_; }
  const std::vector<SavedTensor>& saved() const { return saved_; }
  // True once a backward without retain_graph freed saved tensors of this entry; then it refuses
  // another backward. An entry that saved none never is.
  bool released() const { return released_; }
  void add_output_hook(int output_nr, GradHook hook);

 private:
  friend class Recorder;
  friend class BackwardContext;
  friend struct Engine;

  const OpDef* op_;
  uint64_t sequence_nr_;
  std::vector<Edge> edges_;  // one per differentiable input, in OpDef::inputs order
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;
  std::vector<SavedTensor> saved_;
  std::any attrs_;  // the op's parameters (stride, eps, ...), as the op's own struct
  std::vector<std::vector<GradHook>> output_hooks_;
  bool released_ = false;
};

// What a backward function sees of its entry.
class BackwardContext {
 public:
  explicit BackwardContext(const Node& node, bool create_graph = false) : node_(node), create_graph_(create_graph) {}

  // Whether input i's gradient is wanted (the output mask of the specs).
  bool needs_grad(int input) const;
  // Saved tensor i (an op's slot name, see Recorder::save); throws when it was not saved or
  // was changed in place after it was saved. Under
  // create_graph it carries its history (its gradient flows back where the original's would),
  // otherwise none.
  Tensor saved(int i) const;
  // Under create_graph, a tensor whose gradient flows where input i's does, for a backward
  // that records an op of the input whose own backward never reads that input's values (it
  // saves its output, as log_softmax): the input itself when it is a leaf, else `stand_in` (of
  // the input's shape) linked to the input's producer. So an op need not keep its input alive
  // for double backward. Without create_graph, or when input i needs no gradient: stand_in.
  Tensor input_history(int i, const Tensor& stand_in) const;
  // Whether this backward is being recorded (create_graph): then the gradients must come from
  // recorded ops, which happens by itself when a backward calls ops rather than raw kernels.
  bool create_graph() const { return create_graph_; }
  const Shape& input_shape(int input) const { return node_.input_meta_.at(input).shape; }
  DType input_dtype(int input) const { return node_.input_meta_.at(input).dtype; }
  const Shape& output_shape(int output) const { return node_.output_meta_.at(output).shape; }
  template <class A>
  const A& attrs() const {
    return std::any_cast<const A&>(node_.attrs_);
  }
  const char* op_name() const { return node_.op_->name; }

 private:
  const Node& node_;
  bool create_graph_ = false;
};

// Records one entry when recording is needed: grad mode on and some input requires grad.
// Inputs are the op's differentiable inputs in OpDef::inputs order (undefined ones allowed);
// their number must be the number of names in OpDef::inputs (at least the names before a last
// "name..." for ops that take a list, such as cat's "tensors...").
class Recorder {
 public:
  Recorder(const OpDef& op, std::vector<Tensor> inputs);
  explicit operator bool() const { return node_ != nullptr; }

  bool needs_grad(int input) const;
  // Saves t in slot `slot` for backward (ctx.saved(slot)). Slots are named by an enum of the op
  // (enum LayerNormSaved { kInput, kWeight, kMean, kRstd }), so forward and backward agree by name, not by
  // the position in a list; saving a slot twice is an internal error.
  void save(int slot, const Tensor& t);
  // Saves a list whose length is only known at run time (slots 0, 1, ...), for ops whose
  // saved tensors are one per input of a list, and for user-defined ops (named by the user).
  void save(std::vector<Tensor> tensors);
  template <class A>
  void set_attrs(A attrs) {
    node_->attrs_ = std::move(attrs);
  }
  // Links the outputs to the entry; they become non-leaf tensors that require grad.
  void set_outputs(const std::vector<Tensor>& outputs);

 private:
  SavedTensor make_saved(const Tensor& t) const;
  std::shared_ptr<Node> node_;
};

// The entry of an op of one input and one output, the common case: what backward reads, as
// (slot, tensor) pairs, and the op's attributes (none: std::monostate). Ops with more inputs or
// outputs use a Recorder directly.
//   record_one_input(kExpOp, x, y, {{kOutput, y}});
//   record_one_input(kPermuteOp, x, out, {}, PermuteAttrs{dims});
template <class A = std::monostate>
void record_one_input(const OpDef& op, const Tensor& input, const Tensor& output,
                      std::initializer_list<std::pair<int, Tensor>> saves = {}, A attrs = A{}) {
  if (Recorder rec{op, {input}}) {
    for (const auto& [slot, t] : saves) rec.save(slot, t);
    if constexpr (!std::is_same_v<A, std::monostate>) rec.set_attrs(std::move(attrs));
    rec.set_outputs({output});
  }
}

// Whether this set of inputs would be recorded (grad mode on and one of them requires grad).
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Backward from `roots` with the given output gradients (undefined: ones, for scalar roots).
// Accumulates into the .grad() of the leaves reached.
//
// create_graph records the backward pass itself, so the gradients it produces require grad
// and can be differentiated again (Hessian-vector products, gradient penalties). It implies
// retain_graph, as in PyTorch: differentiating the gradients runs through this graph again.
// Every entry it reaches must be twice differentiable (OpDef::twice_differentiable), or it
// throws tg::Error naming the op.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// The gradients of `outputs` with respect to `inputs`, without touching any .grad().
// An input the outputs do not depend on gets an undefined Tensor unless allow_unused is false,
// in which case that throws. create_graph as for backward.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = true, bool create_graph = false);

// Trace: print each backward step as it runs (op, gradient shapes and norms) to `os`, or stop
// with nullptr. Thread-local; a pass traces if the trace was on when it began (set from a hook,
// it applies to the next pass). Steps are numbered as tape_to_text and tape_to_dot number the
// entries (position in the graph being backpropagated, oldest 0; with several roots, in the
// union of their graphs, which one dump of one root may number differently), and tracing records
// nothing. A pass run inside a hook (tg::grad) prints its own steps, numbered in its own graph.
void set_backward_trace(std::ostream* os);

// For hooks: `callback` runs once the backward pass that is running now has delivered every
// gradient, before backward() returns (PyTorch's queue_callback; data parallelism waits for its
// last reductions there). Callbacks run in the order queued; one queued by a callback runs too.
// Outside a backward pass it is a tg::Error. A pass that throws runs none of them.
void queue_backward_callback(std::function<void()> callback);

// How many backward passes (backward() and grad() calls) this thread has started: tells a hook
// whether it runs in the same pass as before.
uint64_t backward_pass_count();

namespace detail {
// How many entries this thread's backward passes have walked to find the ones to run: a cost
// that a test can check without a clock. (A tg::grad that wants entries' gradients only, no
// leaf's, does not walk behind the entries recorded before the oldest of them.)
uint64_t backward_entries_walked();
// a + b, two gradients of one shape, into a fresh tensor, recorded when grad mode is on (in a
// backward pass with create_graph): a retained gradient's accumulation.
Tensor sum_of_gradients(const Tensor& a, const Tensor& b);
}  // namespace detail

class BackwardTraceGuard {
 public:
  explicit BackwardTraceGuard(std::ostream& os);
  ~BackwardTraceGuard();

 private:
  std::ostream* previous_;
};

}  // namespace tg
