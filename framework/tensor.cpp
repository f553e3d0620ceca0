#include "tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <new>
#include <ostream>
#include <sstream>
#include <type_traits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "checked_math.h"
#include "inplace.h"
#include "strided_loop.h"
#include "tape.h"

namespace tg {

std::string format_shape(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string describe_shape(const Tensor& t) { return t.defined() ? format_shape(t.shape()) : "undefined"; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
    case DType::Int32: return "int32";
  }
  return "unknown";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::BFloat16:
    case DType::Float16: return 2;
  }
  return 8;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // floating beats integer, whatever the widths
  if (!fa) return DType::Int64;     // int32 with int64
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;  // float32 with a 16-bit type, or bfloat16 with float16
}

bool fits_integer_range(DType t, double v) {
  if (is_floating(t)) return true;
  const double lo = t == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;  // -2^31, -2^63: exact
  const double w = std::trunc(v);
  return w >= lo && w < -lo;  // false for NaN
}

bool fits_floating_range(DType t, double v) {
  if (!is_floating(t) || !std::isfinite(v)) return true;
  const double max = t == DType::Float64   ? std::numeric_limits<double>::max()
                     : t == DType::Float32 ? double(std::numeric_limits<float>::max())
                     : t == DType::BFloat16 ? 3.3895313892515355e38  // (2 - 2^-7) 2^127
                                            : 65504.0;               // float16: (2 - 2^-10) 2^15
  return std::fabs(v) <= max;
}

DType result_type(const Tensor& a, const Tensor& b) {
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  const DType dims = za ? b.dtype() : a.dtype(), zero_dim = za ? a.dtype() : b.dtype();
  return is_floating(zero_dim) && !is_floating(dims) ? zero_dim : dims;
}

