// Bilinear upsampling: validation, dtype dispatch and the tape. The kernels are in
// upsample_kernels.cpp. Backward needs only sizes and scales, so forward saves no tensor.
#include "upsample.h"
#include "../../framework/autocast.h"

#include <cmath>

#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "../internal/samples.h"
#include "internal/checks.h"
#include "upsample_kernels.h"

namespace tg {

namespace {

using upsample_checks::check_scale;

void check_output_size(const char* op, std::array<int64_t, 2> out) {
  TG_CHECK(out[0] > 0 && out[1] > 0, op, ": expected output_size of 2 values > 0, got [", out[0], ", ", out[1], "]");
}

void check_input_size(const char* op, std::array<int64_t, 4> in) {
  TG_CHECK(in[0] >= 0 && in[1] > 0 && in[2] > 0 && in[3] > 0, op,
           ": expected input_size (N, C, H, W) with N >= 0 and the other sizes > 0, got [", in[0], ", ", in[1], ", ",
           in[2], ", ", in[3], "]");
}

struct UpsampleAttrs {
  std::array<int64_t, 2> output_size;
  std::array<int64_t, 4> input_size;
  bool align_corners;
  std::optional<double> scales_h, scales_w;
};

std::vector<Tensor> upsample_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<UpsampleAttrs>();
  return {upsample_bilinear2d_backward(g[0], a.output_size, a.input_size, a.align_corners, a.scales_h, a.scales_w)};
}

std::vector<SampleCase> upsample_samples() {
  using Inputs = std::vector<Tensor>;
  auto make = [](std::string name, Shape in, std::array<int64_t, 2> out, bool ac, std::optional<double> sh,
                 std::optional<double> sw) {
    return SampleCase{name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
                      [=](const Inputs& x) { return Inputs{upsample_bilinear2d(x[0], out, ac, sh, sw)}; }};
  };
  return {make("[1,2,3,4] -> [6,8]", {1, 2, 3, 4}, {6, 8}, false, std::nullopt, std::nullopt),
          make("[2,1,4,5] -> [7,3] align_corners", {2, 1, 4, 5}, {7, 3}, true, std::nullopt, std::nullopt),
          make("[1,2,3,3] -> [7,5], scales 2.5 and 1.7 given", {1, 2, 3, 3}, {7, 5}, false, 2.5, 1.7),
          make("[1,1,5,4] -> [1,2] (out == 1), align_corners", {1, 1, 5, 4}, {1, 2}, true, std::nullopt,
               std::nullopt)};
}

std::array<int64_t, 4> checked_input_size(const char* op, const Tensor& input) {
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(input.dim() == 4, op, ": expected a 4-D input (N, C, H, W), got ", format_shape(input.shape()));
  TG_CHECK(is_floating(input.dtype()), op, ": expected a floating input, got ", dtype_name(input.dtype()));
  std::array<int64_t, 4> in{input.size(0), input.size(1), input.size(2), input.size(3)};
  check_input_size(op, in);
  return in;
}

// The forward's output, not recorded. The kernels take 16-bit tensors too: they interpolate in
// float32, as PyTorch's CPU kernels compute, and round each output once.
Tensor forward_values(const char* op, const Tensor& input, std::array<int64_t, 4> in,
                      std::array<int64_t, 2> output_size, bool align_corners, std::optional<double> scales_h,
                      std::optional<double> scales_w) {
  Tensor x = input.detach().contiguous();  // accepts any strides (a channels-last view, say)
  Tensor out = Tensor::empty({in[0], in[1], output_size[0], output_size[1]}, input.dtype());
  dispatch_all_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::upsample_bilinear2d_forward<T>(x.data<T>(), out.data<T>(), in[0] * in[1], in[2], in[3], output_size[0],
                                            output_size[1], align_corners, scales_h.value_or(0.0),
                                            scales_w.value_or(0.0));
  });
  return out;
}

