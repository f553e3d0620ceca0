// Matrix products. Shape legend: n rows of the left operand, k the contracted dim, m columns
// of the right operand, B the (broadcast) batch.
//
// Every product, forward and backward, is one kernels::gemm_* call: bf16 / fp16 operands are
// read in place (gemm_batched_reduced, float32 sums, each output rounded once); float32 ones
// under the thread's math mode (framework/math_mode.h: Float32, or bf16 / fp16 / bf16x3
// operands), float64 in float64. create_graph backwards record the same products as ops.
//
//   matmul: out = a @ b          da = g @ b^T         db = a^T @ g
//   linear: y = x W^T + bias     dx = g @ W           dW = g^T @ x      dbias = sum over rows of g
#include "matmul.h"
#include "../framework/autocast.h"

#include <algorithm>

#include "../framework/parallel.h"
#include "../framework/tape.h"
#include "../framework/views.h"
#include "internal/samples.h"
#include "matmul_kernels.h"
#include "internal/reduced_float.h"

namespace tg {

namespace {

// linear's rows: the input's elements over its last dim (in_features), counted from the leading
// dims, so that in_features = 0 still has its rows (each the bias).
int64_t linear_rows(const Shape& input_shape) {
  return shape_numel(Shape(input_shape.begin(), input_shape.end() - 1));
}

Shape with_matrix_dims(Shape batch, const Shape& matrix_shape) {
  batch.insert(batch.end(), matrix_shape.end() - 2, matrix_shape.end());
  return batch;
}

// A tensor's last two dims as the batch of matrices (batch shape `batch`, t's batch dims
// broadcast to it) that the kernel reads in place: a transposed view or a slice is read through
// its strides, a broadcast through batch stride 0. Only when the batch dims do not collapse into
// one stride, or neither matrix dim is contiguous, is it copied.
struct Matrices {
  Tensor data;  // what layout describes (t's storage, or a contiguous copy)
  kernels::MatrixLayout layout;
  Matrices transposed() const {
    Matrices t = *this;
    t.layout.trans = !t.layout.trans;
    return t;
  }
};

Matrices as_matrices(const Tensor& t, const Shape& batch) {
  Tensor e = t.detach().expand(with_matrix_dims(batch, t.shape()));
  const Shape &sh = e.shape(), &st = e.strides();
  const int d = e.dim();
  const int64_t rows = sh[d - 2], cols = sh[d - 1];
  kernels::MatrixLayout l;
  bool ok = true;
  if (st[d - 1] == 1 && st[d - 2] >= cols) {
    l.ld = st[d - 2];
  } else if (st[d - 2] == 1 && st[d - 1] >= rows) {
    l.ld = st[d - 1];
    l.trans = true;
  } else if (rows == 1 || cols == 1) {  // a vector: any stride of its size-1 dim will do
    const int64_t s = rows == 1 ? st[d - 1] : st[d - 2];
    ok = s == 1;
    l.ld = std::max<int64_t>(rows == 1 ? cols : 1, 1);
  } else {
    ok = false;
  }
  // Batch dims of size > 1, inner to outer: each stride must be the next inner one's span.
  int64_t inner = -1;
  for (int i = d - 3; i >= 0 && ok; --i) {
    if (sh[i] == 1) continue;
    if (st[i] < 0 || (inner >= 0 && st[i] != st[inner] * sh[inner])) ok = false;
    if (inner < 0) l.batch_stride = st[i];
    inner = i;
  }
  if (!ok) {
    e = e.contiguous();
    l = {cols, rows * cols, false};
  }
  return {e, l};
}

// The dtype a product of `dtype` operands is summed and returned in: float64 for float64,
// float32 otherwise (16-bit results are rounded once by the caller, after any sum_to).
DType sum_dtype(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }

// C (float32, or float64 for float64 operands) = op(A) op(B) (+ C) with operands of A's dtype:
// 16-bit operands read as they are (gemm_batched_reduced), float32 ones under the thread's
// math mode (framework/math_mode.h), float64 in float64.
void product_into(const Tensor& A, kernels::MatrixLayout a, const Tensor& B, kernels::MatrixLayout b, Tensor& C,
                  kernels::MatrixLayout c, int64_t batch, int64_t n, int64_t k, int64_t m, bool accumulate) {
  switch (A.dtype()) {
    case DType::Float64:
      kernels::gemm_batched<double>(A.data<double>(), a, B.data<double>(), b, C.data<double>(), c, batch, n, k, m,
                                    accumulate);
      return;
    case DType::Float32:
      kernels::gemm_batched_float32_math(float32_math(), A.data<float>(), a, B.data<float>(), b, C.data<float>(), c,
                                         batch, n, k, m, accumulate);
      return;
    case DType::BFloat16:
      kernels::gemm_batched_reduced<BFloat16>(A.data<BFloat16>(), a, B.data<BFloat16>(), b, C.data<float>(), c, batch,
                                              n, k, m, accumulate);
      return;
    case DType::Float16:
      kernels::gemm_batched_reduced<Float16>(A.data<Float16>(), a, B.data<Float16>(), b, C.data<float>(), c, batch, n,
                                             k, m, accumulate);
      return;
    default: break;
  }
  TG_ERROR("matmul: expected floating operands, got ", dtype_name(A.dtype()));
}

// out (batch..., n, m) = op(a) op(b) over the broadcast batch `batch`, as one kernel call, in
// sum_dtype of the operands' dtype.
Tensor batched_product(const Matrices& a, const Matrices& b, const Shape& batch, int64_t n, int64_t k, int64_t m) {
  Shape shape = batch;
  shape.insert(shape.end(), {n, m});
  Tensor out = Tensor::empty(shape, sum_dtype(a.data.dtype()));
  product_into(a.data, a.layout, b.data, b.layout, out, {m, n * m, false}, shape_numel(batch), n, k, m, false);
  return out;
}

// A gradient in the dtype of the tensors it multiplies (the engine gives an output's gradient
// in the output's dtype; anything else is converted, never silently mixed).
Tensor in_dtype(const Tensor& g, DType dtype) { return g.dtype() == dtype ? g : detail::convert(g, dtype); }

// The broadcast batch shape of a (..., n, k) and b (..., k, m).
Shape batch_shape_of(const Shape& sa, const Shape& sb) {
  return broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), "matmul");
}