// Checked: a shape that reaches here unchecked (a user's from_vector or normalized_shape) is
// refused rather than counted wrong; the ops check their own output shapes with better names.
int64_t shape_numel(const Shape& shape) { return checked_numel(shape, "numel", "shape"); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    // The last product is not a stride: no need for it to fit.
    if (d > 0) s = checked_mul(s, std::max<int64_t>(shape[d], 1), "contiguous_strides", "the strides of the shape");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t range = std::max<int64_t>(ndim, 1);
  TG_CHECK(dim >= -range && dim < range, op, ": dimension out of range (expected to be in [", -range, ", ",
           range - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + range : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(da == db || da == 1 || db == 1, op, ": the shapes ", format_shape(a), " and ", format_shape(b),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool same_shape(const Tensor& a, const Tensor& b) { return a.shape() == b.shape(); }

// ---- construction and metadata ----

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int64_t s : shape) TG_CHECK(s >= 0, "empty: expected non-negative sizes, got ", format_shape(shape));
  const int64_t numel = checked_numel(shape, "empty", "shape");
  int64_t nbytes = 0;
  TG_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dtype)), &nbytes),
           "empty: expected shape ", format_shape(shape), " of ", dtype_name(dtype),
           " to need at most 2^63 - 1 bytes, got ", numel, " elements of ", dtype_size(dtype), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes));
  } catch (const std::bad_alloc&) {
    // A valid size the allocator cannot serve (2^40 floats): an error the caller can report.
    TG_ERROR("empty: out of memory allocating ", nbytes, " bytes for shape ", format_shape(shape), " (",
             dtype_name(dtype), ")");
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::check_defined(const char* what) const {
  TG_CHECK(impl_ != nullptr, what, ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
int64_t Tensor::offset() const {
  check_defined("offset");
  return impl_->offset;
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }

bool Tensor::is_contiguous() const {
  check_defined("is_contiguous");
  if (numel() == 0) return true;  // as PyTorch: no element is out of place (group_norm's backward views one)
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (impl_->shape[d] == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->shape[d];
  }
  return true;
}

double Tensor::item() const {
  check_defined("item");
  TG_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", format_shape(shape()));
  return dispatch_all(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(*data<T>());
  });
}

uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage->version();
}
void Tensor::bump_version() const {
  check_defined("bump_version");
  impl_->storage->bump_version();
}

// ---- autograd state ----

namespace {
// A view whose history went stale (its memory changed in place through another handle) is
// given its history again when asked for it, as PyTorch regenerates a view's grad_fn.
void refresh_history(const std::shared_ptr<TensorImpl>& impl) {
  if (impl && impl->history_epoch != kUntrackedEpoch && impl->history_epoch != impl->storage->history_epoch())
    detail::refresh_view_history(Tensor(impl));
}
}  // namespace

bool Tensor::requires_grad() const {
  refresh_history(impl_);
  return impl_ && impl_->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires) {
  check_defined("requires_grad_");
  TG_CHECK(is_leaf(), "requires_grad_: can only change requires_grad of a leaf tensor; this one was computed by ",
           impl_->grad_fn->op().name, " (use detach() to get a leaf)");
  TG_CHECK(!requires || is_floating(impl_->dtype), "requires_grad_: only floating tensors can require grad, got ",
           dtype_name(impl_->dtype));
  impl_->requires_grad = requires;
  // A leaf of its own: no longer a view whose history follows its base (and no cycle through
  // its base's entries, which may come to hold it as a leaf edge).
  if (requires) impl_->view_base.reset();
  return *this;
}

bool Tensor::is_leaf() const {
  refresh_history(impl_);
  return impl_ && impl_->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return Tensor(impl_->grad);
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  if (g.defined())
    TG_CHECK(g.shape() == shape() && g.dtype() == dtype(), "set_grad: expected a gradient of shape ",
             format_shape(shape()), " and dtype ", dtype_name(dtype()), ", got ", format_shape(g.shape()), " ",
             dtype_name(g.dtype()));
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  check_defined("zero_grad");
  impl_->grad.reset();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  refresh_history(impl_);
  return impl_ ? impl_->grad_fn : none;
}

int Tensor::output_nr() const {
  refresh_history(impl_);
  return impl_ ? impl_->output_nr : 0;
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph, bool create_graph) const {
  tg::backward({*this}, {grad_output}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->history_epoch = kUntrackedEpoch;
  return Tensor(std::move(impl));
}

void Tensor::register_hook(GradHook hook) {
  check_defined("register_hook");
  TG_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  if (impl_->grad_fn)
    impl_->grad_fn->add_output_hook(impl_->output_nr, std::move(hook));
  else
    impl_->hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  check_defined("register_post_accumulate_grad_hook");
  TG_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: expected a leaf that requires grad, ",
           "got ", requires_grad() ? "a tensor with history (a non-leaf)" : "a tensor that does not require grad");
  impl_->post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() {
  check_defined("retain_grad");
  TG_CHECK(requires_grad(), "retain_grad: cannot retain the gradient of a tensor that does not require grad");
  if (is_leaf() || impl_->retains_grad) return;
  impl_->retains_grad = true;
  detail::retain_grad_hook(impl_);
}

void detail::retain_grad_hook(const std::shared_ptr<TensorImpl>& owner) {
  // A weak reference: the entry must not keep its own output alive (that would be a cycle).
  // The hook sits on the entry the tensor has now; an in-place op that rebases the tensor moves
  // it (a new hook), and this one then stands down, as PyTorch moves retains_grad.
  std::weak_ptr<TensorImpl> weak = owner;
  const Node* entry = owner->grad_fn.get();
  owner->grad_fn->add_output_hook(owner->output_nr, [weak, entry](const Tensor& g) {
    auto impl = weak.lock();
    if (!impl || impl->grad_fn.get() != entry) return Tensor();
    // Out of place, as PyTorch's: a handle to the last .grad() keeps its value, and under
    // create_graph the sum is recorded (an in-place add kept only the first pass's history:
    // differentiating two accumulated passes gave half the answer).
    impl->grad = (impl->grad ? detail::sum_of_gradients(Tensor(impl->grad), g) : g.clone()).impl_ptr();
    return Tensor();
  });
}

// ---- in-place writes ----

namespace {

// A floating value converts to an integer dtype only when it is finite and in range (C++ leaves
// the rest undefined; PyTorch returns garbage): refuse the whole copy before writing anything.
template <class D, class S>
void check_fits(const Tensor& s, const char* op) {
  if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>) {
    constexpr double lo = static_cast<double>(std::numeric_limits<D>::min());  // -2^(bits-1), exact
    const S* p = s.data<S>();
    bool fits = true;
    double bad = 0;
    // (No throw inside the loop: for_each_row runs it in an OpenMP region, which must not throw.)
    for_each_row<1>(
        s.shape(), {s.strides()},
        [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
          for (int64_t i = 0; i < n && fits; ++i) {
            const double v = static_cast<double>(static_cast<opmath_t<S>>(p[off[0] + i * st[0]]));
            if (!(v >= lo && v < -lo)) fits = false, bad = v;
          }
        },
        /*allow_parallel=*/false);
    TG_CHECK(fits, op, ": cannot convert ", bad, " to ", dtype_name(dtype_of<D>::value), " (expected a finite value in [",
             static_cast<int64_t>(lo), ", ", std::numeric_limits<D>::max(), "])");
  }
}

// Copies whose destination is at least this large store past the caches (non-temporal stores):
// their source and destination together exceed a core complex's last-level cache (32 MB on
// Zen 4), so a cached store only fetches each destination line first (the read-for-ownership) to
// be evicted before it is read again. copy/N32_C64_H64_W64 (32 MB) on an AMD EPYC (Zen 4):
// 1.7 ms against glibc memmove's 2.6 at one thread, 1.3 against 1.7 at two (medians of five
// alternating runs; not measured on an Intel CPU). glibc has the same switch, but sets its
// threshold from the L3 size the CPU reports, which under a hypervisor can be far from the real
// one (320 MB on that VM, so never).
constexpr size_t kStreamingCopyBytes = size_t{16} << 20;

// memmove(dst, src, bytes), with non-temporal stores when `streaming`, the run is long (short
// rows of a large copy would pay a fence each) and the two do not overlap (16-byte stores: the
// baseline has them, and the write-combining buffer merges four into a line). Same bytes either
// way.
void copy_bytes(void* dst, const void* src, size_t bytes, bool streaming) {
#if defined(__SSE2__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const auto da = reinterpret_cast<uintptr_t>(d), sa = reinterpret_cast<uintptr_t>(s);
  if (streaming && bytes >= (size_t{1} << 20) && (da + bytes <= sa || sa + bytes <= da)) {
    const size_t head = std::min(bytes, (16 - da % 16) % 16);
    std::memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= bytes; i += 64)
      for (size_t j = 0; j < 64; j += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + j), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + j)));
    std::memcpy(d + i, s + i, bytes - i);
    _mm_sfence();  // the streamed stores are ordered before anything this thread does next
    return;
  }
