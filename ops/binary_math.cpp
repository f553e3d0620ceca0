// maximum, minimum and pow of two tensors. Shape legend: a (self), b (other / exponent) and out
// broadcast together; each gradient is reduced back to its input's shape by sum_to.
//
//   maximum:  out = a >= b ? a : b     da = g * wa       db = g * wb   (0 where the weight is 0)
//             wa = 1 where a wins, 1/2 on a tie, 0 where b wins (wb the mirror; NaN: both 1)
//   pow:      out = a^b                da = g * b * a^(b-1)   (0 where b == 0)
//                                      db = g * a^b * log(a)  (0 where a == 0 and b >= 0)
//
// The backwards are written with recorded ops (mul, where, log, this pow), so they are
// differentiable again under create_graph; maximum's weights are constants of a and b.
#include "binary_math.h"

#include <cmath>
#include <type_traits>

#include "../framework/tape.h"
#include "../framework/views.h"
#include "elementwise.h"
#include "internal/elementwise_kernel.h"
#include "internal/samples.h"
#include "reduce.h"
#include "unary.h"
#include "where.h"

namespace tg {

namespace {

enum Saved { kSelf, kOther };

// The forward of every dtype: f on opmath values (float for 16 bits, rounded once).
template <class F>
Tensor binary_values(const Tensor& a, const Tensor& b, const char* op, F f) {
  return dispatch_all(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(a.detach(), b.detach(), op, f);
  });
}

// ---- maximum / minimum ----

// The share of the gradient that goes to a (to b with `for_b`): 1 where it wins, 1/2 on a tie,
// 0 where it loses; a NaN comparison loses nowhere (PyTorch masks only strict losers).
Tensor extreme_weights(const Tensor& a, const Tensor& b, DType dt, bool is_max, bool for_b) {
  return binary_values(a, b, is_max ? "maximum_backward" : "minimum_backward", [=](auto x, auto y) {
    using M = decltype(x);
    const bool a_wins = is_max ? x > y : x < y, b_wins = is_max ? y > x : y < x;
    if (x == y) return M(0.5);
    return (for_b ? a_wins : b_wins) ? M(0) : M(1);
  }).to(dt);
}

std::vector<Tensor> extreme_backward(const BackwardContext& ctx, const std::vector<Tensor>& g, bool is_max) {
  const Tensor a = ctx.saved(kSelf).detach(), b = ctx.saved(kOther).detach();
  const Tensor zero = scalar_tensor(0, g[0].dtype());
  // g * w, and exactly 0 where the input loses (w = 0) whatever g is: PyTorch's masked_fill,
  // so a NaN or inf incoming gradient does not reach the loser as NaN.
  auto share = [&](bool for_b) {
    const Tensor w = extreme_weights(a, b, g[0].dtype(), is_max, for_b);
    return where(eq(w, 0.0), zero, mul(g[0], w));
  };
  Tensor da, db;
  if (ctx.needs_grad(0)) da = sum_to(share(false), ctx.input_shape(0));
  if (ctx.needs_grad(1)) db = sum_to(share(true), ctx.input_shape(1));
  return {da, db};
}
std::vector<Tensor> maximum_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return extreme_backward(ctx, g, true);
}
std::vector<Tensor> minimum_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return extreme_backward(ctx, g, false);
}

// ---- pow ----

// base^exp in integers by squaring, wrapping on overflow (unsigned: no undefined behaviour). A
// negative exponent truncates 1 / base^-exp toward zero, as PyTorch: 1 for 1, +-1 for -1, else 0.
template <class T>
T integer_pow(T base, T exp) {
  if (exp < 0) return base == 1 ? T(1) : base == -1 ? T(exp % 2 == 0 ? 1 : -1) : T(0);
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

std::vector<Tensor> pow_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  // 16-bit inputs: the formula in float32 and each gradient rounded once (in float16 a^(b-1)
  // overflows for small a where the gradient b a^(b-1) g does not).
  const DType dt = ctx.input_dtype(0);  // both inputs' (pow promotes before recording)
  auto wide = [&](const Tensor& t) { return is_reduced_floating(dt) ? t.to(DType::Float32) : t; };
  const Tensor a = wide(ctx.saved(kSelf)), b = wide(ctx.saved(kOther)), go = wide(g[0]);
  const Tensor zero = scalar_tensor(0, go.dtype());
  // g * where(masked, 0, d), masked twice: the outer where gives 0 there whatever g is (PyTorch's
  // value), the inner one keeps d's NaN (0 * inf) out of the gradient with respect to g (a
  // double backward, a Hessian-vector product).
  auto masked_times_g = [&](const Tensor& masked, const Tensor& d) {
    return where(masked, zero, mul(go, where(masked, zero, d)));
  };
  Tensor da, db;
  if (ctx.needs_grad(0))
    da = sum_to(masked_times_g(eq(b.detach(), 0.0), mul(b, pow(a, sub(b, 1.0)))), ctx.input_shape(0)).to(dt);
  if (ctx.needs_grad(1)) {
    const Tensor at_zero = mul(eq(a.detach(), 0.0), ge(b.detach(), 0.0));  // int64 0/1
    db = sum_to(masked_times_g(at_zero, mul(pow(a, b), log(a))), ctx.input_shape(1)).to(dt);
  }
  return {da, db};
}

