// Matrix products. Shape legend: n rows of the left operand, k the contracted dim, m columns
// of the right operand, B the (broadcast) batch.
//
//   matmul: out = a @ b          da = g @ b^T         db = a^T @ g
//   linear: y = x W^T + bias     dx = g @ W           dW = g^T @ x      dbias = sum over rows of g
#include "matmul.h"

#include <Eigen/Core>
#include <algorithm>

#include "../framework/parallel.h"
#include "../framework/tape.h"
#include "../framework/views.h"
#include "internal/samples.h"

namespace tg {

namespace {

// One product on one thread: C (n, m) = op(A) op(B), every operand a row-major block with its
// own leading dimension. Eigen turns products with rows + cols + depth < 20 into coefficient-wise
// sums whose order follows the buffers' alignment; those run as plain loops so that the result
// never depends on where the data sits.
template <class T>
void gemm_block(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n, int64_t k,
                int64_t m, bool trans_a, bool trans_b, bool accumulate) {
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<RowMat, Eigen::Unaligned, Stride> c(C, n, m, Stride(ldc));
  if (k == 0) {
    if (!accumulate) c.setZero();
    return;
  }
  // A stored as (n, k), or (k, n) when transposed; likewise B.
  Eigen::Map<const RowMat, Eigen::Unaligned, Stride> a(A, trans_a ? k : n, trans_a ? n : k, Stride(lda));
  Eigen::Map<const RowMat, Eigen::Unaligned, Stride> b(B, trans_b ? m : k, trans_b ? k : m, Stride(ldb));
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (n + m + k < 20) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
          T s = 0;
          for (int64_t p = 0; p < k; ++p) s += lhs(i, p) * rhs(p, j);
          c(i, j) = accumulate ? c(i, j) + s : s;
        }
    } else if (accumulate) {
      c.noalias() += lhs * rhs;
    } else {
      c.noalias() = lhs * rhs;
    }
  };
  if (!trans_a && !trans_b) run(a, b);
  else if (trans_a && !trans_b) run(a.transpose(), b);
  else if (!trans_a && trans_b) run(a, b.transpose());
  else run(a.transpose(), b.transpose());
}

// How a product's output is cut into tiles: a function of (n, k, m) alone, never of the thread
// count, so each output element is summed in the same order however many threads share the
// tiles. Tiles are halved along their longer side until there are 4 of them (two each for two
// threads), or until they would get thinner than 32 or smaller than 2^18 multiply-adds. Not
// more: each tile packs its own panels of A and B, and a 1024^3 product cut into 16 tiles ran
// 7% slower on one thread than in one piece, cut into 4 only 3%.
struct GemmTiling {
  int64_t rows, cols;  // tile size
  int64_t row_tiles, col_tiles;
};

GemmTiling plan_tiles(int64_t n, int64_t k, int64_t m) {
  constexpr int64_t kMinSide = 32, kMaxTiles = 4, kMinTileWork = int64_t{1} << 18;
  int64_t rt = 1, ct = 1;
  auto side = [](int64_t len, int64_t parts) { return ceil_div(ceil_div(len, parts), 16) * 16; };
  while (rt * ct < kMaxTiles) {
    const int64_t tr = side(n, rt), tc = side(m, ct);
    const bool split_rows = tr >= tc;
    const int64_t longer = split_rows ? tr : tc;
    if (longer < 2 * kMinSide || (longer / 2) * (split_rows ? tc : tr) * k < kMinTileWork) break;
    (split_rows ? rt : ct) *= 2;
  }
  const int64_t tr = std::min(n, side(n, rt)), tc = std::min(m, side(m, ct));
  return {tr, tc, ceil_div(n, tr), ceil_div(m, tc)};
}

}  // namespace

// C = op(A) op(B), threaded over output tiles by us, not by Eigen (the library is built with
// EIGEN_DONT_PARALLELIZE: Eigen's own threading cuts the work by the thread count, so results
// changed with it). Called from inside a parallel region, it runs on the calling thread.
template <class T>
void gemm(const T* A, const T* B, T* C, int64_t n, int64_t k, int64_t m, bool trans_a, bool trans_b,
          bool accumulate) {
  if (n == 0 || m == 0) return;
  const int64_t lda = trans_a ? n : k, ldb = trans_b ? k : m;
  const GemmTiling t = plan_tiles(n, k, m);
  const int64_t tiles = t.row_tiles * t.col_tiles;
#pragma omp parallel for schedule(dynamic, 1) if (tiles > 1 && max_threads() > 1)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t i0 = (tile / t.col_tiles) * t.rows, j0 = (tile % t.col_tiles) * t.cols;
    const int64_t rows = std::min(t.rows, n - i0), cols = std::min(t.cols, m - j0);
    const T* a = trans_a ? A + i0 : A + i0 * lda;
    const T* b = trans_b ? B + j0 * ldb : B + j0;
    gemm_block(a, lda, b, ldb, C + i0 * m + j0, m, rows, k, cols, trans_a, trans_b, accumulate);
  }
}