#else
  (void)streaming;
#endif
  std::memmove(dst, src, bytes);
}

// apply_inplace's f for a copy (dst[i] = src[i]), a type of its own so that a contiguous copy
// between equal dtypes can be a memmove.
struct CopyValue {
  template <class D, class S>
  S operator()(D, S s) const { return s; }
};

// A contiguous run converted between float32 and a 16-bit type on the raw bits (half_bits:
// branch-free integer code that vectorises, where the storage structs' conversions are copied
// through temporaries and run scalar: autocast's casts, so converted, were 11% of a bf16 detector
// step). The same bits as the structs' conversions. False (nothing done) for other pairs.
template <class D, class S>
bool convert_16bit_run(D* dst, const S* src, int64_t n) {
  if constexpr (std::is_same_v<S, float> && (std::is_same_v<D, BFloat16> || std::is_same_v<D, Float16>)) {
    auto* out = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = std::is_same_v<D, BFloat16> ? half_bits::float_to_bf16(src[i]) : half_bits::float_to_fp16(src[i]);
    return true;
  } else if constexpr (std::is_same_v<D, float> && (std::is_same_v<S, BFloat16> || std::is_same_v<S, Float16>)) {
    const auto* in = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = std::is_same_v<S, BFloat16> ? half_bits::bf16_to_float(in[i]) : half_bits::fp16_to_float(in[i]);
    return true;
  } else {
    return false;
  }
}

