// dropout: y = x * m, m = keep / (1 - p) with keep ~ Bernoulli(1 - p); dx = g * m.
// Saves the scaled mask m (not x, not y).
#include "dropout.h"

#include "../framework/tape.h"
#include "elementwise.h"
#include "internal/pointwise.h"
#include "internal/samples.h"

namespace tg {

namespace {

enum DropoutSaved { kMask };

std::vector<Tensor> dropout_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  // Under create_graph: the recorded mul by the saved mask (a constant, scale or 0), so the
  // gradient is differentiable again in g.
  if (ctx.create_graph()) return {mul(g[0], ctx.saved(kMask))};
  return {pointwise_binary(g[0], ctx.saved(kMask), kernels::Binary::Mul, "dropout_backward")};
}

std::vector<SampleCase> dropout_samples() {
  // A generator of its own, reseeded on every call, so that gradcheck's repeated calls see one mask.
  return {{"[4,5] p 0.3", [](DType dt) { return std::vector<Tensor>{sample_tensor({4, 5}, dt)}; },
           [](const std::vector<Tensor>& x) {
             Generator gen(7);
             return std::vector<Tensor>{dropout(x[0], 0.3, true, &gen)};
           }}};
}

}  // namespace

const OpDef kDropoutOp{"dropout", "dropout_backward", "self", dropout_backward, dropout_samples, true};

Tensor dropout(const Tensor& x, double p, bool train, Generator* gen) {
  TG_CHECK(x.defined(), "dropout: the tensor is undefined");
  TG_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected probability p in [0, 1], got ", p);
  if (!train || p == 0.0) return x;  // any dtype, as PyTorch
  TG_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", dtype_name(x.dtype()));
  Generator& g = gen ? *gen : default_generator();
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  // In 16 bits the mask holds the scale rounded to T, as PyTorch's does.
  dispatch_all_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 1 / (1 - p) in T's arithmetic (float for float32 and the 16-bit types), as PyTorch's
    // noise.div_(1 - p): in double, 1 / 0.85 rounds to float32 an ulp away.
    using M = opmath_t<T>;
    const T scale = p == 1.0 ? T(0) : static_cast<T>(M(1) / static_cast<M>(1.0 - p));
    T* m = mask.data<T>();
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = g.next_double() >= p ? scale : T(0);
  });
  Tensor y = pointwise_binary(x, mask, kernels::Binary::Mul, "dropout");
  if (Recorder rec{kDropoutOp, {x}}) {
    rec.save(kMask, mask);
    rec.set_outputs({y});
  }
  return y;
}

void register_dropout_ops(Registry& r) { r.add(kDropoutOp); }

}  // namespace tg
