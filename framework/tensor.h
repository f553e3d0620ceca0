// tg::Tensor: a handle to shared storage with a shape, strides, an offset and a dtype, plus the
// autograd state the tape needs (requires_grad, grad, the entry that produced it).
//
// Copying a Tensor copies the handle, never the data (as in PyTorch). Views (view, permute,
// narrow, expand, ...) share storage and its version counter; they are differentiable.
#pragma once

#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "dtype.h"
#include "storage.h"

namespace tg {

using Shape = std::vector<int64_t>;
using IntList = std::vector<int64_t>;  // per-dim op arguments: stride, padding, kernel size, ...

class Node;
class Tensor;
using GradHook = std::function<Tensor(const Tensor&)>;
// Sees a leaf after backward has accumulated a gradient into its .grad() (PyTorch's
// register_post_accumulate_grad_hook): data parallelism starts reducing a gradient from here.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// The state behind a Tensor handle. Users never touch it; the engine does.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the tape entry that produced this tensor (null: leaf)
  int output_nr = 0;                 // which output of grad_fn this is
  std::vector<GradHook> hooks;       // leaf hooks; non-leaf hooks live on grad_fn
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;  // leaves only
  bool retains_grad = false;         // retain_grad() was called (non-leaf)
  // The storage's history epoch this handle's history matches (kUntrackedEpoch: a detach()ed
  // handle, which claims no history and so can never hold a stale one).
  uint64_t history_epoch = 0;
  // For a view: the tensor it views (the root, never itself a view), whose history a recorded
  // in-place change of the view rebases (CopySlices). Null for a tensor that is not a view.
  std::shared_ptr<TensorImpl> view_base;
  // A view taken under NoGradGuard: it never takes history from a base that requires grad
  // (PyTorch forbids using it once that base was changed in place with grad mode on).
  bool view_taken_without_grad = false;
};

constexpr uint64_t kUntrackedEpoch = ~uint64_t{0};

class Tensor {
 public:
  Tensor() = default;  // undefined: used for "no tensor" (an absent bias, an ungrad input)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Allocates an uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  DType dtype() const;
  int64_t dim() const;
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const;
  bool is_contiguous() const;

  // Typed access. data<T>() points at element 0 (offset applied) and throws when T does not
  // match the dtype; index with strides() unless is_contiguous().
  template <class T> T* data();
  template <class T> const T* data() const;
  template <class T> T item() const;                      // the single element of a 1-element tensor
  double item() const;                                    // any dtype, as double
  template <class T> T at(const std::vector<int64_t>& index) const;  // bounds-checked
  template <class T> std::vector<T> to_vector() const;   // C-order copy

  // Autograd.
  bool requires_grad() const;
  // Leaves only. A leaf set to false after a forward gets no gradient from its backward.
  Tensor& requires_grad_(bool requires = true);
  bool is_leaf() const;
  Tensor grad() const;                            // undefined until backward reaches this leaf
  void set_grad(const Tensor& grad);
  void zero_grad();                               // drops the gradient (grad() becomes undefined)
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;
  // create_graph: leaves' .grad() keep their history, which refers back to the leaves: free it
  // with zero_grad() (see tape.h; tg::grad returns the gradients without the cycle).
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;                          // shares storage, no history
  // A hook sees the gradient flowing into this tensor before it is accumulated or passed on;
  // returning a defined tensor replaces that gradient, an undefined one keeps it. It runs once
  // per backward, on the whole gradient (a tensor used twice: on the sum of both parts).
  void register_hook(GradHook hook);
  // A leaf that requires grad: `hook(leaf)` runs each time backward has accumulated into its
  // .grad() (not for tg::grad, which leaves .grad() alone).
  void register_post_accumulate_grad_hook(PostAccumulateGradHook hook);
  // Keep the gradient of a non-leaf tensor in its .grad() during backward (leaves always do).
  void retain_grad();

  // Views (share storage; differentiable).
  Tensor view(const Shape& shape) const;           // contiguous input; one dim may be -1
  Tensor reshape(const Shape& shape) const;        // view when possible, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;         // broadcast; -1 keeps a dim
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // Copies (differentiable).
  Tensor contiguous() const;                       // itself when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;

