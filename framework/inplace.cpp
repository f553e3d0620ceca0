// Tensor's in-place methods under autograd, and the machinery the in-place ops in ops/ share.
// The rules are in inplace.h.
//
//   fill_:  self = v              dself = 0
//   copy_:  self = src            dself = 0          dsrc = sum_to(g, src).to(src's dtype)
//   add_:   self += alpha*other   dself = g          dother = sum_to(alpha*g, other).to(other's dtype)
//   mul_:   self *= f             dself = f*g
#include "inplace.h"

#include "grad_mode.h"
#include "random.h"
#include "tape.h"
#include "views.h"

namespace tg {

namespace {

struct AlphaAttrs {
  double alpha;
};
struct FactorAttrs {
  double factor;
};

Tensor scaled(const Tensor& g, double s) {
  Tensor out = g.clone();
  detail::raw_mul_(out, s);
  return out;
}

// ---- backward ----

std::vector<Tensor> fill_backward(const BackwardContext& ctx, const std::vector<Tensor>&) {
  return {ctx.needs_grad(0) ? zeros(ctx.input_shape(0), ctx.input_dtype(0)) : Tensor()};
}

std::vector<Tensor> copy_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  Tensor dself, dsrc;
  if (ctx.needs_grad(0)) dself = zeros(ctx.input_shape(0), ctx.input_dtype(0));
  if (ctx.needs_grad(1)) dsrc = sum_to(g[0], ctx.input_shape(1)).to(ctx.input_dtype(1));
  return {dself, dsrc};
}

std::vector<Tensor> add_inplace_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const double alpha = ctx.attrs<AlphaAttrs>().alpha;
  Tensor dself, dother;
  if (ctx.needs_grad(0)) dself = g[0];
  if (ctx.needs_grad(1))
    dother = sum_to(alpha == 1.0 ? g[0] : scaled(g[0], alpha), ctx.input_shape(1)).to(ctx.input_dtype(1));
  return {dself, dother};
}

std::vector<Tensor> mul_inplace_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {ctx.needs_grad(0) ? scaled(g[0], ctx.attrs<FactorAttrs>().factor) : Tensor()};
}

// ---- sample cases: each changes a clone of its input (a leaf may not be changed) ----

using Inputs = std::vector<Tensor>;
Tensor sample(const Shape& shape, DType dt) {
  Tensor t = randn(shape, dt);
  t.requires_grad_();
  return t;
}