// The bytes [first, last) a non-empty tensor's elements span in its storage.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) (t.strides()[d] < 0 ? lo : hi) += t.strides()[d] * (t.shape()[d] - 1);
  const auto size = static_cast<int64_t>(dtype_size(t.dtype()));
  return {lo * size, (hi + 1) * size};
}

// Whether writing dst element by element can change src elements not yet read: the two share
// memory and are not the same view (x.copy_(x) and x.add_(x) read each element before writing
// it). x[1:].copy_(x[:-1]) is such a case: in one thread a forward loop would smear x[0] along
// the row, and with threads each piece would read what another may or may not have written yet.
bool overlaps_unevenly(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0 || dst.impl()->storage != src.impl()->storage) return false;
  if (dst.offset() == src.offset() && dst.shape() == src.shape() && dst.strides() == src.strides() &&
      dst.dtype() == src.dtype())
    return false;
  const auto [d0, d1] = byte_span(dst);
  const auto [s0, s1] = byte_span(src);
  return d0 < s1 && s0 < d1;
}

// dst[i] = f(dst[i], src[i]) with src broadcast to dst's shape, converting src's dtype. A src
// that overlaps dst unevenly is read from a copy taken first, so the result is what it would be
// had src been read whole before any write (as numpy does; PyTorch refuses such a copy_).
template <class F>
void apply_inplace(Tensor& dst, const Tensor& src, const char* op, F f, bool bump = true) {
  Shape b = broadcast_shapes(dst.shape(), src.shape(), op);
  TG_CHECK(b == dst.shape(), op, ": cannot broadcast a tensor of shape ", format_shape(src.shape()),
           " into one of shape ", format_shape(dst.shape()));
  Tensor s = (overlaps_unevenly(dst, src) ? src.detach().clone() : src).expand(dst.shape());
  // On the whole copy's size, not a thread's piece: what overflows the cache is all of it.
  const bool streaming = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype()) >= kStreamingCopyBytes;
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_all(s.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      check_fits<D, S>(s, op);
      D* d = dst.data<D>();
      const S* p = s.data<S>();
      for_each_row<2>(dst.shape(), {dst.strides(), s.strides()},
                      [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                        D* dr = d + off[0];
                        const S* sr = p + off[1];
                        if constexpr (std::is_same_v<F, CopyValue> && std::is_same_v<D, S>) {
                          // glibc's memmove picks the widest loads and stores the CPU has (this
                          // file is built for the baseline's 16-byte ones): copy/N32_C64_H64_W64
                          // (32 MB) 2.49 -> 2.41 ms at 1 thread, in every one of 10 alternating
                          // runs (Intel Xeon). memmove, not memcpy: x.copy_(x) copies a range onto
                          // itself (other overlaps were copied out first). Large copies stream
                          // (copy_bytes).
                          if (st[0] == 1 && st[1] == 1) {
                            copy_bytes(dr, sr, static_cast<size_t>(n) * sizeof(D), streaming);
                            return;
                          }
                        }
                        if constexpr (std::is_same_v<F, CopyValue>)
                          if (st[0] == 1 && st[1] == 1 && convert_16bit_run(dr, sr, n)) return;
                        if (st[0] == 1 && st[1] == 1) {
                          for (int64_t i = 0; i < n; ++i) dr[i] = f(dr[i], static_cast<D>(sr[i]));
                        } else if (st[0] == 1 && st[1] == 0) {
                          // A source broadcast along the row (expand(...).contiguous(), as sum's
                          // backward does): one value, a loop that vectorises as a fill; the
                          // strided loop below ran 63% of sum_fwd_bwd's time on such rows.
                          const D v = static_cast<D>(*sr);
                          for (int64_t i = 0; i < n; ++i) dr[i] = f(dr[i], v);
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            dr[i * st[0]] = f(dr[i * st[0]], static_cast<D>(sr[i * st[1]]));
                        }
                      });
    });
  });
  if (bump) dst.bump_version();
}

}  // namespace