// ---- sample cases ----

using Inputs = std::vector<Tensor>;

// a's values are odd multiples of 1/8 (sample_distinct), b's even ones: no tie within a
// finite-difference step.
Tensor even_eighths(const Shape& shape, DType dt) {
  return add(sample_distinct(shape, DType::Float64, false), 0.125).to(dt).requires_grad_();
}
std::vector<SampleCase> extreme_samples(bool is_max) {
  auto f = [is_max](const Tensor& a, const Tensor& b) { return is_max ? maximum(a, b) : minimum(a, b); };
  return {{"[3,4] and [4] (broadcast)", [](DType dt) { return Inputs{sample_distinct({3, 4}, dt), even_eighths({4}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], x[1])}; }},
          {"[2,1] and [2,3]", [](DType dt) { return Inputs{sample_distinct({2, 1}, dt), even_eighths({2, 3}, dt)}; },
           [f](const Inputs& x) { return Inputs{f(x[0], x[1])}; }}};
}
std::vector<SampleCase> maximum_samples() { return extreme_samples(true); }
std::vector<SampleCase> minimum_samples() { return extreme_samples(false); }
std::vector<SampleCase> pow_samples() {
  return {{"[3,4] in [0.5, 2) ^ [3,4]",
           [](DType dt) { return Inputs{sample_uniform({3, 4}, dt, 0.5, 2.0), sample_tensor({3, 4}, dt)}; },
           [](const Inputs& x) { return Inputs{pow(x[0], x[1])}; }},
          {"[4] in [0.5, 2) ^ [2,4] (broadcast)",
           [](DType dt) { return Inputs{sample_uniform({4}, dt, 0.5, 2.0), sample_uniform({2, 4}, dt, -2.0, 2.0)}; },
           [](const Inputs& x) { return Inputs{pow(x[0], x[1])}; }}};
}

}  // namespace

const OpDef kMaximumOp{"maximum", "maximum_backward", "self, other", maximum_backward, maximum_samples, true};
const OpDef kMinimumOp{"minimum", "minimum_backward", "self, other", minimum_backward, minimum_samples, true};
const OpDef kPowTensorOp{"pow_tensor", "pow_tensor_backward", "self, exponent", pow_backward, pow_samples, true};

namespace {
Tensor record_binary(const OpDef& op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (Recorder rec{op, {a, b}}) {
    rec.save(kSelf, a);
    rec.save(kOther, b);
    rec.set_outputs({out});
  }
  return out;
}

Tensor extreme(const OpDef& op, const Tensor& a_in, const Tensor& b_in, bool is_max) {
  const auto [a, b] = promote_operands(a_in, b_in, op.name);
  Tensor out = binary_values(a, b, op.name, [is_max](auto x, auto y) {
    if (x != x || y != y) return x != x ? x : y;  // NaN propagates from either side
    return (is_max ? x >= y : x <= y) ? x : y;
  });
  return record_binary(op, a, b, out);
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extreme(kMaximumOp, a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extreme(kMinimumOp, a, b, false); }

Tensor pow(const Tensor& self_in, const Tensor& exponent_in) {
  const auto [a, b] = promote_operands(self_in, exponent_in, "pow");
  Tensor out;
  if (is_floating(a.dtype())) {
    out = dispatch_all_floating(a.dtype(), "pow", [&, &a = a, &b = b](auto tag) {
      using T = typename decltype(tag)::type;
      return map_binary<T>(a.detach(), b.detach(), "pow", [](auto x, auto y) { return std::pow(x, y); });
    });
  } else {
    auto run = [&, &a = a, &b = b](auto tag) {
      using T = typename decltype(tag)::type;
      return map_binary<T>(a.detach(), b.detach(), "pow", [](T x, T y) { return integer_pow(x, y); });
    };
    out = a.dtype() == DType::Int32 ? run(TypeTag<int32_t>{}) : run(TypeTag<int64_t>{});
  }
  return record_binary(kPowTensorOp, a, b, out);
}

void register_binary_math_ops(Registry& r) {
  for (const OpDef* op : {&kMaximumOp, &kMinimumOp, &kPowTensorOp}) r.add(*op);
}

}  // namespace tg