// The input gradient, not recorded; a 16-bit grad_out is summed in float32, rounded once.
Tensor backward_values(const char* op, const Tensor& grad_out, const Shape& in_shape,
                       std::array<int64_t, 2> output_size, bool align_corners, std::optional<double> scales_h,
                       std::optional<double> scales_w) {
  Tensor g = grad_out.detach().contiguous();
  Tensor grad_in = Tensor::empty(in_shape, grad_out.dtype());
  dispatch_all_floating(grad_out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::upsample_bilinear2d_backward<T>(g.data<T>(), grad_in.data<T>(), in_shape[0] * in_shape[1], in_shape[2],
                                             in_shape[3], output_size[0], output_size[1], align_corners,
                                             scales_h.value_or(0.0), scales_w.value_or(0.0));
  });
  return grad_in;
}

}  // namespace

const OpDef kUpsampleBilinear2dOp{"upsample_bilinear2d", "upsample_bilinear2d_backward", "input",
                                  upsample_backward_fn, upsample_samples, true};

namespace {
// The backward is linear in grad_out, and its adjoint is the forward: that is its gradient,
// so double backward of upsampling is upsampling again.
std::vector<Tensor> upsample_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<UpsampleAttrs>();
  return {upsample_bilinear2d(gg[0], a.output_size, a.align_corners, a.scales_h, a.scales_w)};
}
}  // namespace

const OpDef kUpsampleBilinear2dBackwardOp{"upsample_bilinear2d_backward", "upsample_bilinear2d_backward_backward",
                                          "grad_output", upsample_backward_backward_fn, nullptr, true};

Tensor upsample_bilinear2d(const Tensor& input, std::array<int64_t, 2> output_size, bool align_corners,
                           std::optional<double> scales_h, std::optional<double> scales_w) {
  if (auto c = autocast::to_float32(input))  // framework/autocast.h
    return upsample_bilinear2d(c[0], output_size, align_corners, scales_h, scales_w);
  const char* op = "upsample_bilinear2d";
  std::array<int64_t, 4> in = checked_input_size(op, input);
  check_output_size(op, output_size);
  check_scale(op, "scales_h", scales_h);
  check_scale(op, "scales_w", scales_w);
  const Shape out_shape{in[0], in[1], output_size[0], output_size[1]};
  checked_numel(out_shape, op, "the output shape (N, C, output_size)");
  Tensor out = forward_values(op, input, in, output_size, align_corners, scales_h, scales_w);
  if (Recorder rec{kUpsampleBilinear2dOp, {input}}) {
    rec.set_attrs(UpsampleAttrs{output_size, in, align_corners, scales_h, scales_w});
    rec.set_outputs({out});
  }
  return out;
}

Tensor upsample_bilinear2d_backward(const Tensor& grad_out, std::array<int64_t, 2> output_size,
                                    std::array<int64_t, 4> input_size, bool align_corners,
                                    std::optional<double> scales_h, std::optional<double> scales_w) {
  const char* op = "upsample_bilinear2d_backward";
  check_output_size(op, output_size);
  check_input_size(op, input_size);
  check_scale(op, "scales_h", scales_h);
  check_scale(op, "scales_w", scales_w);
  TG_CHECK(grad_out.defined(), op, ": expected a defined grad_out");
  const Shape expected{input_size[0], input_size[1], output_size[0], output_size[1]};
  TG_CHECK(grad_out.shape() == expected, op, ": expected grad_out of shape ", format_shape(expected),
           " (N, C, Ho, Wo), got ", format_shape(grad_out.shape()));
  TG_CHECK(is_floating(grad_out.dtype()), op, ": expected a floating grad_out, got ", dtype_name(grad_out.dtype()));
  // Checked: input_size [4, 4, 2^31, 2^31] must be an Error, not an allocation.
  const Shape in_shape{input_size[0], input_size[1], input_size[2], input_size[3]};
  checked_numel(in_shape, op, "input_size");
  Tensor grad_in = backward_values(op, grad_out, in_shape, output_size, align_corners, scales_h, scales_w);
  if (Recorder rec{kUpsampleBilinear2dBackwardOp, {grad_out}}) {  // under create_graph, say
    rec.set_attrs(UpsampleAttrs{output_size, input_size, align_corners, scales_h, scales_w});
    rec.set_outputs({grad_in});
  }
  return grad_in;
}

void register_upsample_ops(Registry& r) {
  r.add(kUpsampleBilinear2dOp);
  r.add(kUpsampleBilinear2dBackwardOp);
}

}  // namespace tg
