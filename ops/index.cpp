// index_select and gather. Their backward is a scatter-add (a recorded op, so that create_graph
// can differentiate it again: its own backward is index_select / gather), made deterministic without atomics
// by giving each thread output slices of its own:
//   index_select: x as (outer, D, inner), index (n). Threads split `outer`; inside, the n
//                 picks are added in index order.
//   gather:       one "fibre" = all positions of index that differ only along dim. A fibre
//                 writes only into the matching fibre of dx (the other coordinates are the
//                 same), so threads split the fibres.
#include "index.h"

#include <algorithm>

#include "../framework/checked_math.h"
#include "../framework/parallel.h"
#include "../framework/tape.h"
#include "internal/dim_layout.h"
#include "internal/samples.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

struct IndexAttrs {
  int64_t dim;
};


// Negative indices are rejected, as PyTorch does for index_select and gather.
void check_non_negative(const Tensor& idx, int64_t size, const char* op, int64_t dim) {
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    TG_CHECK(p[i] >= 0 && p[i] < size, op, ": index ", p[i], " is out of bounds for dimension ", dim, " with size ",
             size);
}

// zeros(shape) with g's slices added at index along dim: the kernel of index_select's
// backward, deterministic (threads split `outer`, the picks are added in index order).
Tensor index_add_zeros_values(const Tensor& grad, const Shape& shape, int64_t dim, const Tensor& idx) {
  if (is_reduced_floating(grad.dtype()))  // 16 bits: added up in float32, rounded once
    return round_result(index_add_zeros_values(detail::widen(grad), shape, dim, idx), grad.dtype());
  DimLayout l = dim_layout(shape, dim);
  const int64_t n = idx.numel();
  Tensor g = grad.detach().contiguous();
  Tensor dx = zeros(shape, grad.dtype());
  dispatch_floating(dx.dtype(), "index_select_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* ip = idx.data<int64_t>();
    const T* gp = g.data<T>();
    T* dp = dx.data<T>();
#pragma omp parallel for schedule(static) if (l.outer > 1 && l.outer * n * l.inner >= kParallelGrain)
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < n; ++i) {
        T* dst = dp + (o * l.D + ip[i]) * l.inner;
        const T* src = gp + (o * n + i) * l.inner;
        for (int64_t k = 0; k < l.inner; ++k) dst[k] += src[k];
      }
  });
  return dx;
}

Tensor index_add_zeros(const Tensor& grad, const Shape& shape, int64_t dim, const Tensor& idx);

// index_select's backward is a recorded op (index_add into zeros), so that under create_graph
// its gradient is differentiable again: it is linear in g, and its adjoint is index_select.
// Under plain backward nothing records, and it is the kernel alone.
// The saved slot of index_select, index_select_backward, gather and scatter_add (one enum:
// the four save the same one tensor, and enumerators share the namespace).
enum IndexSaved { kIndex };

std::vector<Tensor> index_select_backward(const BackwardContext& ctx, const std::vector<Tensor>& grads) {
  return {index_add_zeros(grads[0], ctx.input_shape(0), ctx.attrs<IndexAttrs>().dim, ctx.saved(kIndex))};
}

std::vector<Tensor> index_add_zeros_backward(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  return {index_select(gg[0], ctx.attrs<IndexAttrs>().dim, ctx.saved(kIndex))};
}

// scatter_add into zeros (gather's and max/min's backward) is linear in src; its adjoint is gather.
std::vector<Tensor> scatter_add_backward(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  return {gather(gg[0], ctx.attrs<IndexAttrs>().dim, ctx.saved(kIndex))};
}

// Calls fn(fibre_index_offset, fibre_x_offset) for each fibre of a contiguous index of shape
// `is` along `dim`, with x's strides `xs` (contiguous x). Offsets exclude the dim coordinate.
template <class Fn>
void for_each_fibre(const Shape& is, const Shape& xs_strides, int64_t dim, bool parallel, Fn fn) {
  const Shape istr = contiguous_strides(is);
  int64_t fibres = 1;
  for (size_t d = 0; d < is.size(); ++d)
    if (static_cast<int64_t>(d) != dim) fibres *= is[d];
#pragma omp parallel for schedule(static) if (parallel && fibres > 1)
  for (int64_t f = 0; f < fibres; ++f) {
    int64_t rem = f, ioff = 0, xoff = 0;
    for (int64_t d = static_cast<int64_t>(is.size()) - 1; d >= 0; --d) {
      if (d == dim) continue;
      const int64_t c = rem % is[d];
      rem /= is[d];
      ioff += c * istr[d];
      xoff += c * xs_strides[d];
    }
    fn(ioff, xoff);
  }
}