template void gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool, bool, bool);
template void gemm<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, bool, bool, bool);

namespace {

// Batched product of contiguous (batch, n, k) and (batch, k, m) tensors (transposes as flagged).
Tensor batched_gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const int64_t batch = a.size(0);
  const int64_t n = trans_a ? a.size(2) : a.size(1), k = trans_a ? a.size(1) : a.size(2);
  const int64_t m = trans_b ? b.size(1) : b.size(2);
  Tensor out = Tensor::empty({batch, n, m}, a.dtype());
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    // Eigen's GEMM threads itself over one large product; many small products are better
    // spread over the batch (inside the region Eigen runs single-threaded).
    const bool over_batch = batch > 1 && n * m * k < (int64_t{1} << 18);
#pragma omp parallel for schedule(static) if (over_batch && batch * n * m * k >= kParallelGrain)
    for (int64_t i = 0; i < batch; ++i)
      gemm<T>(pa + i * n * k, pb + i * k * m, po + i * n * m, n, k, m, trans_a, trans_b);
  });
  return out;
}

// Broadcasts the batch dims of a (..., n, k) and b (..., k, m) and returns both as contiguous
// (batch, ., .) tensors plus the batch shape.
struct BatchedOperands {
  Tensor a, b;
  Shape batch_shape;
};

BatchedOperands broadcast_batch(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {a.size(-2), a.size(-1)});
  sb.insert(sb.end(), {b.size(-2), b.size(-1)});
  const int64_t nb = shape_numel(batch);
  return {a.detach().expand(sa).contiguous().reshape({nb, a.size(-2), a.size(-1)}),
          b.detach().expand(sb).contiguous().reshape({nb, b.size(-2), b.size(-1)}), batch};
}

Shape with_matrix_dims(Shape batch, const Shape& matrix_shape) {
  batch.insert(batch.end(), matrix_shape.end() - 2, matrix_shape.end());
  return batch;
}

enum MatmulSaved { kSelf, kOther };

std::vector<Tensor> matmul_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Shape& sa = ctx.input_shape(0);
  const Shape& sb = ctx.input_shape(1);
  Shape batch = broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), "matmul");
  const int64_t nb = shape_numel(batch);
  auto batched = [&](const Tensor& t) {
    Shape full = with_matrix_dims(batch, t.shape());
    return t.expand(full).contiguous().reshape({nb, t.size(-2), t.size(-1)});
  };
  Tensor da, db;
  if (ctx.create_graph()) {  // the same products as recorded ops, differentiable again
    if (ctx.needs_grad(0)) da = sum_to(matmul(g[0], ctx.saved(kOther).transpose(-1, -2)), sa);
    if (ctx.needs_grad(1)) db = sum_to(matmul(ctx.saved(kSelf).transpose(-1, -2), g[0]), sb);
    return {da, db};
  }
  Tensor g3 = batched(g[0]);
  if (ctx.needs_grad(0))
    da = sum_to(batched_gemm(g3, batched(ctx.saved(kOther)), false, true).reshape(with_matrix_dims(batch, sa)), sa);
  if (ctx.needs_grad(1))
    db = sum_to(batched_gemm(batched(ctx.saved(kSelf)), g3, true, false).reshape(with_matrix_dims(batch, sb)), sb);
  return {da, db};
}

enum LinearSaved { kInput, kWeight };

std::vector<Tensor> linear_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const int64_t out_f = ctx.input_shape(1)[0], in_f = ctx.input_shape(1)[1];
  const int64_t rows = shape_numel(ctx.input_shape(0)) / std::max<int64_t>(in_f, 1);
  Tensor dx, dw, db;
  if (ctx.create_graph()) {  // the same products as recorded ops, differentiable again
    Tensor g2 = g[0].reshape({rows, out_f});
    if (ctx.needs_grad(0)) dx = matmul(g2, ctx.saved(kWeight)).reshape(ctx.input_shape(0));
    if (ctx.needs_grad(1)) dw = matmul(g2.transpose(0, 1), ctx.saved(kInput).reshape({rows, in_f}));
    if (ctx.needs_grad(2)) db = sum_to(g2, {out_f});
    return {dx, dw, db};
  }
  Tensor g2 = g[0].contiguous();
  dispatch_floating(g2.dtype(), "linear_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (ctx.needs_grad(0)) {
      dx = Tensor::empty(ctx.input_shape(0), g2.dtype());
      Tensor w = ctx.saved(kWeight).contiguous();
      gemm<T>(g2.data<T>(), w.data<T>(), dx.data<T>(), rows, out_f, in_f, false, false);
    }
    if (ctx.needs_grad(1)) {
      dw = Tensor::empty({out_f, in_f}, g2.dtype());
      Tensor x = ctx.saved(kInput).contiguous();
      gemm<T>(g2.data<T>(), x.data<T>(), dw.data<T>(), out_f, rows, in_f, true, false);
    }
    if (ctx.needs_grad(2)) db = sum_to(g2.reshape({rows, out_f}), {out_f});
  });
  return {dx, dw, db};
}

