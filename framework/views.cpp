// Views share their base's storage (and version counter). Their gradients are the same
// movement in reverse: a reshape reshapes back, a permute permutes back, a slice scatters into
// zeros, an expand sums over the broadcast dims.
#include "views.h"

#include <algorithm>
#include <numeric>

#include "checked_math.h"
#include "grad_mode.h"
#include "random.h"
#include "strided_loop.h"
#include "tape.h"

namespace tg {

namespace {

// view = false for an alias of a fresh copy (reshape of a non-contiguous tensor): not a view
// of anything the user holds.
Tensor alias(const Tensor& base, Shape shape, Shape strides, int64_t offset, bool view = true) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  // A view of a stale base is stale too. A view taken under NoGradGuard, or of a detach()ed
  // handle, claims no history as of now (it is not exempt as the handle is): a later recorded
  // in-place change of the memory makes it stale, and it then takes its history from its base
  // (a view of a detached handle), or, taken without grad (or taken of a view that was: PyTorch
  // propagates the mode), is refused when the base then requires grad and is a constant again
  // otherwise.
  const uint64_t epoch = base.impl()->history_epoch;
  const bool without_grad = view && (!GradMode::is_enabled() || base.impl()->view_taken_without_grad);
  impl->history_epoch = epoch == kUntrackedEpoch || without_grad ? impl->storage->history_epoch() : epoch;
  if (view) {
    impl->view_base = base.impl()->view_base ? base.impl()->view_base : base.impl_ptr();
    impl->view_taken_without_grad = without_grad;
  }
  return Tensor(std::move(impl));
}

// ---- backward functions ----

std::vector<Tensor> reshape_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {g[0].reshape(ctx.input_shape(0))};
}

struct PermuteAttrs {
  std::vector<int64_t> dims;
};
std::vector<Tensor> permute_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& dims = ctx.attrs<PermuteAttrs>().dims;
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[dims[i]] = static_cast<int64_t>(i);
  return {g[0].permute(inverse)};
}

struct SliceAttrs {
  int64_t dim, start, end, step;
};
Tensor slice_scatter_zeros(const Tensor& g, const Shape& shape, const SliceAttrs& a);

std::vector<Tensor> slice_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {slice_scatter_zeros(g[0], ctx.input_shape(0), ctx.attrs<SliceAttrs>())};
}

// The gradient of slice_scatter_zeros (itself the gradient of a slice) is the same slice.
std::vector<Tensor> slice_scatter_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<SliceAttrs>();
  return {g[0].slice(a.dim, a.start, a.end, a.step)};
}

std::vector<Tensor> expand_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {sum_to(g[0], ctx.input_shape(0))};
}

// sum_to's gradient broadcasts back: an expand (a view; the consumer copies if it must).
std::vector<Tensor> sum_to_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {g[0].expand(ctx.input_shape(0))};
}

std::vector<Tensor> identity_backward(const BackwardContext&, const std::vector<Tensor>& g) { return {g[0]}; }

std::vector<Tensor> to_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {g[0].to(ctx.input_dtype(0))};
}

// ---- sample cases for the generic gradcheck ----

std::vector<Tensor> one_input(DType dt, const Shape& shape) {
  Tensor x = randn(shape, dt);
  x.requires_grad_();
  return {x};
}