std::vector<Tensor> gather_backward(const BackwardContext& ctx, const std::vector<Tensor>& grads) {
  return {scatter_add_along(ctx.input_shape(0), ctx.attrs<IndexAttrs>().dim, ctx.saved(kIndex), grads[0])};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> index_select_samples() {
  return {{"[4,3,2] dim 1, repeats", [](DType dt) { return Inputs{sample_tensor({4, 3, 2}, dt)}; },
           [](const Inputs& x) {
             return Inputs{index_select(x[0], 1, from_vector(std::vector<int64_t>{2, 0, 2, 2}, {4}))};
           }}};
}
std::vector<SampleCase> gather_samples() {
  return {{"[3,4] dim 1, index [3,2]", [](DType dt) { return Inputs{sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) {
             return Inputs{gather(x[0], 1, from_vector(std::vector<int64_t>{3, 3, 0, 1, 2, 0}, {3, 2}))};
           }},
          {"[2,3,2] dim 0, index [3,2,1]", [](DType dt) { return Inputs{sample_tensor({2, 3, 2}, dt)}; },
           [](const Inputs& x) {
             return Inputs{gather(x[0], 0, from_vector(std::vector<int64_t>{1, 0, 1, 1, 0, 0}, {3, 2, 1}))};
           }}};
}

}  // namespace

namespace {
Tensor scatter_add_values(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& src) {
  if (is_reduced_floating(src.dtype()))  // 16 bits: added up in float32, rounded once
    return round_result(scatter_add_values(shape, dim, idx, detail::widen(src)), src.dtype());
  Tensor g = src.detach().contiguous();
  Tensor dx = zeros(shape, src.dtype());
  if (idx.numel() == 0) return dx;
  const Shape istr = contiguous_strides(idx.shape()), xstr = dx.strides();
  const int64_t n = idx.size(dim);
  dispatch_floating(dx.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* ip = idx.data<int64_t>();
    const T* gp = g.data<T>();
    T* dp = dx.data<T>();
    for_each_fibre(idx.shape(), xstr, dim, idx.numel() >= kParallelGrain, [&](int64_t io, int64_t xo) {
      for (int64_t j = 0; j < n; ++j) dp[xo + ip[io + j * istr[dim]] * xstr[dim]] += gp[io + j * istr[dim]];
    });
  });
  return dx;
}

}  // namespace

const OpDef kIndexSelectOp{"index_select", "index_select_backward", "self", index_select_backward,
                           index_select_samples, true};
const OpDef kGatherOp{"gather", "gather_backward", "self", gather_backward, gather_samples, true};
// The backward ops, recorded (under create_graph) so that they can be differentiated again.
const OpDef kIndexAddZerosOp{"index_select_backward", "index_select_backward_backward", "grad_output",
                             index_add_zeros_backward, nullptr, true};
const OpDef kScatterAddOp{"scatter_add", "scatter_add_backward", "src", scatter_add_backward, nullptr, true};

namespace {
Tensor index_add_zeros(const Tensor& grad, const Shape& shape, int64_t dim, const Tensor& idx) {
  Tensor dx = index_add_zeros_values(grad, shape, dim, idx);
  if (Recorder rec{kIndexAddZerosOp, {grad}}) {
    rec.save(kIndex, idx);
    rec.set_attrs(IndexAttrs{dim});
    rec.set_outputs({dx});
  }
  return dx;
}
}  // namespace