void detail::copy_into_new(Tensor& dst, const Tensor& src, const char* op) {
  apply_inplace(dst, src, op, CopyValue{}, /*bump=*/false);
}

Tensor detail::convert(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src.detach();
  Tensor out = Tensor::empty(src.shape(), dtype);
  copy_into_new(out, src.detach(), "to");
  return out;
}

Tensor detail::widen(const Tensor& t) {
  return t.defined() && is_reduced_floating(t.dtype()) ? convert(t, DType::Float32) : t;
}

void detail::raw_fill_(Tensor& dst, double value) {
  TG_CHECK(fits_integer_range(dst.dtype(), value), "fill: cannot convert ", value, " to ", dtype_name(dst.dtype()),
           " (expected a finite value in its range)");
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = static_cast<T>(value);
    T* d = dst.data<T>();
    for_each_row<1>(dst.shape(), {dst.strides()}, [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
      for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] = v;
    });
  });
  dst.bump_version();
}

void detail::raw_copy_(Tensor& dst, const Tensor& src) {
  apply_inplace(dst, src, "copy_", CopyValue{});
}

namespace {
// Integer arithmetic wraps around (two's complement) as PyTorch's does: done on unsigned values,
// where C++ defines the overflow, not on signed ones, where it is undefined.
template <class T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}
}  // namespace

void detail::raw_add_(Tensor& dst, const Tensor& other, double alpha) {
  const DType wide = result_type(dst, other);
  if (wide != dst.dtype() && promote_types(wide, dst.dtype()) == wide) {  // (a 0-d dst never narrows)
    // The sum in the promoted dtype, rounded once into dst, as PyTorch (other converted to dst's
    // narrower dtype first was rounded twice: bfloat16 1 + float32 (2^-8 + 2^-20) gave 1).
    Tensor sum = convert(dst, wide);  // a new tensor: the dtypes differ
    raw_add_(sum, other, alpha);
    apply_inplace(dst, sum, "add_", CopyValue{});
    return;
  }
  if (alpha == 1.0) {
    apply_inplace(dst, other, "add_", [](auto d, auto s) {
      using A = opmath_t<decltype(d)>;
      return wrapping_add(A(d), A(s));
    });
  } else {
    apply_inplace(dst, other, "add_", [alpha](auto d, auto s) {
      using A = opmath_t<decltype(d)>;
      return wrapping_add(A(d), wrapping_mul(static_cast<A>(alpha), A(s)));
    });
  }
}

void detail::raw_mul_(Tensor& dst, double factor) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto f = static_cast<opmath_t<T>>(factor);
    T* d = dst.data<T>();
    for_each_row<1>(dst.shape(), {dst.strides()}, [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
      for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] = static_cast<T>(wrapping_mul(opmath_t<T>(d[off[0] + i * st[0]]), f));
    });
  });
  dst.bump_version();
}

// ---- factories ----

Tensor zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor full(const Shape& shape, double value, DType dtype) {
  // As PyTorch: a value past a floating dtype's largest finite one is an error, not an inf
  // (fill_ and masked_fill refuse it too); integer dtypes are checked by raw_fill_.
  TG_CHECK(fits_floating_range(dtype, value), "full: value ", value, " cannot be converted to ", dtype_name(dtype),
           " without overflow");
  return detail::full_unchecked(shape, value, dtype);
}

Tensor detail::full_unchecked(const Shape& shape, double value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  detail::raw_fill_(t, value);
  return t;
}

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  TG_CHECK(step != 0, "arange: expected a non-zero step");
  TG_CHECK((end - start) / step >= 0, "arange: the range [", start, ", ", end, ") is empty in the direction of step ",
           step);
  const double count = std::ceil((end - start) / step);
  // 2^63 as a double: the first count that does not fit in int64 (NaN fails the test too).
  TG_CHECK(count < 9223372036854775808.0, "arange: expected the number of elements of [", start, ", ", end,
           ") with step ", step, " to fit in int64, got ", count);
  int64_t n = static_cast<int64_t>(count);
  Tensor t = Tensor::empty({n}, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = t.data<T>();
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }

namespace {
template <class T>
Tensor from_values(const std::vector<T>& values, const Shape& shape) {
  TG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: got ", values.size(),
           " values for shape ", format_shape(shape), " (", shape_numel(shape), " elements)");
  Tensor t = Tensor::empty(shape, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}
}  // namespace

Tensor from_vector(const std::vector<float>& v, const Shape& s) { return from_values(v, s); }
Tensor from_vector(const std::vector<double>& v, const Shape& s) { return from_values(v, s); }
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s) { return from_values(v, s); }
Tensor from_vector(const std::vector<int32_t>& v, const Shape& s) { return from_values(v, s); }
Tensor from_vector(const std::vector<BFloat16>& v, const Shape& s) { return from_values(v, s); }
Tensor from_vector(const std::vector<Float16>& v, const Shape& s) { return from_values(v, s); }

// ---- printing ----

namespace {
// The values as PyTorch lays them out: nested brackets, one innermost row a line, a blank line
// between 2-D blocks (two between 3-D blocks, ...), every element right-aligned to one width.
// Over 1000 elements, each dim shows its first and last 3 entries around a "...", as PyTorch's
// summary. Integers print exactly (an int64 beyond 2^53 too); floats with 6 significant digits.
class ValuePrinter {
 public:
  explicit ValuePrinter(const Tensor& t)
      : shape_(t.shape()), strides_(contiguous_strides(t.shape())), summarise_(t.numel() > 1000) {
    if (is_floating(t.dtype())) floats_ = t.contiguous().to(DType::Float64);
    else ints_ = t.contiguous().to(DType::Int64);
  }
  std::string print() {
    if (shape_.empty()) return element(0);
    if (shape_numel(shape_) == 0) return "[]";
    block(nullptr, 0, 0);  // measures the width
    std::ostringstream os;
    block(&os, 0, 0);
    return os.str();
  }

 private:
  static constexpr int64_t kEdge = 3;
  std::string element(int64_t i) const {
    std::ostringstream os;
    if (floats_.defined()) os << std::setprecision(6) << floats_.data<double>()[i];
    else os << ints_.data<int64_t>()[i];
    return os.str();
  }
  // os null: measure only.
  void block(std::ostringstream* os, size_t d, int64_t offset) {
    const int64_t n = shape_[d];
    std::vector<int64_t> shown;  // -1: the "..."
    for (int64_t i = 0; i < n; ++i) {
      if (summarise_ && n > 2 * kEdge && i == kEdge) {
        shown.push_back(-1);
        i = n - kEdge - 1;
        continue;
      }
      shown.push_back(i);
    }
    const size_t inner = shape_.size() - d - 1;  // dims below this one
    const std::string sep = "," + (inner == 0 ? std::string(" ") : std::string(inner, '\n') + std::string(d + 1, ' '));
    if (os) *os << "[";
    for (size_t k = 0; k < shown.size(); ++k) {
      if (os && k) *os << sep;
      if (shown[k] < 0) {
        if (os) *os << "...";
      } else if (inner > 0) {
        block(os, d + 1, offset + shown[k] * strides_[d]);
      } else {
        const std::string e = element(offset + shown[k]);
        if (os) *os << std::string(width_ - e.size(), ' ') << e;
        else width_ = std::max(width_, e.size());
      }
    }
    if (os) *os << "]";
  }
  Shape shape_, strides_;
  bool summarise_;
  Tensor floats_, ints_;
  size_t width_ = 0;
};
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << format_shape(shape()) << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << ", requires_grad";
  if (grad_fn()) os << ", grad_fn=" << grad_fn()->op().name;
  os << ")\n" << ValuePrinter(detach()).print();
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace tg