std::vector<SampleCase> view_samples() {
  return {{"[2,3,4] -> [6,4]", [](DType dt) { return one_input(dt, {2, 3, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].view({6, -1})}; }}};
}
std::vector<SampleCase> reshape_samples() {
  return {{"transposed [3,4] -> [12]", [](DType dt) { return one_input(dt, {3, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].transpose(0, 1).reshape({12})}; }}};
}
std::vector<SampleCase> permute_samples() {
  return {{"[2,3,4] (2,0,1)", [](DType dt) { return one_input(dt, {2, 3, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].permute({2, 0, 1})}; }}};
}
std::vector<SampleCase> slice_samples() {
  return {{"[5,4] dim 0, 1:5:2", [](DType dt) { return one_input(dt, {5, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].slice(0, 1, 5, 2)}; }},
          {"[3,6] narrow dim 1", [](DType dt) { return one_input(dt, {3, 6}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].narrow(1, 2, 3)}; }},
          {"[3,6] select dim 0", [](DType dt) { return one_input(dt, {3, 6}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].select(0, 1)}; }}};
}
std::vector<SampleCase> expand_samples() {
  return {{"[3,1] -> [2,3,4]", [](DType dt) { return one_input(dt, {3, 1}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].expand({2, 3, 4})}; }}};
}
std::vector<SampleCase> squeeze_samples() {
  return {{"[3,1,2] dim 1", [](DType dt) { return one_input(dt, {3, 1, 2}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].squeeze(1)}; }}};
}
std::vector<SampleCase> unsqueeze_samples() {
  return {{"[3,2] dim -1", [](DType dt) { return one_input(dt, {3, 2}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].unsqueeze(-1)}; }}};
}
std::vector<SampleCase> contiguous_samples() {
  return {{"transposed [3,4]", [](DType dt) { return one_input(dt, {3, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].transpose(0, 1).contiguous()}; }}};
}
std::vector<SampleCase> clone_samples() {
  return {{"[2,3]", [](DType dt) { return one_input(dt, {2, 3}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].clone()}; }}};
}
std::vector<SampleCase> sum_to_samples() {
  return {{"[2,3,4] -> [3,1]", [](DType dt) { return one_input(dt, {2, 3, 4}); },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{sum_to(x[0], {3, 1})}; }}};
}

const OpDef kViewOp{"view", "view_backward", "self", reshape_backward, view_samples, true};
const OpDef kReshapeOp{"reshape", "reshape_backward", "self", reshape_backward, reshape_samples, true};
const OpDef kSqueezeOp{"squeeze", "squeeze_backward", "self", reshape_backward, squeeze_samples, true};
const OpDef kUnsqueezeOp{"unsqueeze", "unsqueeze_backward", "self", reshape_backward, unsqueeze_samples, true};
const OpDef kPermuteOp{"permute", "permute_backward", "self", permute_backward, permute_samples, true};
const OpDef kSliceOp{"slice", "slice_backward", "self", slice_backward, slice_samples, true};
const OpDef kSliceScatterOp{"slice_backward", "slice_backward_backward", "grad_output", slice_scatter_backward,
                            nullptr, true};
const OpDef kExpandOp{"expand", "expand_backward", "self", expand_backward, expand_samples, true};
const OpDef kSumToOp{"sum_to", "sum_to_backward", "self", sum_to_backward, sum_to_samples, true};
const OpDef kContiguousOp{"contiguous", "contiguous_backward", "self", identity_backward, contiguous_samples, true};
const OpDef kCloneOp{"clone", "clone_backward", "self", identity_backward, clone_samples, true};
// No sample: a float32 round trip cannot be differenced at float64 precision; tests/test_tensor.cpp
// checks its gradient directly.
const OpDef kToOp{"to", "to_backward", "self", to_backward, nullptr, true};

Tensor slice_scatter_zeros(const Tensor& g, const Shape& shape, const SliceAttrs& a) {
  Tensor out = zeros(shape, g.dtype());
  {
    NoGradGuard no_grad;
    out.slice(a.dim, a.start, a.end, a.step).copy_(g);
  }
  if (Recorder rec{kSliceScatterOp, {g}}) {
    rec.set_attrs(a);
    rec.set_outputs({out});
  }
  return out;
}


Shape infer_view_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TG_CHECK(infer_at < 0, op, ": only one dimension can be inferred (-1), got ", format_shape(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      TG_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", format_shape(requested));
      known = checked_mul(known, shape[i], op, "the product of the requested sizes");
    }
  }
  if (infer_at >= 0) {
    TG_CHECK(known != 0 && numel % known == 0, op, ": shape ", format_shape(requested),
             " is invalid for input of size ", numel);
    shape[infer_at] = numel / known;
  }
  TG_CHECK(checked_numel(shape, op, "the requested shape") == numel, op, ": shape ", format_shape(requested),
           " is invalid for input of size ",
           numel);
  return shape;
}

}  // namespace