Tensor scatter_add_along(const Shape& shape, int64_t dim_in, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add_along";
  TG_CHECK(index.defined() && src.defined(), op, ": expected defined index and src");
  TG_CHECK(index.dtype() == DType::Int64, op, ": expected index of dtype int64, got ", dtype_name(index.dtype()));
  TG_CHECK(index.shape() == src.shape(), op, ": expected index and src of the same shape, got ",
           format_shape(index.shape()), " and ", format_shape(src.shape()));
  TG_CHECK(index.dim() == int64_t(shape.size()) && !shape.empty(), op, ": expected index with the ", shape.size(),
           " dims of the output shape ", format_shape(shape), " (at least one), got ", format_shape(index.shape()));
  checked_numel(shape, op, "the output shape");
  const int64_t dim = wrap_dim(dim_in, index.dim(), op);
  for (int64_t d = 0; d < index.dim(); ++d)
    TG_CHECK(d == dim || index.size(d) <= shape[size_t(d)], op, ": expected index ", format_shape(index.shape()),
             " to fit in the output shape ", format_shape(shape), " apart from dimension ", dim);
  Tensor idx = index.detach().contiguous();
  check_non_negative(idx, shape[size_t(dim)], op, dim);
  Tensor dx = scatter_add_values(shape, dim, idx, src);
  if (Recorder rec{kScatterAddOp, {src}}) {
    rec.save(kIndex, idx);
    rec.set_attrs(IndexAttrs{dim});
    rec.set_outputs({dx});
  }
  return dx;
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const char* op = "index_select";
  TG_CHECK(x.defined() && index.defined(), op, ": expected defined self and index");
  TG_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
           ": expected index of dtype int64 or int32, got ", dtype_name(index.dtype()));
  TG_CHECK(index.dim() <= 1, op, ": index is supposed to be a vector, got shape ", format_shape(index.shape()));
  if (x.dim() == 0) {  // as PyTorch: a 0-d self is a vector of one element, the result 0-d again
    wrap_dim(dim_in, 1, op);
    TG_CHECK(index.numel() == 1, op, ": index to a 0-d self can have only 1 value, got ", index.numel());
    return index_select(x.reshape({1}), 0, index).reshape({});
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  Tensor idx = index.detach().to(DType::Int64).contiguous().reshape({index.numel()});
  check_non_negative(idx, x.size(dim), op, dim);
  DimLayout l = dim_layout(x.shape(), dim);
  const int64_t n = idx.numel();
  Shape out_shape = x.shape();
  out_shape[dim] = n;
  Tensor xc = x.detach().contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* ip = idx.data<int64_t>();
    const T* xp = xc.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (l.outer > 1 && out.numel() >= kParallelGrain)
    for (int64_t a = 0; a < l.outer; ++a)
      for (int64_t i = 0; i < n; ++i)
        std::copy(xp + (a * l.D + ip[i]) * l.inner, xp + (a * l.D + ip[i] + 1) * l.inner, o + (a * n + i) * l.inner);
  });
  if (Recorder rec{kIndexSelectOp, {x}}) {
    rec.save(kIndex, idx);
    rec.set_attrs(IndexAttrs{dim});
    rec.set_outputs({out});
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const char* op = "gather";
  TG_CHECK(x.defined() && index.defined(), op, ": expected defined self and index");
  TG_CHECK(index.dtype() == DType::Int64, op, ": expected index of dtype int64, got ", dtype_name(index.dtype()));
  if ((x.dim() == 0 && index.dim() <= 1) || (index.dim() == 0 && x.dim() == 1)) {
    // as PyTorch: a 0-d self or index counts as a vector of one element; the result has the
    // index's shape
    wrap_dim(dim_in, 1, op);
    return gather(x.reshape({x.numel()}), 0, index.reshape({index.numel()})).reshape(index.shape());
  }
  TG_CHECK(index.dim() == x.dim(), op, ": index tensor must have the same number of dimensions as input tensor (",
           x.dim(), "), got ", index.dim());
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d)
    TG_CHECK(d == dim || index.size(d) <= x.size(d), op, ": size does not match at dimension ", d,
             ": expected index ", format_shape(index.shape()), " to be smaller than self ", format_shape(x.shape()),
             " apart from dimension ", dim);
  Tensor idx = index.detach().contiguous();
  check_non_negative(idx, x.size(dim), op, dim);
  Tensor xc = x.detach().contiguous();
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  if (idx.numel() > 0) {
    const Shape istr = contiguous_strides(idx.shape()), xstr = xc.strides();
    const int64_t n = idx.size(dim);
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t* ip = idx.data<int64_t>();
      const T* xp = xc.data<T>();
      T* o = out.data<T>();
      for_each_fibre(idx.shape(), xstr, dim, idx.numel() >= kParallelGrain, [&](int64_t io, int64_t xo) {
        for (int64_t j = 0; j < n; ++j) o[io + j * istr[dim]] = xp[xo + ip[io + j * istr[dim]] * xstr[dim]];
      });
    });
  }
  if (Recorder rec{kGatherOp, {x}}) {
    rec.save(kIndex, idx);
    rec.set_attrs(IndexAttrs{dim});
    rec.set_outputs({out});
  }
  return out;
}

void register_index_ops(Registry& r) {
  r.add(kIndexSelectOp);
  r.add(kGatherOp);
  r.add(kIndexAddZerosOp);
  r.add(kScatterAddOp);
}

}  // namespace tg
