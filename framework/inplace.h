// In-place ops under autograd: PyTorch's rules, whenever grad mode is on.
//
//   - A leaf that requires grad cannot be changed in place: a tg::Error names the op and says
//     to use NoGradGuard (as the optimizers and init functions do).
//   - A tensor with history, or one that joins the graph through the op's other input
//     (y.copy_(w) with w requiring grad), is recorded: the op's entry takes the tensor's old
//     history as its input, and the tensor is rebased onto the entry (grad_fn, output_nr), so
//     gradients are exactly those of the out-of-place program.
//   - A view (TensorImpl::view_base points at the tensor it views) changed this way rebases its
//     base too (PyTorch's CopySlices). The op's input is the view's old value as the region of
//     its base (as_strided), not the chain of views it was taken through, whose entries (and
//     hooks, retained gradients) are then off the path; the base's history becomes a
//     copy_slices entry that
//     passes the base's gradient through outside the view's region and sends the region to the
//     view's new entry; the view itself then reads as the region of the rebased base (as_strided,
//     as PyTorch regenerates its grad_fn), so its later uses reach the base's entry and
//     gradients with respect to the base (tg::grad, its hooks) include them. Refused instead: a
//     view of a leaf that requires grad, a view taken under NoGradGuard (it has no history to
//     change; PyTorch forbids it too), and a view of a non-contiguous base.
//   - Every other handle to the memory holds history older than its values. A recorded in-place
//     op bumps the storage's history epoch, and a handle whose history predates it is checked
//     where history is read (op inputs, backward roots, grad() inputs): a view of a current
//     base gets its history again as the base's region (as_strided, as PyTorch regenerates a
//     view's grad_fn; an expanded view as the region without its repeats, expanded), or none
//     when the base has none; anything else (the tensor a detach() came from, a leaf view that
//     requires grad, a view of a non-contiguous base that requires grad, and a view taken under
//     NoGradGuard of a base that now requires grad, which PyTorch forbids too) is a tg::Error
//     naming the in-place op. A refusal, never a silently wrong gradient. detach()ed handles
//     claim no history and are exempt; views taken of them are not (they take their history
//     from the handle once it joins the graph).
//   - Under NoGradGuard nothing is checked or recorded: the kernels run as they always did.
//     In every mode, a tensor whose elements share memory (a stride of 0 over a dim longer than
//     1, as from expand()) cannot be written in place: a tg::Error, as in PyTorch (add_ would
//     add several times into one location, copy_ keep an arbitrary one of the writes, and
//     threads writing one location race).
#pragma once

#include <vector>

#include "registry.h"
#include "tensor.h"

namespace tg {

// The OpDefs of Tensor's in-place methods (fill_, copy_, add_, mul_) and of copy_slices and
// as_strided (a view's base rebased, a stale view regenerated), for the registry.
const std::vector<const OpDef*>& inplace_op_defs();

namespace detail {

// Gives a stale view its history again from its base when that is possible (see above);
// otherwise leaves it as it is. Tensor's history accessors call this.
void refresh_view_history(const Tensor& t);

// Throws when `t`'s recorded history no longer matches its values: another handle to its
// memory was changed in place by a recorded op after `t` got its history. `op` names the user.
void check_history_current(const Tensor& t, const char* op);

// Whether several of t's elements are one memory location (a stride of 0 over a dim longer than
// 1, as from expand()): such a tensor cannot be written element by element.
bool shares_elements(const Tensor& t);

// PyTorch's rule for writing an op's result into self: a floating result cannot go into an
// integer self (it would be truncated silently), a tg::Error naming op.
void check_result_fits_self(const char* op, DType self, DType result);

// The rules before an in-place change of `self` by `op` with other tensor inputs `others`.
// Throws for a self whose elements share memory (in any mode), and, with grad mode on, for a
// leaf that requires grad, a stale tensor, or a non-floating self that would join the graph.
// Returns whether the change must be recorded.
bool check_inplace(const Tensor& self, const char* op, const std::vector<Tensor>& others);

// An in-place op written as its out-of-place twin, for ops above the framework:
//
//   detail::InplaceOp op{x, "relu_"};
//   return op.commit(relu(op.old_value()));
//
// Recorded, the twin's entry takes x's old history and x is rebased onto it; unrecorded, x
// itself goes in and the result is copied back. (An extra buffer either way: these ops are
// for correctness where a user wants them, not for the hot loops, which are out of place.)
class InplaceOp {
 public:
  InplaceOp(Tensor& self, const char* op, std::vector<Tensor> others = {});
  explicit operator bool() const { return record_; }
  // self's value before the change, carrying self's history: the out-of-place op's input
  // (self itself when nothing is recorded).
  // copy = true when that op saves its input for backward (the alias is about to be
  // overwritten, which the saved-tensor version check would then refuse).
  Tensor old_value(bool copy = false) const;
  // Writes `out` (the out-of-place result, of self's shape) into self and, when recording,
  // rebases self's history onto out's entry.
  Tensor& commit(const Tensor& out);

 private:
  Tensor& self_;
  const char* op_;
  bool record_ = false;
};

}  // namespace detail
}  // namespace tg
