// embedding. Shape legend: weight (V, D), indices (n) flattened, out (n, D).
//   forward:  out[i] = weight[idx[i]]
//   backward: dweight[v] = sum over i with idx[i] == v of g[i]   (none for v == padding_idx)
// The backward is a scatter-add made deterministic without atomics: each thread owns a block
// of weight rows and adds, in index order, only the gradients that land in its block.
#include "embedding.h"

#include <algorithm>

#include "../framework/parallel.h"
#include "../framework/tape.h"
#include "elementwise.h"
#include "internal/samples.h"
#include "internal/reduced_float.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tg {

namespace {

struct EmbeddingAttrs {
  int64_t padding_idx;  // -1: none (already wrapped to [0, V) otherwise)
};

// dW = zeros(V, D) with the rows of g added at the indices (the padding row skipped).
// Deterministic without atomics: each thread owns a range of rows of dW and adds in index order.
Tensor embedding_backward_values(const Tensor& grad, const Tensor& idx, int64_t V, int64_t pad) {
  if (is_reduced_floating(grad.dtype()))  // 16 bits: added up in float32, rounded once
    return round_result(embedding_backward_values(detail::widen(grad), idx, V, pad), grad.dtype());
  const int64_t D = grad.dim() > 0 ? grad.size(grad.dim() - 1) : 1, n = idx.numel();
  Tensor g = grad.detach().contiguous();
  Tensor dw = zeros({V, D}, grad.dtype());
  dispatch_floating(dw.dtype(), "embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* ip = idx.data<int64_t>();
    const T* gp = g.data<T>();
    T* wp = dw.data<T>();
    const bool parallel = n * D >= kParallelGrain && V > 1;
#pragma omp parallel if (parallel)
    {
      int64_t lo = 0, hi = V;
#ifdef _OPENMP
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      lo = V * t / nt;
      hi = V * (t + 1) / nt;
#endif
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = ip[i];
        if (v < lo || v >= hi || v == pad) continue;
        T* row = wp + v * D;
        const T* gr = gp + i * D;
        for (int64_t d = 0; d < D; ++d) row[d] += gr[d];
      }
    }
  });
  return dw;
}

Tensor embedding_backward_op(const Tensor& grad, const Tensor& idx, int64_t V, int64_t pad);

// A recorded op (embedding_backward), so that under create_graph the weight's gradient is
// differentiable again; under plain backward nothing records and it is the kernel alone.
// The saved slot of embedding and embedding_backward (one enum: both save the indices).
enum EmbeddingSaved { kIndices };

std::vector<Tensor> embedding_backward(const BackwardContext& ctx, const std::vector<Tensor>& grads) {
  return {embedding_backward_op(grads[0], ctx.saved(kIndices), ctx.input_shape(0)[0],
                                ctx.attrs<EmbeddingAttrs>().padding_idx)};
}

// embedding_backward is linear in g; its adjoint reads the rows back: embedding(gg, indices),
// with the rows at the padding index zeroed (they received nothing).
std::vector<Tensor> embedding_backward_backward(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const Tensor idx = ctx.saved(kIndices);
  const int64_t pad = ctx.attrs<EmbeddingAttrs>().padding_idx;
  Tensor out = embedding(gg[0], idx);
  if (pad < 0) return {out};
  Shape mshape = idx.shape();
  mshape.push_back(1);
  Tensor mask = Tensor::empty(mshape, gg[0].dtype());
  dispatch_all_floating(mask.dtype(), "embedding_backward_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* ip = idx.data<int64_t>();
    T* m = mask.data<T>();
    for (int64_t i = 0; i < idx.numel(); ++i) m[i] = ip[i] == pad ? T(0) : T(1);
  });
  return {mul(out, mask)};
}

std::vector<SampleCase> embedding_samples() {
  auto make = [](DType dt) { return std::vector<Tensor>{sample_tensor({5, 3}, dt)}; };
  // No padding_idx case: its gradient is zero at the padding row by definition (as PyTorch's),
  // which finite differences cannot see. tests/test_core_ops_golden.cpp (first order) and
  // tests/test_double_backward_index.cpp (first and second order) check it against PyTorch.
  return {{"(5,3) indices (2,3) with repeats", make,
           [](const std::vector<Tensor>& x) {
             return std::vector<Tensor>{embedding(x[0], from_vector(std::vector<int64_t>{0, 2, 2, 4, 1, 2}, {2, 3}))};
           }}};
}

}  // namespace

const OpDef kEmbeddingOp{"embedding", "embedding_backward", "weight", embedding_backward, embedding_samples, true};
const OpDef kEmbeddingBackwardOp{"embedding_backward", "embedding_backward_backward", "grad_output",
                                 embedding_backward_backward, nullptr, true};

namespace {
Tensor embedding_backward_op(const Tensor& grad, const Tensor& idx, int64_t V, int64_t pad) {
  Tensor dw = embedding_backward_values(grad, idx, V, pad);
  if (Recorder rec{kEmbeddingBackwardOp, {grad}}) {
    rec.save(kIndices, idx);
    rec.set_attrs(EmbeddingAttrs{pad});
    rec.set_outputs({dw});
  }
  return dw;
}
}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  const char* op = "embedding";
  TG_CHECK(weight.defined() && indices.defined(), op, ": expected defined weight and indices");
  TG_CHECK(weight.dim() == 2, op, ": expected weight of shape (num_embeddings, embedding_dim), got ",
           format_shape(weight.shape()));
  TG_CHECK(is_floating(weight.dtype()), op, ": expected a floating weight, got ", dtype_name(weight.dtype()));
  TG_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, op,
           ": expected indices of dtype int64 or int32, got ", dtype_name(indices.dtype()));
  const int64_t V = weight.size(0), D = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    TG_CHECK(*padding_idx >= -V && *padding_idx < V, op, ": padding_idx ", *padding_idx,
             " must be within num_embeddings (", V, ")");
    pad = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
  }
  Tensor idx = indices.detach().to(DType::Int64).contiguous();
  const int64_t* ip = idx.data<int64_t>();
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i)
    TG_CHECK(ip[i] >= 0 && ip[i] < V, op, ": index ", ip[i], " is out of range for ", V, " embeddings");
  Tensor w = weight.detach().contiguous();
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  dispatch_all_floating(weight.dtype(), op, [&](auto tag) {  // a copy of rows: any floating dtype
    using T = typename decltype(tag)::type;
    const T* wp = w.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (n > 1 && n * D >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) std::copy(wp + ip[i] * D, wp + (ip[i] + 1) * D, o + i * D);
  });
  if (Recorder rec{kEmbeddingOp, {weight}}) {
    rec.save(kIndices, idx);
    rec.set_attrs(EmbeddingAttrs{pad});
    rec.set_outputs({out});
  }
  return out;
}

void register_embedding_ops(Registry& r) {
  r.add(kEmbeddingOp);
  r.add(kEmbeddingBackwardOp);
}

}  // namespace tg