using Inputs = std::vector<Tensor>;

std::vector<SampleCase> matmul_samples() {
  auto mm = [](const char* name, Shape sa, Shape sb) {
    return SampleCase{name, [sa, sb](DType dt) { return Inputs{sample_tensor(sa, dt), sample_tensor(sb, dt)}; },
                      [](const Inputs& x) { return Inputs{matmul(x[0], x[1])}; }};
  };
  return {mm("[3,4] @ [4,5]", {3, 4}, {4, 5}), mm("[2,3,4] @ [4,2] (broadcast batch)", {2, 3, 4}, {4, 2}),
          mm("[2,1,3,4] @ [3,4,2] (broadcast both)", {2, 1, 3, 4}, {3, 4, 2}), mm("[4] @ [4,3] (vector)", {4}, {4, 3}),
          mm("[3,4] @ [4] (vector)", {3, 4}, {4})};
}

std::vector<SampleCase> linear_samples() {
  return {{"x [2,3,4], W [5,4], b [5]",
           [](DType dt) { return Inputs{sample_tensor({2, 3, 4}, dt), sample_tensor({5, 4}, dt), sample_tensor({5}, dt)}; },
           [](const Inputs& x) { return Inputs{linear(x[0], x[1], x[2])}; }},
          {"x [3,4], W [2,4], no bias",
           [](DType dt) { return Inputs{sample_tensor({3, 4}, dt), sample_tensor({2, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{linear(x[0], x[1])}; }}};
}

}  // namespace

const OpDef kMatmulOp{"matmul", "matmul_backward", "self, other", matmul_backward, matmul_samples, true};
const OpDef kLinearOp{"linear", "linear_backward", "input, weight, bias", linear_backward, linear_samples, true};

Tensor matmul(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.defined() && b.defined(), "matmul: expected two defined tensors");
  TG_CHECK(a.dtype() == b.dtype(), "matmul: expected both operands to have the same dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  TG_CHECK(is_floating(a.dtype()), "matmul: expected floating operands, got ", dtype_name(a.dtype()));
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", format_shape(a.shape()),
           " and ", format_shape(b.shape()));
  // Vectors become matrices through (differentiable) views, then lose the added dim again.
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(-1)).squeeze(-1);
  TG_CHECK(a.size(-1) == b.size(-2), "matmul: shapes ", format_shape(a.shape()), " and ", format_shape(b.shape()),
           " cannot be multiplied (", a.size(-1), " != ", b.size(-2), ")");
  BatchedOperands ops = broadcast_batch(a, b);
  Shape out_shape = ops.batch_shape;
  out_shape.insert(out_shape.end(), {a.size(-2), b.size(-1)});
  Tensor out = batched_gemm(ops.a, ops.b, false, false).reshape(out_shape);
  if (Recorder rec{kMatmulOp, {a, b}}) {
    if (rec.needs_grad(1)) rec.save(kSelf, a);
    if (rec.needs_grad(0)) rec.save(kOther, b);
    rec.set_outputs({out});
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TG_CHECK(x.defined() && weight.defined(), "linear: expected defined input and weight");
  TG_CHECK(weight.dim() == 2, "linear: expected weight to have 2 dims (out_features, in_features), got ",
           format_shape(weight.shape()));
  TG_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: expected input with last dim ", weight.size(1),
           " (in_features), got ", format_shape(x.shape()));
  TG_CHECK(x.dtype() == weight.dtype(), "linear: expected input and weight of the same dtype, got ",
           dtype_name(x.dtype()), " and ", dtype_name(weight.dtype()));
  TG_CHECK(is_floating(x.dtype()), "linear: expected a floating input, got ", dtype_name(x.dtype()));
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  if (bias.defined()) {
    TG_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: expected bias of shape [", out_f, "], got ",
             format_shape(bias.shape()));
    TG_CHECK(bias.dtype() == x.dtype(), "linear: expected bias of dtype ", dtype_name(x.dtype()), ", got ",
             dtype_name(bias.dtype()));
  }
  Tensor xc = x.detach().contiguous(), wc = weight.detach().contiguous();
  const int64_t rows = x.numel() / std::max<int64_t>(in_f, 1);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    if (bias.defined()) {
      Tensor bc = bias.detach().contiguous();
      const T* pb = bc.data<T>();
      for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + out_f, o + r * out_f);
    }
    gemm<T>(xc.data<T>(), wc.data<T>(), o, rows, in_f, out_f, false, true, bias.defined());
  });
  if (Recorder rec{kLinearOp, {x, weight, bias}}) {
    // The tensors themselves (not the contiguous copies), so that under create_graph their
    // gradients flow back; backward makes them contiguous, which costs nothing when they are.
    if (rec.needs_grad(1)) rec.save(kInput, x);
    if (rec.needs_grad(0)) rec.save(kWeight, weight);
    rec.set_outputs({out});
  }
  return out;
}

void register_matmul_ops(Registry& r) {
  r.add(kMatmulOp);
  r.add(kLinearOp);
}

}  // namespace tg
