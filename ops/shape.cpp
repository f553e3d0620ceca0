// cat / stack / split / chunk. cat copies each input into its slab of the output; its backward
// hands each input the matching narrow of the gradient. stack is unsqueeze + cat, split and
// chunk are narrow views: all three get their gradients from those recorded ops.
#include "shape.h"

#include <algorithm>

#include "../framework/tape.h"
#include "internal/samples.h"

namespace tg {

namespace {

struct CatAttrs {
  int64_t dim;
  std::vector<int64_t> sizes;  // each input's size along dim; -1: a skipped legacy empty tensor
};

std::vector<Tensor> cat_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<CatAttrs>();
  std::vector<Tensor> grads(a.sizes.size());
  int64_t offset = 0;
  for (size_t i = 0; i < a.sizes.size(); ++i) {
    const int in = static_cast<int>(i);
    if (a.sizes[i] < 0) {  // skipped: no part of the output, an empty gradient (as PyTorch)
      if (ctx.needs_grad(in)) grads[i] = zeros({0}, ctx.input_dtype(in));
      continue;
    }
    if (ctx.needs_grad(in)) grads[i] = g[0].narrow(a.dim, offset, a.sizes[i]).contiguous();
    offset += a.sizes[i];
  }
  return grads;
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> cat_samples() {
  return {{"[2,3] ++ [2,1] ++ [2,2] dim 1",
           [](DType dt) { return Inputs{sample_tensor({2, 3}, dt), sample_tensor({2, 1}, dt), sample_tensor({2, 2}, dt)}; },
           [](const Inputs& x) { return Inputs{cat(x, 1)}; }},
          {"stack [3,2] x2 dim -1", [](DType dt) { return Inputs{sample_tensor({3, 2}, dt), sample_tensor({3, 2}, dt)}; },
           [](const Inputs& x) { return Inputs{stack(x, -1)}; }},
          {"chunk [5,2] in 3, recombined", [](DType dt) { return Inputs{sample_tensor({5, 2}, dt)}; },
           [](const Inputs& x) {
             std::vector<Tensor> parts = chunk(x[0], 3, 0);
             std::reverse(parts.begin(), parts.end());
             return Inputs{cat(parts, 0)};
           }}};
}

}  // namespace

// Twice differentiable: the backward is narrow (a view) and contiguous, both recorded ops.
const OpDef kCatOp{"cat", "cat_backward", "tensors...", cat_backward, cat_samples, true};

namespace {

// cat of tensors of one dtype, none a legacy empty one; position[i]: tensors[i]'s place in the
// caller's list, for the messages. recorded: the caller's tensors (converted where they are
// parts), skipped legacy empty ones too, so that they get a gradient; skipped[i] says which.
Tensor cat_parts(const std::vector<Tensor>& tensors, const std::vector<size_t>& position, int64_t dim_in,
                 const std::vector<Tensor>& recorded, const std::vector<bool>& skipped) {
  const char* op = "cat";
  const Tensor& first = tensors[0];
  TG_CHECK(first.dim() > 0, op, ": zero-dimensional tensor (at position ", position[0], ") cannot be concatenated");
  const int64_t dim = wrap_dim(dim_in, first.dim(), op);
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TG_CHECK(t.dim() == first.dim(), op, ": tensors must have the same number of dimensions: got ", first.dim(),
             " and ", t.dim(), " (tensor ", position[i], ")");
    for (int64_t d = 0; d < t.dim(); ++d)
      TG_CHECK(d == dim || t.size(d) == first.size(d), op, ": sizes of tensors must match except in dimension ", dim,
               ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number ", position[i],
               " in the list");
    sizes.push_back(t.size(dim));
    out_shape[dim] += t.size(dim);
  }
  Tensor out = Tensor::empty(out_shape, first.dtype());
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > 0) out.detach().narrow(dim, offset, sizes[i]).copy_(tensors[i].detach());
    offset += sizes[i];
  }
  std::vector<int64_t> input_sizes;
  size_t part = 0;
  for (bool s : skipped) input_sizes.push_back(s ? -1 : sizes[part++]);
  if (Recorder rec{kCatOp, recorded}) {
    rec.set_attrs(CatAttrs{dim, input_sizes});
    rec.set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  const char* op = "cat";
  TG_CHECK(!tensors.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) TG_CHECK(tensors[i].defined(), op, ": tensor ", i, " is undefined");
  // As PyTorch: the tensors' promoted dtype (each converted, a recorded op), and a 1-D tensor of
  // size 0 is skipped (the legacy empty tensor, whatever the others' shape; all of them: an
  // empty result, whatever dim).
  DType common = tensors[0].dtype();
  for (const Tensor& t : tensors) common = promote_types(common, t.dtype());
  std::vector<Tensor> parts, recorded;
  std::vector<size_t> position;
  std::vector<bool> skipped;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    skipped.push_back(t.dim() == 1 && t.numel() == 0);
    recorded.push_back(skipped.back() || t.dtype() == common ? t : t.to(common));
    if (skipped.back()) continue;
    parts.push_back(recorded.back());
    position.push_back(i);
  }
  if (parts.empty()) {  // all of them, along their only dim (so the result stays on the graph)
    for (size_t i = 0; i < tensors.size(); ++i) {
      recorded[i] = tensors[i].dtype() == common ? tensors[i] : tensors[i].to(common);
      parts.push_back(recorded[i]);
      position.push_back(i);
    }
    skipped.assign(tensors.size(), false);
    dim_in = 0;
  }
  return cat_parts(parts, position, dim_in, recorded, skipped);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim_in) {
  const char* op = "stack";
  TG_CHECK(!tensors.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    TG_CHECK(tensors[i].defined(), op, ": tensor ", i, " is undefined");
    TG_CHECK(tensors[i].shape() == tensors[0].shape(), op, ": expected each tensor to be equal size, but got ",
             format_shape(tensors[0].shape()), " at entry 0 and ", format_shape(tensors[i].shape()), " at entry ", i);
  }
  const int64_t dim = wrap_dim(dim_in, tensors[0].dim() + 1, op);
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) expanded.push_back(t.unsqueeze(dim));
  return cat(expanded, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  const char* op = "split";
  TG_CHECK(x.defined(), op, ": the tensor is undefined");
  TG_CHECK(x.dim() > 0, op, ": expected a tensor with at least one dimension");
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  int64_t total = 0;
  bool too_many = false;  // the sum passes the dim's size (checked before adding: no overflow)
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, op, ": split sizes must be non-negative, got ", format_shape(sizes));
    too_many = too_many || s > x.size(dim) - total;
    if (!too_many) total += s;
  }
  TG_CHECK(!too_many && total == x.size(dim), op, ": split sizes ", format_shape(sizes),
           " must sum to the size of dim ", dim, " (", x.size(dim), ")");
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(dim, offset, s));
    offset += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim_in) {
  TG_CHECK(x.defined(), "split: the tensor is undefined");
  TG_CHECK(x.dim() > 0, "split: expected a tensor with at least one dimension");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  const int64_t n = x.size(dim);
  TG_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: expected split_size > 0, got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // PyTorch returns one empty piece
  return split(x, sizes, dim);
}

constexpr int64_t kMaxEmptyChunks = 1 << 20;

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim_in) {
  TG_CHECK(chunks > 0, "chunk: expected chunks > 0, got ", chunks);
  TG_CHECK(x.defined() && x.dim() > 0, "chunk: expected a tensor with at least one dimension");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "chunk");
  const int64_t n = x.size(dim);
  if (n == 0) {  // PyTorch: `chunks` empty pieces
    TG_CHECK(chunks <= kMaxEmptyChunks, "chunk: expected at most ", kMaxEmptyChunks,
             " chunks of an empty dim (each is a tensor), got ", chunks);
    return split(x, std::vector<int64_t>(size_t(chunks), 0), dim);
  }
  return split(x, (n - 1) / chunks + 1, dim);  // ceil(n / chunks), without overflow
}

void register_shape_ops(Registry& r) { r.add(kCatOp); }

}  // namespace tg
