// Tensor's in-place methods under autograd, and the machinery the in-place ops in ops/ share.
// The rules are in inplace.h.
//
//   fill_:  self = v              dself = 0
//   copy_:  self = src            dself = 0          dsrc = sum_to(g, src).to(src's dtype)
//   add_:   self += alpha*other   dself = g          dother = sum_to(alpha*g, other).to(other's dtype)
//   mul_:   self *= f             dself = f*g
//   copy_slices (a view v of base b changed in place, PyTorch's CopySlices):
//           b' = b with v's region replaced by v'   db = g, zero in the region   dv' = g in the region
//   as_strided (a stale view taken again from its base b):
//           v = the region of b                     db = g scattered into zeros at the region
//
// Every backward is linear in g and is written with recorded ops (sum_to, to, and the linear
// maps below, each the other's or its own adjoint), so all of these are twice differentiable:
//   inplace_scale:         g -> s*g                      backward: inplace_scale by s again
//   as_strided_scatter:    g -> zeros(base), region = g  backward: as_strided_copy
//   as_strided_copy:       g -> g's region (a copy)      backward: as_strided_scatter
//   copy_slices_backward:  g -> g, region zeroed         backward: copy_slices_backward again
// Under plain backward nothing records: they are the kernels the backward always used.
#include "inplace.h"

#include <cmath>

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

Tensor scaled(const Tensor& g, double s);  // recorded (inplace_scale)

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

// Where the view sits in its (contiguous) base: the view's geometry, its offset relative to
// the base's. The base's gradient is contiguous in the base's shape, so the same geometry finds
// the region in it.
struct ViewGeometry {
  Shape shape, strides;
  int64_t offset;
};

Tensor region_of(const Tensor& t, const ViewGeometry& v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = v.shape;
  impl->strides = v.strides;
  impl->offset = t.offset() + v.offset;
  impl->dtype = t.dtype();
  impl->history_epoch = kUntrackedEpoch;
  return Tensor(std::move(impl));
}

// The recorded linear maps of the region (defined after their OpDefs, below).
Tensor region_scatter(const Tensor& g, const Shape& base_shape, const ViewGeometry& v);  // as_strided_scatter
Tensor region_gather(const Tensor& g, const ViewGeometry& v);                            // as_strided_copy
Tensor region_zeroed(const Tensor& g, const ViewGeometry& v);                            // copy_slices_backward

std::vector<Tensor> copy_slices_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& v = ctx.attrs<ViewGeometry>();
  Tensor dbase, dview;
  if (ctx.needs_grad(0)) dbase = region_zeroed(g[0], v);
  if (ctx.needs_grad(1)) dview = region_gather(g[0], v);
  return {dbase, dview};
}

// A stale view's history taken again from its base: the region of the base.
std::vector<Tensor> as_strided_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {region_scatter(g[0], ctx.input_shape(0), ctx.attrs<ViewGeometry>())};
}

// The backward of the backward ops.
std::vector<Tensor> scale_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {scaled(g[0], ctx.attrs<FactorAttrs>().factor)};
}
std::vector<Tensor> region_scatter_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {region_gather(g[0], ctx.attrs<ViewGeometry>())};
}
std::vector<Tensor> region_gather_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {region_scatter(g[0], ctx.input_shape(0), ctx.attrs<ViewGeometry>())};
}
std::vector<Tensor> region_zeroed_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {region_zeroed(g[0], ctx.attrs<ViewGeometry>())};
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