const std::vector<const OpDef*>& view_op_defs() {
  static const std::vector<const OpDef*> defs = {&kViewOp,    &kReshapeOp, &kSqueezeOp, &kUnsqueezeOp,
                                                 &kPermuteOp, &kSliceOp,   &kSliceScatterOp, &kExpandOp,
                                                 &kSumToOp,   &kContiguousOp, &kCloneOp,  &kToOp};
  return defs;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t nd = grad.dim(), lead = nd - static_cast<int64_t>(shape.size());
  TG_CHECK(lead >= 0, "sum_to: cannot reduce shape ", format_shape(grad.shape()), " to ", format_shape(shape));
  // The output seen through the gradient's shape: stride 0 along every reduced dim.
  Shape out_strides(nd, 0);
  Shape out_contig = contiguous_strides(shape);
  for (int64_t d = lead; d < nd; ++d) {
    int64_t s = shape[d - lead];
    TG_CHECK(s == grad.size(d) || s == 1, "sum_to: cannot reduce shape ", format_shape(grad.shape()), " to ",
             format_shape(shape));
    out_strides[d] = (s == 1 && grad.size(d) != 1) ? 0 : out_contig[d - lead];
  }
  if (is_reduced_floating(grad.dtype())) {  // summed in float32 (widen detaches), rounded once
    Tensor out = detail::convert(sum_to(detail::widen(grad), shape), grad.dtype());
    record_one_input(kSumToOp, grad, out);
    return out;
  }
  Tensor out = zeros(shape, grad.dtype());
  dispatch_floating(grad.dtype(), "sum_to", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = grad.data<T>();
    T* o = out.data<T>();
    // Serial: several rows add into the same outputs, and a fixed order keeps bits stable.
    for_each_row<2>(
        grad.shape(), {out_strides, grad.strides()},
        [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
          T* orow = o + off[0];
          const T* grow = g + off[1];
          if (st[0] == 0) {
            T acc = 0;
            for (int64_t i = 0; i < n; ++i) acc += grow[i * st[1]];
            *orow += acc;
          } else {
            for (int64_t i = 0; i < n; ++i) orow[i * st[0]] += grow[i * st[1]];
          }
        },
        /*allow_parallel=*/false);
  });
  record_one_input(kSumToOp, grad, out);  // differentiable: a backward recorded under create_graph uses it
  return out;
}

// ---- Tensor's view and copy methods ----

