// Activations. Each saves what its derivative reads: relu and friends their output.
//
//   relu:  y = max(x, 0)     dx = g * (y > 0)
#include "activation.h"

#include "../framework/tape.h"
#include "elementwise_kernel.h"
#include "samples.h"

namespace tg {

namespace {

std::vector<Tensor> relu_backward(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const Tensor& y = ctx.saved(0);
  return {dispatch_floating(y.dtype(), "relu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_binary<T>(g[0], y, "relu_backward", [](T gv, T yv) { return yv > T(0) ? gv : T(0); });
  })};
}

std::vector<SampleCase> relu_samples() {
  // Values kept away from the kink at 0, where the derivative is undefined.
  return {{"[4,5] away from 0",
           [](DType dt) {
             Tensor x = uniform({4, 5}, 0.1, 1.0, DType::Float64);
             double* p = x.data<double>();
             for (int64_t i = 0; i < x.numel(); i += 2) p[i] = -p[i];  // both signs, none near 0
             Tensor t = x.to(dt);
             t.requires_grad_();
             return std::vector<Tensor>{t};
           },
           [](const std::vector<Tensor>& x) { return std::vector<Tensor>{relu(x[0])}; }}};
}

}  // namespace

const OpDef kReluOp{"relu", "relu_backward", "self", relu_backward, relu_samples};

Tensor relu(const Tensor& x) {
  TG_CHECK(x.defined(), "relu: the tensor is undefined");
  Tensor y = dispatch_floating(x.dtype(), "relu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T>(x, [](T v) { return v > T(0) ? v : T(0); });
  });
  if (Recorder rec{kReluOp, {x}}) {
    rec.save({y});
    rec.set_outputs({y});
  }
  return y;
}

void register_activation_ops(Registry& r) { r.add(kReluOp); }

}  // namespace tg