enum MatmulSaved { kSelf, kOther };

std::vector<Tensor> matmul_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Shape& sa = ctx.input_shape(0);
  const Shape& sb = ctx.input_shape(1);
  Tensor da, db;
  if (ctx.create_graph()) {  // the same products as recorded ops, differentiable again
    if (ctx.needs_grad(0)) da = sum_to(matmul(g[0], ctx.saved(kOther).transpose(-1, -2)), sa);
    if (ctx.needs_grad(1)) db = sum_to(matmul(ctx.saved(kSelf).transpose(-1, -2), g[0]), sb);
    return {da, db};
  }
  const Shape batch = batch_shape_of(sa, sb);
  const int64_t n = sa[sa.size() - 2], k = sa.back(), m = sb.back();
  // 16 bits: the operands as they are, products and sums in float32, each gradient rounded
  // once at the end (after the sum over broadcast dims).
  const Matrices gm = as_matrices(in_dtype(g[0], ctx.input_dtype(0)), batch);
  if (ctx.needs_grad(0))  // da = g b^T, summed over the dims a was broadcast along
    da = sum_to(batched_product(gm, as_matrices(ctx.saved(kOther), batch).transposed(), batch, n, m, k), sa);
  if (ctx.needs_grad(1)) {  // db = a^T g
    const Matrices am = as_matrices(ctx.saved(kSelf), batch);
    const int64_t nb = shape_numel(batch);
    if (shape_numel(Shape(sb.begin(), sb.end() - 2)) == 1 && nb > 1 && !am.layout.trans && !gm.layout.trans &&
        am.layout.batch_stride == n * am.layout.ld && gm.layout.batch_stride == n * gm.layout.ld) {
      // One b for the whole batch: the sum over the batch is the depth of one product
      // (stacked a)^T (stacked g), (nb * n) rows deep.
      Matrices a1 = am, g1 = gm;
      a1.layout.batch_stride = g1.layout.batch_stride = 0;
      db = batched_product(a1.transposed(), g1, {}, k, nb * n, m).reshape(sb);
    } else {
      db = sum_to(batched_product(am.transposed(), gm, batch, k, n, m), sb);
    }
  }
  if (da.defined()) da = round_result(da, ctx.input_dtype(0));
  if (db.defined()) db = round_result(db, ctx.input_dtype(1));
  return {da, db};
}

enum LinearSaved { kInput, kWeight };

