// Comparisons and where. Shape legend: cond, a, b broadcast to out's shape.
//   where: out = cond ? a : b     da = sum_to(g * cond)    db = sum_to(g * !cond)   (saves cond)
// a and b of two dtypes are promoted (promote_operands), and so are a comparison's operands.
#include "where.h"

#include <cmath>

#include "../framework/inplace.h"
#include "../framework/tape.h"
#include "../framework/views.h"
#include "internal/elementwise_kernel.h"
#include "internal/samples.h"

namespace tg {

namespace {

template <class Cmp>
Tensor compare(const Tensor& a_in, const Tensor& b_in, const char* op, Cmp cmp) {
  // Mixed dtypes compare in their promoted dtype, as PyTorch (a bfloat16 and a float32 compare
  // as float32); the cast is not recorded, the result is not differentiable.
  const auto [a, b] = promote_operands(a_in, b_in, op, /*recorded=*/false);
  return dispatch_all(a.dtype(), [&, &a = a, &b = b](auto tag) {
    using T = typename decltype(tag)::type;
    // Computed as 0/1 in T (exact), then converted: one loop for every dtype.
    return map_binary<T>(a.detach(), b.detach(), op, [cmp](auto x, auto y) { return cmp(x, y) ? 1 : 0; })
        .to(DType::Int64);
  });
}
Tensor scalar_like(const Tensor& a, double s) {
  return detail::full_unchecked({}, s, a.defined() ? a.dtype() : DType::Float32);
}
// A comparison's scalar: in a's dtype, but a fractional one beside integers is float32 (PyTorch
// promotes them so: an int64 tensor == 0.5 is false everywhere, not a comparison with 0).
// Likewise one out of the integer dtype's range (int64 y < 9.3e18 is true everywhere; in int64
// the scalar would be undefined behaviour).
Tensor comparison_scalar(const Tensor& a, double s) {
  const bool not_integer =
      s != std::trunc(s) || !std::isfinite(s) || (a.defined() && !fits_integer_range(a.dtype(), s));
  return a.defined() && !is_floating(a.dtype()) && not_integer ? detail::full_unchecked({}, s, DType::Float32) : scalar_like(a, s);
}

// cond as a 0/1 tensor of dtype dt, broadcast to shape.
Tensor mask_as(const Tensor& cond, DType dt) {
  return dispatch_all(cond.dtype(), [&](auto tag) {
    using C = typename decltype(tag)::type;
    return map_unary<C>(cond.detach(), [](auto v) { return v != 0 ? 1 : 0; });
  }).to(dt);
}

enum WhereSaved { kMask };

std::vector<Tensor> where_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor& m = ctx.saved(kMask);  // 0/1 in the gradient's dtype
  Tensor da, db;
  if (ctx.create_graph()) {  // where(m, g, 0) and where(m, 0, g): recorded, differentiable in g
    const Tensor zero = scalar_like(g[0], 0.0);
    if (ctx.needs_grad(0)) da = sum_to(where(m, g[0], zero), ctx.input_shape(0));
    if (ctx.needs_grad(1)) db = sum_to(where(m, zero, g[0]), ctx.input_shape(1));
    return {da, db};
  }
  dispatch_all_floating(g[0].dtype(), "where_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (ctx.needs_grad(0))
      da = sum_to(map_binary<T>(g[0], m, "where_backward", [](M gv, M mv) { return mv != M(0) ? gv : M(0); }),
                  ctx.input_shape(0));
    if (ctx.needs_grad(1))
      db = sum_to(map_binary<T>(g[0], m, "where_backward", [](M gv, M mv) { return mv != M(0) ? M(0) : gv; }),
                  ctx.input_shape(1));
  });
  return {da, db};
}

using Inputs = std::vector<Tensor>;
std::vector<SampleCase> where_samples() {
  return {{"cond [3,4], a [3,4], b [4] (broadcast)",
           [](DType dt) { return Inputs{sample_tensor({3, 4}, dt), sample_tensor({4}, dt)}; },
           [](const Inputs& x) {
             Tensor cond = from_vector(std::vector<int64_t>{1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1}, {3, 4});
             return Inputs{where(cond, x[0], x[1])};
           }},
          {"masked_fill [2,3] with a [3] mask", [](DType dt) { return Inputs{sample_tensor({2, 3}, dt)}; },
           [](const Inputs& x) {
             return Inputs{masked_fill(x[0], from_vector(std::vector<double>{0, 1, 0}, {3}), -4.0)};
           }}};
}

}  // namespace

const OpDef kWhereOp{"where", "where_backward", "self, other", where_backward, where_samples, true};

#define TG_COMPARISON(name, expr)                                                                  \
  Tensor name(const Tensor& a, const Tensor& b) {                                                  \
    return compare(a, b, #name, [](auto x, auto y) { return expr; });                              \
  }                                                                                                \
  Tensor name(const Tensor& a, double s) { return name(a, comparison_scalar(a, s)); }
TG_COMPARISON(gt, x > y)
TG_COMPARISON(lt, x < y)
TG_COMPARISON(ge, x >= y)
TG_COMPARISON(le, x <= y)
TG_COMPARISON(eq, x == y)
TG_COMPARISON(ne, x != y)
#undef TG_COMPARISON

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const char* op = "where";
  TG_CHECK(cond.defined() && a_in.defined() && b_in.defined(), op, ": expected defined condition, self and other");
  const auto [a, b] = promote_operands(a_in, b_in, op);  // self and other of two dtypes meet in one
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), op), b.shape(), op);
  Tensor m = mask_as(cond, a.dtype()).expand(shape);
  // Every dtype: integer self and other (never differentiable) select exactly too.
  Tensor out = dispatch_all(a.dtype(), [&, &a = a, &b = b](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    // a where m, else b: two broadcasting passes keep to the shared kernel, the unpicked terms
    // -0, which adds to anything exactly (v + -0 is v for every v, -0 and NaN included; with +0,
    // a picked -0 became +0). Exact in 16 bits too.
    Tensor picked_a = map_binary<T>(m, a.detach(), op, [](M mv, M av) { return mv != M(0) ? av : -M(0); });
    Tensor mb = map_binary<T>(m, b.detach(), op, [](M mv, M bv) { return mv != M(0) ? -M(0) : bv; });
    return map_binary<T>(picked_a, mb, op, [](M x, M y) { return x + y; });
  });
  if (Recorder rec{kWhereOp, {a, b}}) {
    rec.save(kMask, m);
    rec.set_outputs({out});
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  TG_CHECK(x.defined() && mask.defined(), "masked_fill: expected defined self and mask");
  TG_CHECK(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
           format_shape(mask.shape()), " does not broadcast to self's shape ", format_shape(x.shape()));
  TG_CHECK(fits_floating_range(x.dtype(), value), "masked_fill: value ", value, " cannot be converted to ",
           dtype_name(x.dtype()), " without overflow");
  return where(mask, scalar_like(x, value), x);
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, double value) {
  detail::InplaceOp op{x, "masked_fill_", {mask}};
  return op.commit(masked_fill(op.old_value(), mask, value));
}

void register_where_ops(Registry& r) { r.add(kWhereOp); }

}  // namespace tg