  // In-place writes. They bump the version counter so that a saved tensor changed before
  // backward is caught. With grad mode on they follow PyTorch's rules (framework/inplace.h):
  // refused on a leaf that requires grad (use NoGradGuard), recorded on the tape when this
  // tensor has history or the op's other input requires grad. More in ops/: sub_, div_,
  // mul_ by a tensor, clamp_, masked_fill_, relu_.
  Tensor& fill_(double value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape, converted to this dtype
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other (broadcast)
  Tensor& mul_(double factor);
  uint64_t version() const;
  void bump_version() const;

  std::string to_string() const;  // shape, dtype and (abbreviated) values

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories. Float32 unless a dtype is given.
Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
Tensor ones(const Shape& shape, DType dtype = DType::Float32);
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
Tensor scalar_tensor(double value, DType dtype = DType::Float32);  // shape []
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Int64);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape);
Tensor from_vector(const std::vector<BFloat16>& values, const Shape& shape);
Tensor from_vector(const std::vector<Float16>& values, const Shape& shape);

// The dtype of a binary op's result, as torch.result_type: promote_types of the two dtypes, except
// that a 0-dim tensor beside a tensor of 1 or more dims only counts when it is of a higher
// category (floating over integer): float32 [3] with a float64 [] is float32, int64 [3] with a
// float64 [] is float64.
DType result_type(const Tensor& a, const Tensor& b);

// Shape helpers shared by ops.
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1, throws when out of range
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
bool same_shape(const Tensor& a, const Tensor& b);
// format_shape(t.shape()), or "undefined": how a message shows the tensor it got.
std::string describe_shape(const Tensor& t);

namespace detail {
// copy_ for a tensor that was just allocated: no version bump, so fresh copies start at 0.
void copy_into_new(Tensor& dst, const Tensor& src, const char* op = "copy_");
// A copy of src in `dtype`, never recorded; src itself (detached) when it has that dtype.
Tensor convert(const Tensor& src, DType dtype);
// How a kernel that has float32 and float64 versions only computes a 16-bit tensor: a float32
// copy of a bfloat16 or float16 tensor, never recorded; any other tensor (or an undefined one)
// passes through. The kernel's result is then rounded once with convert(out, dtype).
Tensor widen(const Tensor& t);
// The in-place kernels alone: no autograd rules, never recorded (they bump the version). For
// the engine's own gradient accumulation and the in-place methods' unrecorded path.
void raw_fill_(Tensor& dst, double value);
// full() for the ops' own scalars and results: a value past a floating dtype's largest finite one
// rounds to inf (a float16 comparison with 1e5, an overflowing loss) where full() refuses it.
Tensor full_unchecked(const Shape& shape, double value, DType dtype);
void raw_copy_(Tensor& dst, const Tensor& src);
void raw_add_(Tensor& dst, const Tensor& other, double alpha = 1.0);
void raw_mul_(Tensor& dst, double factor);
// retain_grad's hook, on the entry `owner` has now (again after an in-place op rebased it).
void retain_grad_hook(const std::shared_ptr<TensorImpl>& owner);
}  // namespace detail

// ---- template definitions ----

template <class T>
T* Tensor::data() {
  check_defined("data");
  TG_CHECK(dtype_of<T>::value == impl_->dtype, "data: tensor has dtype ", dtype_name(impl_->dtype),
           ", requested ", dtype_name(dtype_of<T>::value));
  return static_cast<T*>(impl_->storage->data()) + impl_->offset;
}

template <class T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

template <class T>
T Tensor::item() const {
  check_defined("item");
  TG_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", format_shape(shape()));
  return *data<T>();
}

template <class T>
T Tensor::at(const std::vector<int64_t>& index) const {
  check_defined("at");
  TG_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: expected ", dim(), " indices, got ",
           index.size());
  int64_t pos = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    TG_CHECK(index[d] >= 0 && index[d] < impl_->shape[d], "at: index ", index[d], " is out of range for dim ",
             d, " of size ", impl_->shape[d]);
    pos += index[d] * impl_->strides[d];
  }
  return data<T>()[pos];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace tg