std::vector<Tensor> linear_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const int64_t out_f = ctx.input_shape(1)[0], in_f = ctx.input_shape(1)[1];
  const int64_t rows = linear_rows(ctx.input_shape(0));
  Tensor dx, dw, db;
  if (ctx.create_graph()) {  // the same products as recorded ops, differentiable again
    Tensor g2 = g[0].reshape({rows, out_f});
    if (ctx.needs_grad(0)) dx = matmul(g2, ctx.saved(kWeight)).reshape(ctx.input_shape(0));
    if (ctx.needs_grad(1)) dw = matmul(g2.transpose(0, 1), ctx.saved(kInput).reshape({rows, in_f}));
    if (ctx.needs_grad(2)) db = sum_to(g2, {out_f});
    return {dx, dw, db};
  }
  // 16 bits: g, W and x as they are, products and sums in float32, each gradient rounded once.
  const DType dt = ctx.input_dtype(0);
  Tensor g2 = in_dtype(g[0], dt).contiguous();
  if (ctx.needs_grad(0)) {  // dx (rows, in_f) = g (rows, out_f) W (out_f, in_f)
    dx = Tensor::empty(ctx.input_shape(0), sum_dtype(dt));
    Tensor w = ctx.saved(kWeight).contiguous();
    product_into(g2, {out_f, 0, false}, w, {in_f, 0, false}, dx, {in_f, 0, false}, 1, rows, out_f, in_f, false);
  }
  if (ctx.needs_grad(1)) {  // dW (out_f, in_f) = g^T x (x: rows, in_f)
    dw = Tensor::empty({out_f, in_f}, sum_dtype(dt));
    Tensor x = ctx.saved(kInput).contiguous();
    product_into(g2, {out_f, 0, true}, x, {in_f, 0, false}, dw, {in_f, 0, false}, 1, out_f, rows, in_f, false);
  }
  if (ctx.needs_grad(2)) db = sum_to(detail::widen(g2).reshape({rows, out_f}), {out_f});
  for (int i : {0, 1, 2}) {
    Tensor& t = i == 0 ? dx : i == 1 ? dw : db;
    if (t.defined()) t = round_result(t, ctx.input_dtype(i));
  }
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
  if (auto c = autocast::lower(a, b)) return matmul(c[0], c[1]);  // framework/autocast.h
  TG_CHECK(a.defined() && b.defined(), "matmul: expected two defined tensors");
  TG_CHECK(a.dtype() == b.dtype(), "matmul: expected both operands to have the same dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  TG_CHECK(is_floating(a.dtype()), "matmul: expected floating operands, got ", dtype_name(a.dtype()));
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", format_shape(a.shape()),
           " and ", format_shape(b.shape()));
  // Vectors become matrices through (differentiable) views, then lose the added dim again; two
  // vectors give their dot product, a 0-d tensor.
  if (a.dim() == 1 && b.dim() == 1) {
    TG_CHECK(a.size(0) == b.size(0), "matmul: vectors of sizes ", a.size(0), " and ", b.size(0),
             " have no dot product");
    return matmul(a.unsqueeze(0), b.unsqueeze(-1)).squeeze(-1).squeeze(-1);
  }
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(-1)).squeeze(-1);
  TG_CHECK(a.size(-1) == b.size(-2), "matmul: shapes ", format_shape(a.shape()), " and ", format_shape(b.shape()),
           " cannot be multiplied (", a.size(-1), " != ", b.size(-2), ")");
  const Shape batch = batch_shape_of(a.shape(), b.shape());
  // 16 bits: the operands as they are, products and sums in float32, rounded once.
  Tensor out = round_result(
      batched_product(as_matrices(a, batch), as_matrices(b, batch), batch, a.size(-2), a.size(-1), b.size(-1)),
      a.dtype());
  if (Recorder rec{kMatmulOp, {a, b}}) {
    if (rec.needs_grad(1)) rec.save(kSelf, a);
    if (rec.needs_grad(0)) rec.save(kOther, b);
    rec.set_outputs({out});
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (auto c = autocast::lower(x, weight, bias)) return linear(c[0], c[1], c[2]);
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
  // 16 bits: x and W as they are, products and sums in float32 (the bias added in float32
  // first), rounded once.
  Tensor xc = x.detach().contiguous(), wc = weight.detach().contiguous();
  const int64_t rows = linear_rows(x.shape());
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, sum_dtype(x.dtype()));
  if (bias.defined()) {
    const Tensor bc = detail::widen(bias.detach().contiguous());
    dispatch_floating(out.dtype(), "linear", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pb = bc.data<T>();
      T* o = out.data<T>();
      for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + out_f, o + r * out_f);
    });
  }
  product_into(xc, {in_f, 0, false}, wc, {in_f, 0, true}, out, {out_f, 0, false}, 1, rows, in_f, out_f,
               bias.defined());
  out = round_result(out, x.dtype());
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