std::vector<SampleCase> fill_samples() {
  return {{"[2,3]", [](DType dt) { return Inputs{sample({2, 3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.fill_(0.5);
             return Inputs{y};
           }}};
}
std::vector<SampleCase> copy_samples() {
  return {{"[3] into [2,3]", [](DType dt) { return Inputs{sample({2, 3}, dt), sample({3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.copy_(x[1]);
             return Inputs{y};
           }}};
}
std::vector<SampleCase> add_samples() {
  return {{"[2,3] += 0.7 * [3]", [](DType dt) { return Inputs{sample({2, 3}, dt), sample({3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.add_(x[1], 0.7);
             return Inputs{y};
           }},
          {"self += self", [](DType dt) { return Inputs{sample({2, 3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.add_(y);
             return Inputs{y};
           }}};
}
std::vector<SampleCase> mul_samples() {
  return {{"[2,3] *= -1.5, twice", [](DType dt) { return Inputs{sample({2, 3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.mul_(-1.5).mul_(2.0);
             return Inputs{y};
           }}};
}

const OpDef kFillOp{"fill_", "fill__backward", "self", fill_backward, fill_samples};
const OpDef kCopyOp{"copy_", "copy__backward", "self, src", copy_backward, copy_samples};
const OpDef kAddInplaceOp{"add_", "add__backward", "self, other", add_inplace_backward, add_samples};
const OpDef kMulInplaceOp{"mul_", "mul__backward", "self", mul_inplace_backward, mul_samples};

// Makes `self` the output of the entry `rec` recorded with self's old history as input.
void rebase(Recorder& rec, Tensor& self, const char* op) {
  self.impl()->storage->bump_history_epoch(op);
  rec.set_outputs({self});  // grad_fn, output_nr, and the new epoch
}

Tensor& fill_impl(Tensor& self, double value, const char* op) {
  TG_CHECK(self.defined(), op, ": the tensor is undefined");
  detail::check_inplace(self, op, {});
  Recorder rec{kFillOp, {self}};
  detail::raw_fill_(self, value);
  if (rec) rebase(rec, self, op);
  return self;
}

}  // namespace

const std::vector<const OpDef*>& inplace_op_defs() {
  static const std::vector<const OpDef*> defs = {&kFillOp, &kCopyOp, &kAddInplaceOp, &kMulInplaceOp};
  return defs;
}

// ---- the rules ----

void detail::check_history_current(const Tensor& t, const char* op) {
  if (!t.defined()) return;
  const TensorImpl& impl = *t.impl();
  if (impl.history_epoch == kUntrackedEpoch || impl.history_epoch == impl.storage->history_epoch()) return;
  const char* by = impl.storage->last_rebase_op();
  TG_CHECK(false, op, ": a tensor of shape ", format_shape(impl.shape), " shares memory with a tensor that ",
           by ? by : "an in-place op", " changed in place (with grad mode on) after this one got its history: a "
           "view and its base, or two views of one tensor. Its recorded history no longer matches its values, "
           "so it cannot be used for gradients. Compute it again after the in-place change, or clone() the view "
           "before changing it.");
}

bool detail::check_inplace(const Tensor& self, const char* op, const std::vector<Tensor>& others) {
  if (!GradMode::is_enabled()) return false;
  TG_CHECK(self.defined(), op, ": the tensor is undefined");
  check_history_current(self, op);
  for (const Tensor& t : others) check_history_current(t, op);
  TG_CHECK(!(self.is_leaf() && self.requires_grad()), op, ": a leaf tensor that requires grad cannot be changed in "
           "place while grad mode is on (its gradient would be taken at values it no longer holds); make the "
           "change under NoGradGuard, as the optimizers and init functions do");
  bool record = self.requires_grad();
  for (const Tensor& t : others) record = record || (t.defined() && t.requires_grad());
  if (!record) return false;
  TG_CHECK(is_floating(self.dtype()), op, ": cannot record an in-place change of a ", dtype_name(self.dtype()),
           " tensor from a tensor that requires grad (only floating tensors carry gradients); detach() the "
           "source or use NoGradGuard");
  for (int64_t d = 0; d < self.dim(); ++d)
    TG_CHECK(self.strides()[d] != 0 || self.shape()[d] <= 1, op, ": cannot record an in-place change of a tensor "
             "of shape ", format_shape(self.shape()), " whose elements share memory (stride 0 in dim ", d,
             ", as from expand()); clone() it first");
  return true;
}

detail::InplaceOp::InplaceOp(Tensor& self, const char* op, std::vector<Tensor> others)
    : self_(self), op_(op), record_(check_inplace(self, op, others)) {}

Tensor detail::InplaceOp::old_value(bool copy) const {
  if (!record_) return self_;
  Tensor old = copy ? self_.detach().clone() : self_.detach();
  TensorImpl* impl = old.impl();
  impl->requires_grad = self_.requires_grad();
  impl->grad_fn = self_.grad_fn();
  impl->output_nr = self_.output_nr();
  impl->history_epoch = impl->storage->history_epoch();
  return old;
}

Tensor& detail::InplaceOp::commit(const Tensor& out) {
  TG_CHECK(out.shape() == self_.shape() && out.dtype() == self_.dtype(), op_, ": the result has shape ",
           format_shape(out.shape()), " ", dtype_name(out.dtype()), ", which cannot be written into self of shape ",
           format_shape(self_.shape()), " ", dtype_name(self_.dtype()));
  TG_CHECK(!record_ || out.grad_fn() != nullptr, op_, ": internal error: the recorded result has no history");
  raw_copy_(self_, out);
  if (!record_) return self_;
  TensorImpl* impl = self_.impl();
  impl->storage->bump_history_epoch(op_);
  impl->requires_grad = true;
  impl->grad_fn = out.grad_fn();
  impl->output_nr = out.output_nr();
  impl->history_epoch = impl->storage->history_epoch();
  return self_;
}

// ---- Tensor's in-place methods ----

Tensor& Tensor::fill_(double value) { return fill_impl(*this, value, "fill_"); }
Tensor& Tensor::zero_() { return fill_impl(*this, 0.0, "zero_"); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_");
  TG_CHECK(src.defined(), "copy_: the source tensor is undefined");
  detail::check_inplace(*this, "copy_", {src});
  Recorder rec{kCopyOp, {*this, src}};
  detail::raw_copy_(*this, src);
  if (rec) rebase(rec, *this, "copy_");
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_defined("add_");
  TG_CHECK(other.defined(), "add_: the other tensor is undefined");
  detail::check_inplace(*this, "add_", {other});
  Recorder rec{kAddInplaceOp, {*this, other}};
  detail::raw_add_(*this, other, alpha);
  if (rec) {
    rec.set_attrs(AlphaAttrs{alpha});
    rebase(rec, *this, "add_");
  }
  return *this;
}

Tensor& Tensor::mul_(double factor) {
  check_defined("mul_");
  detail::check_inplace(*this, "mul_", {});
  Recorder rec{kMulInplaceOp, {*this}};
  detail::raw_mul_(*this, factor);
  if (rec) {
    rec.set_attrs(FactorAttrs{factor});
    rebase(rec, *this, "mul_");
  }
  return *this;
}

}  // namespace tg