std::vector<SampleCase> copy_slices_samples() {
  return {{"[3,4] columns 1:3 *= 2", [](DType dt) { return Inputs{sample({3, 4}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             Tensor v = y.narrow(1, 1, 2);
             v.mul_(2.0);
             return Inputs{y, v};
           }},
          {"[3,4]: column 2 = src, row 1 += src[0] / 2", [](DType dt) { return Inputs{sample({3, 4}, dt), sample({3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             y.transpose(0, 1).select(0, 2).copy_(x[1]);
             y.narrow(0, 1, 1).add_(x[1].narrow(0, 0, 1), 0.5);
             return Inputs{y};
           }}};
}

std::vector<SampleCase> as_strided_samples() {
  return {{"[3,4]: row 0 and column 1 after column 1 *= -2", [](DType dt) { return Inputs{sample({3, 4}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             Tensor row = y.select(0, 0), col = y.select(1, 1);
             col.mul_(-2.0);
             return Inputs{row, y.select(1, 1)};  // row's history is taken again
           }},
          {"[2,3]: a view after its base *= 3", [](DType dt) { return Inputs{sample({2, 3}, dt)}; },
           [](const Inputs& x) {
             Tensor y = x[0].clone();
             Tensor v = y.transpose(0, 1).narrow(0, 1, 2);
             y.mul_(3.0);
             return Inputs{v};
           }}};
}

const OpDef kFillOp{"fill_", "fill__backward", "self", fill_backward, fill_samples, true};
const OpDef kCopyOp{"copy_", "copy__backward", "self, src", copy_backward, copy_samples, true};
const OpDef kAddInplaceOp{"add_", "add__backward", "self, other", add_inplace_backward, add_samples, true};
const OpDef kMulInplaceOp{"mul_", "mul__backward", "self", mul_inplace_backward, mul_samples, true};
const OpDef kCopySlicesOp{"copy_slices", "copy_slices_backward", "base, view", copy_slices_backward,
                          copy_slices_samples, true};
const OpDef kAsStridedOp{"as_strided", "as_strided_backward", "base", as_strided_backward, as_strided_samples,
                         true};
// The backward ops above, recorded under create_graph (no samples: the in-place ops' samples
// reach them through gradgradcheck).
const OpDef kScaleOp{"inplace_scale", "inplace_scale_backward", "grad_output", scale_backward, nullptr, true};
const OpDef kRegionScatterOp{"as_strided_scatter", "as_strided_scatter_backward", "grad_output",
                             region_scatter_backward, nullptr, true};
const OpDef kRegionGatherOp{"as_strided_copy", "as_strided_copy_backward", "grad_output", region_gather_backward,
                            nullptr, true};
const OpDef kRegionZeroedOp{"copy_slices_backward", "copy_slices_backward_backward", "grad_output",
                            region_zeroed_backward, nullptr, true};

Tensor scaled(const Tensor& g, double s) {
  Tensor out = g.detach().clone();
  detail::raw_mul_(out, s);
  if (Recorder rec{kScaleOp, {g}}) {
    rec.set_attrs(FactorAttrs{s});
    rec.set_outputs({out});
  }
  return out;
}

Tensor region_scatter(const Tensor& g, const Shape& base_shape, const ViewGeometry& v) {
  Tensor out = zeros(base_shape, g.dtype());
  Tensor r = region_of(out, v);
  detail::raw_copy_(r, g.detach());
  if (Recorder rec{kRegionScatterOp, {g}}) {
    rec.set_attrs(v);
    rec.set_outputs({out});
  }
  return out;
}

Tensor region_gather(const Tensor& g, const ViewGeometry& v) {
  Tensor gc = g.detach().contiguous();  // the geometry is that of a contiguous base
  Tensor out = Tensor::empty(v.shape, g.dtype());
  detail::copy_into_new(out, region_of(gc, v));
  if (Recorder rec{kRegionGatherOp, {g}}) {
    rec.set_attrs(v);
    rec.set_outputs({out});
  }
  return out;
}

Tensor region_zeroed(const Tensor& g, const ViewGeometry& v) {
  Tensor d = g.detach();
  Tensor out = d.is_contiguous() ? d.clone() : d.contiguous();
  Tensor r = region_of(out, v);
  detail::raw_fill_(r, 0.0);
  if (Recorder rec{kRegionZeroedOp, {g}}) {
    rec.set_attrs(v);
    rec.set_outputs({out});
  }
  return out;
}

bool is_current(const TensorImpl& impl) {
  return impl.history_epoch == kUntrackedEpoch || impl.history_epoch == impl.storage->history_epoch();
}

// The view's history as the region of its (current, contiguous) base, which requires grad:
// an as_strided entry (PyTorch regenerates a view's grad_fn the same way). An expanded view (a
// stride of 0 over a longer dim) is the region without its repeats, expanded: expand's
// backward sums the repeats, where as_strided's would keep one of them.
void take_history_from_base(const Tensor& view, const Tensor& base) {
  TensorImpl& impl = *view.impl();
  EnableGradGuard grad_mode;  // the view has this history whatever the mode it is used in
  Shape compact = view.shape();
  for (int64_t d = 0; d < view.dim(); ++d)
    if (view.strides()[d] == 0) compact[d] = 1;
  const ViewGeometry region{compact, view.strides(), view.offset() - base.offset()};
  Recorder rec{kAsStridedOp, {base}};
  rec.set_attrs(region);
  if (compact == view.shape()) {
    rec.set_outputs({view});  // grad_fn, output_nr, requires_grad and the current epoch
    return;
  }
  Tensor inner = region_of(base, region);
  rec.set_outputs({inner});
  const Tensor expanded = inner.expand(view.shape());
  impl.requires_grad = true;
  impl.grad_fn = expanded.grad_fn();
  impl.output_nr = expanded.output_nr();
  impl.history_epoch = impl.storage->history_epoch();
  if (impl.retains_grad) detail::retain_grad_hook(view.impl_ptr());
}

// A stale view of a current base gets its history again as the region of the base (PyTorch
// regenerates a view's grad_fn the same way), or none when the base has none. False when that
// is not possible: not a view, a leaf view that requires grad (its own parameter), a base that
// is itself stale, and, when the base requires grad, a non-contiguous base or a view taken
// under NoGradGuard.
bool regenerate_view_history(const Tensor& view) {
  TensorImpl& impl = *view.impl();
  if (!impl.view_base || (impl.requires_grad && !impl.grad_fn)) return false;
  const Tensor base(impl.view_base);
  if (!is_current(*base.impl())) return false;
  if (!base.requires_grad()) {
    impl.requires_grad = false;
    impl.grad_fn = nullptr;
    impl.output_nr = 0;
    impl.history_epoch = impl.storage->history_epoch();
    return true;
  }
  if (impl.view_taken_without_grad || !base.is_contiguous()) return false;
  take_history_from_base(view, base);
  return true;
}

// After `self` got its new history (grad_fn set, epoch current): when self is a view, its base's
// history becomes a copy_slices entry, and self then reads as the region of that new base (as
// PyTorch regenerates the view's grad_fn), so that the view's later uses reach the base's entry:
// gradients with respect to the base (tg::grad, its hooks) include them. The storage's epoch
// moves on, leaving every other handle to this memory stale, and self (and its base) current.
void finish_rebase(Tensor& self, const char* op) {
  TensorImpl* impl = self.impl();
  if (impl->view_base) {
    Tensor base(impl->view_base);
    Recorder cs{kCopySlicesOp, {base, self}};
    cs.set_attrs(ViewGeometry{self.shape(), self.strides(), self.offset() - base.offset()});
    impl->storage->bump_history_epoch(op);
    cs.set_outputs({base});
    // (check_inplace refused the views that cannot be regenerated: a non-contiguous base, or a
    // view taken under NoGradGuard; should one come here, it keeps the op's entry)
    if (regenerate_view_history(self)) return;
  } else {
    impl->storage->bump_history_epoch(op);
  }
  impl->history_epoch = impl->storage->history_epoch();
}

// Makes `self` the output of the entry `rec` recorded with self's old history as input.
void rebase(Recorder& rec, Tensor& self, const char* op) {
  rec.set_outputs({self});  // grad_fn, output_nr
  finish_rebase(self, op);
}

// The op's input for self's old value: for a view of a tensor that requires grad, a fresh
// handle to the view's memory whose history is the region of the base (as_strided), as
// PyTorch's CopySlices applies the op to the base's region: the view's own history (its chain
// of view entries, or its own as_strided entry) is then off the gradient's path, so hooks and
// retained gradients on it, and on the views it was taken from, see only the uses before the
// change (through it they saw later uses too). self itself is left alone: if the op then fails,
// its history is as it was. Otherwise self.
Tensor inplace_input(const Tensor& self) {
  const Tensor base(self.impl()->view_base);
  if (!GradMode::is_enabled() || !base.defined() || !base.requires_grad()) return self;
  Tensor old = region_of(base, ViewGeometry{self.shape(), self.strides(), self.offset() - base.offset()});
  take_history_from_base(old, base);
  return old;
}

Tensor& fill_impl(Tensor& self, double value, const char* op) {
  TG_CHECK(self.defined(), op, ": the tensor is undefined");
  TG_CHECK(fits_floating_range(self.dtype(), value), op, ": value ", value, " cannot be converted to ",
           dtype_name(self.dtype()), " without overflow");
  detail::check_inplace(self, op, {});
  Recorder rec{kFillOp, {inplace_input(self)}};
  detail::raw_fill_(self, value);
  if (rec) rebase(rec, self, op);
  return self;
}

}  // namespace

const std::vector<const OpDef*>& inplace_op_defs() {
  static const std::vector<const OpDef*> defs = {&kFillOp,         &kCopyOp,          &kAddInplaceOp,
                                                 &kMulInplaceOp,   &kCopySlicesOp,    &kAsStridedOp,
                                                 &kScaleOp,        &kRegionScatterOp, &kRegionGatherOp,
                                                 &kRegionZeroedOp};
  return defs;
}

// ---- the rules ----

void detail::refresh_view_history(const Tensor& t) {
  if (t.defined() && !is_current(*t.impl())) regenerate_view_history(t);
}

void detail::check_history_current(const Tensor& t, const char* op) {
  if (!t.defined()) return;
  const TensorImpl& impl = *t.impl();
  if (is_current(impl) || regenerate_view_history(t)) return;
  const char* by = impl.storage->last_rebase_op();
  // The stale views regenerate_view_history cannot take again from a base that requires grad
  // (undefined for a tensor that is not a view): one taken under NoGradGuard (PyTorch forbids
  // its use: whether it should now carry the base's history is ambiguous), one of a
  // non-contiguous base.
  const Tensor base(impl.view_base);
  TG_CHECK(!(base.requires_grad() && impl.view_taken_without_grad), op, ": a view of shape ", format_shape(impl.shape),
           " of a tensor that requires grad was taken under NoGradGuard, and its base (or another view of it) was "
           "then changed in place by ", by ? by : "an in-place op", " with grad mode on; whether the view now carries "
           "the base's history is ambiguous, so it cannot be used for gradients (PyTorch forbids it too). Take the "
           "view with grad mode on, or clone() it under NoGradGuard.");
  TG_CHECK(!(base.requires_grad() && !base.is_contiguous()), op, ": a view of shape ", format_shape(impl.shape),
           " of a non-contiguous tensor that requires grad shares memory with a tensor that ",
           by ? by : "an in-place op", " changed in place (with grad mode on) after this view got its history, and "
           "its history cannot be taken again from a non-contiguous base. Take the view again after the change, or "
           "clone() before changing it.");
  TG_CHECK(false, op, ": a tensor of shape ", format_shape(impl.shape), " shares memory with a tensor that ",
           by ? by : "an in-place op", " changed in place (with grad mode on) after this one got its history, and "
           "it is not a view whose history can be taken again from its base. Its recorded history no longer "
           "matches its values, so it cannot be used for gradients. Compute it again after the in-place change, "
           "or clone() before changing it.");
}

bool detail::shares_elements(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) return true;
  return false;
}

void detail::check_result_fits_self(const char* op, DType self, DType result) {
  TG_CHECK(is_floating(self) || !is_floating(result), op, ": the result type ", dtype_name(result),
           " cannot be cast to self's dtype ", dtype_name(self), " in place (it would be truncated); use the "
           "out-of-place op");
}

bool detail::check_inplace(const Tensor& self, const char* op, const std::vector<Tensor>& others) {
  TG_CHECK(self.defined(), op, ": the tensor is undefined");
  // In any mode: several elements on one memory location would each get the op applied (add_
  // adding k times, copy_ keeping whichever write came last), and threads writing them race.
  TG_CHECK(!detail::shares_elements(self), op, ": cannot write in place into a tensor of shape ",
           format_shape(self.shape()), " and strides ", format_shape(self.strides()), " whose elements share memory "
           "(a stride of 0, as from expand()); clone() it first");
  if (!GradMode::is_enabled()) return false;
  check_history_current(self, op);
  for (const Tensor& t : others) check_history_current(t, op);
  TG_CHECK(!(self.is_leaf() && self.requires_grad()), op, ": a leaf tensor that requires grad cannot be changed in "
           "place while grad mode is on (its gradient would be taken at values it no longer holds); make the "
           "change under NoGradGuard, as the optimizers and init functions do");
  bool record = self.requires_grad();
  for (const Tensor& t : others) record = record || (t.defined() && t.requires_grad());
  // A view of a tensor that requires grad: the base's history must learn of the change.
  const Tensor base(self.impl()->view_base);
  record = record || base.requires_grad();
  if (!record) return false;
  TG_CHECK(is_floating(self.dtype()), op, ": cannot record an in-place change of a ", dtype_name(self.dtype()),
           " tensor from a tensor that requires grad (only floating tensors carry gradients); detach() the "
           "source or use NoGradGuard");
  if (base.defined()) {
    check_history_current(base, op);
    TG_CHECK(!(base.is_leaf() && base.requires_grad()), op, ": a view of a leaf tensor that requires grad cannot be "
             "changed in place while grad mode is on; make the change under NoGradGuard, as the optimizers and init "
             "functions do");
    // (Of a base without grad too: the change would join the base to the graph, and the view,
    // which cannot take its history from the base, would keep the op's entry apart from it:
    // gradients with respect to the view took in the base's later uses.)
    TG_CHECK(!self.impl()->view_taken_without_grad, op, ": this view was taken under NoGradGuard, so it has no "
             "history of its own to change in place with grad mode on (PyTorch forbids it too); take the view with "
             "grad mode on, or make the change under NoGradGuard");
    TG_CHECK(base.is_contiguous(), op, ": in-place change of a view of a non-contiguous tensor of shape ",
             format_shape(base.shape()), " is not supported with grad mode on; clone() the view first or use "
             "NoGradGuard");
  }
  return true;
}

detail::InplaceOp::InplaceOp(Tensor& self, const char* op, std::vector<Tensor> others)
    : self_(self), op_(op), record_(check_inplace(self, op, others)) {}

Tensor detail::InplaceOp::old_value(bool copy) const {
  if (!record_) return self_;
  const Tensor input = inplace_input(self_);
  Tensor old = copy ? self_.detach().clone() : self_.detach();
  TensorImpl* impl = old.impl();
  impl->requires_grad = input.requires_grad();
  impl->grad_fn = input.grad_fn();
  impl->output_nr = input.output_nr();
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
  impl->requires_grad = true;
  impl->grad_fn = out.grad_fn();
  impl->output_nr = out.output_nr();
  impl->history_epoch = impl->storage->history_epoch();
  if (impl->retains_grad) retain_grad_hook(self_.impl_ptr());
  finish_rebase(self_, op_);
  return self_;
}

// ---- Tensor's in-place methods ----

Tensor& Tensor::fill_(double value) { return fill_impl(*this, value, "fill_"); }
Tensor& Tensor::zero_() { return fill_impl(*this, 0.0, "zero_"); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_");
  TG_CHECK(src.defined(), "copy_: the source tensor is undefined");
  detail::check_inplace(*this, "copy_", {src});
  Recorder rec{kCopyOp, {inplace_input(*this), src}};
  detail::raw_copy_(*this, src);
  if (rec) rebase(rec, *this, "copy_");
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_defined("add_");
  TG_CHECK(other.defined(), "add_: the other tensor is undefined");
  detail::check_result_fits_self("add_", dtype(), result_type(*this, other));
  TG_CHECK(is_floating(dtype()) || (alpha == std::trunc(alpha) && fits_integer_range(dtype(), alpha)),
           "add_: alpha: expected a whole number within ", dtype_name(dtype()), "'s range, got ", alpha);
  detail::check_inplace(*this, "add_", {other});
  Recorder rec{kAddInplaceOp, {inplace_input(*this), other}};
  detail::raw_add_(*this, other, alpha);
  if (rec) {
    rec.set_attrs(AlphaAttrs{alpha});
    rebase(rec, *this, "add_");
  }
  return *this;
}

Tensor& Tensor::mul_(double factor) {
  check_defined("mul_");
  // A whole factor within self's range keeps an integer dtype (as mul(x, s)); any other is float32.
  const bool integer_factor = factor == std::trunc(factor) && fits_integer_range(dtype(), factor);
  detail::check_result_fits_self("mul_", dtype(), integer_factor ? dtype() : DType::Float32);
  detail::check_inplace(*this, "mul_", {});
  Recorder rec{kMulInplaceOp, {inplace_input(*this)}};
  detail::raw_mul_(*this, factor);
  if (rec) {
    rec.set_attrs(FactorAttrs{factor});
    rebase(rec, *this, "mul_");
  }
  return *this;
}

}  // namespace tg