Tensor Tensor::view(const Shape& requested) const {
  check_defined("view");
  Shape shape = infer_view_shape(requested, numel(), "view");
  TG_CHECK(is_contiguous(), "view: the input of shape ", format_shape(this->shape()),
           " is not contiguous; use reshape() (which copies when it must) or contiguous() first");
  Tensor out = alias(*this, shape, contiguous_strides(shape), offset());
  record_one_input(kViewOp, *this, out);
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  check_defined("reshape");
  Shape shape = infer_view_shape(requested, numel(), "reshape");
  Tensor source = is_contiguous() ? *this : contiguous().detach();
  Tensor out = alias(source, shape, contiguous_strides(shape), source.offset(), /*view=*/is_contiguous());
  record_one_input(kReshapeOp, *this, out);
  return out;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  check_defined("permute");
  TG_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: expected ", dim(), " dims for a tensor of shape ",
           format_shape(shape()), ", got ", format_shape(dims));
  std::vector<int64_t> wrapped(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    TG_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", format_shape(dims));
    seen[d] = true;
    wrapped[i] = d;
    shape[i] = impl()->shape[d];
    strides[i] = impl()->strides[d];
  }
  Tensor out = alias(*this, shape, strides, offset());
  record_one_input(kPermuteOp, *this, out, {}, PermuteAttrs{wrapped});
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check_defined("transpose");
  std::vector<int64_t> dims(dim());
  std::iota(dims.begin(), dims.end(), int64_t{0});
  // wrap_dim checks both (a 0-d tensor takes 0 and -1, as PyTorch), then there is nothing to swap
  const int64_t d0 = wrap_dim(dim0, dim(), "transpose"), d1 = wrap_dim(dim1, dim(), "transpose");
  if (dim() > 0) std::swap(dims[d0], dims[d1]);
  return permute(dims);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  check_defined("slice");
  TG_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  TG_CHECK(step > 0, "slice: expected step > 0, got ", step);
  const int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = end > start ? (end - start - 1) / step + 1 : 0;  // (no overflow for any step)
  if (shape[d] > 1) strides[d] *= step;  // step < n here: within the storage's extent
  Tensor out = alias(*this, shape, strides, offset() + start * this->strides()[d]);
  record_one_input(kSliceOp, *this, out, {}, SliceAttrs{d, start, end, step});
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  check_defined("narrow");
  TG_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = size(d);
  // a negative start counts from the end, as in PyTorch (start == n with length 0 is allowed)
  TG_CHECK(start >= -n && start <= n, "narrow: start ", start, " is out of range for dim ", d, " of size ", n);
  if (start < 0) start += n;
  TG_CHECK(length >= 0 && length <= n - start, "narrow: start (", start, ") + length (", length,
           ") exceeds dimension size (", n, ") of dim ", d);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check_defined("select");
  TG_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = size(d);
  TG_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& requested) const {
  check_defined("expand");
  const int64_t nd = static_cast<int64_t>(requested.size());
  TG_CHECK(nd >= dim(), "expand: the target shape ", format_shape(requested), " has fewer dims than the input ",
           format_shape(shape()));
  Shape shape(nd), strides(nd);
  const int64_t lead = nd - dim();
  for (int64_t i = 0; i < nd; ++i) {
    int64_t in_size = i < lead ? 1 : impl()->shape[i - lead];
    int64_t in_stride = i < lead ? 0 : impl()->strides[i - lead];
    int64_t want = requested[i] == -1 ? in_size : requested[i];
    TG_CHECK(i >= lead || requested[i] != -1, "expand: -1 is not allowed for a new leading dim, got ",
             format_shape(requested));
    TG_CHECK(want == in_size || in_size == 1, "expand: the size of dim ", i, " (", in_size,
             ") must match the target size ", want, " or be 1; input ", format_shape(this->shape()), ", target ",
             format_shape(requested));
    shape[i] = want;
    strides[i] = (want == in_size) ? in_stride : 0;
  }
  if (shape == this->shape()) return *this;
  checked_numel(shape, "expand", "the target shape");  // a view allocates nothing; numel() must still fit
  Tensor out = alias(*this, shape, strides, offset());
  record_one_input(kExpandOp, *this, out);
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  check_defined("squeeze");
  d = wrap_dim(d, dim(), "squeeze");  // a 0-d tensor takes dim 0 or -1, as in PyTorch
  if (dim() == 0) return *this;
  if (size(d) != 1) return *this;
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = alias(*this, shape, strides, offset());
  record_one_input(kSqueezeOp, *this, out);
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check_defined("unsqueeze");
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), strides = this->strides();
  int64_t stride = d < dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  Tensor out = alias(*this, shape, strides, offset());
  record_one_input(kUnsqueezeOp, *this, out);
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined("flatten");
  start_dim = wrap_dim(start_dim, dim(), "flatten");  // a 0-d tensor takes dims 0 and -1, as in PyTorch
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  if (dim() == 0) return reshape({1});
  TG_CHECK(start_dim <= end_dim, "flatten: start_dim (", start_dim, ") must not come after end_dim (", end_dim, ")");
  if (start_dim == end_dim) return *this;  // nothing to merge: the tensor itself, as PyTorch returns
  Shape shape(this->shape().begin(), this->shape().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) merged *= size(i);
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + end_dim + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  if (is_contiguous()) return *this;
  Tensor out = Tensor::empty(shape(), dtype());
  detail::copy_into_new(out, detach());
  record_one_input(kContiguousOp, *this, out);
  return out;
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = Tensor::empty(shape(), dtype());
  detail::copy_into_new(out, detach());
  record_one_input(kCloneOp, *this, out);
  return out;
}

Tensor Tensor::to(DType target) const {
  check_defined("to");
  if (target == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), target);
  detail::copy_into_new(out, detach(), "to");
  if (is_floating(target)) record_one_input(kToOp, *this, out);
  return out;
}

}  // namespace tg
