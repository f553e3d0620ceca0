// upsample_linear1d, upsample_bicubic2d and upsample_trilinear3d: validation, dtype dispatch and
// the tape, one template over the number of spatial dims R (1: linear, 2: bicubic, 3:
// trilinear). The kernels are in upsample_kernels.cpp (linear1d runs the bilinear kernel's width pass on
// (N*C, 1, L) planes) and upsample_kernels_3d.cpp. Backward needs only sizes and scales, so
// forward saves no tensor; the backward is linear in grad_out and its adjoint is the forward,
// so double backward is upsampling again.
#include <array>
#include <string>
#include <vector>

#include "../../framework/autocast.h"
#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "../internal/samples.h"
#include "internal/checks.h"
#include "upsample.h"
#include "upsample_kernels.h"

namespace tg {

namespace {

using upsample_checks::check_scale;

template <int R>
using Scales = std::array<std::optional<double>, R>;

template <int R>
struct ModeAttrs {
  std::array<int64_t, R> output_size;
  std::array<int64_t, R + 2> input_size;
  bool align_corners;
  Scales<R> scales;
};

// What differs between the modes besides the kernel: names.
struct ModeNames {
  const char* op;
  const char* backward;
  const char* layout;                  // the input's dims, for messages
  std::array<const char*, 3> scales;  // the scale arguments' names
};

template <int R>
constexpr ModeNames kNames = R == 1   ? ModeNames{"upsample_linear1d", "upsample_linear1d_backward", "(N, C, L)",
                                                {"scales", "", ""}}
                             : R == 2 ? ModeNames{"upsample_bicubic2d", "upsample_bicubic2d_backward",
                                                  "(N, C, H, W)", {"scales_h", "scales_w", ""}}
                                      : ModeNames{"upsample_trilinear3d", "upsample_trilinear3d_backward",
                                                  "(N, C, D, H, W)", {"scales_d", "scales_h", "scales_w"}};

template <size_t M>
std::string format_sizes(const std::array<int64_t, M>& a) {
  return format_shape(std::vector<int64_t>(a.begin(), a.end()));
}

template <int R>
void check_arguments(const char* op, const std::array<int64_t, R>& output_size, const Scales<R>& scales) {
  bool positive = true;
  for (int64_t s : output_size) positive = positive && s > 0;
  TG_CHECK(positive, op, ": expected output_size of ", R, R == 1 ? " value" : " values", " > 0, got ",
           format_sizes(output_size));
  for (int d = 0; d < R; ++d) check_scale(op, kNames<R>.scales[d], scales[d]);
}

// As PyTorch: an empty batch is allowed, an empty channel or spatial dim is not.
template <int R>
void check_input_size(const char* op, const char* what, const std::array<int64_t, R + 2>& in) {
  bool ok = in[0] >= 0;
  for (int d = 1; d < R + 2; ++d) ok = ok && in[d] > 0;
  TG_CHECK(ok, op, ": expected ", what, " ", kNames<R>.layout, " with N >= 0 and the other sizes > 0, got ",
           format_sizes(in));
}

template <int R>
Shape shape_of(int64_t N, int64_t C, const std::array<int64_t, R>& spatial) {
  Shape s{N, C};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

// The kernel of mode R, forward (src = x, dst = y) or backward (src = grad_y, dst = grad_x).
template <int R>
void run_kernel(bool backward, const Tensor& src, Tensor& dst, const std::array<int64_t, R + 2>& in,
                const std::array<int64_t, R>& out, bool ac, const Scales<R>& scales) {
  dispatch_all_floating(src.dtype(), backward ? kNames<R>.backward : kNames<R>.op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = src.data<T>();
    T* b = dst.data<T>();
    const int64_t NC = in[0] * in[1];
    auto s = [&](int d) { return scales[d].value_or(0.0); };
    if constexpr (R == 1) {
      if (backward) kernels::upsample_linear1d_backward<T>(a, b, NC, in[2], out[0], ac, s(0));
      else kernels::upsample_linear1d_forward<T>(a, b, NC, in[2], out[0], ac, s(0));
    } else if constexpr (R == 2) {
      if (backward) kernels::upsample_bicubic2d_backward<T>(a, b, NC, in[2], in[3], out[0], out[1], ac, s(0), s(1));
      else kernels::upsample_bicubic2d_forward<T>(a, b, NC, in[2], in[3], out[0], out[1], ac, s(0), s(1));
    } else {
      if (backward)
        kernels::upsample_trilinear3d_backward<T>(a, b, NC, in[2], in[3], in[4], out[0], out[1], out[2], ac, s(0),
                                                  s(1), s(2));
      else
        kernels::upsample_trilinear3d_forward<T>(a, b, NC, in[2], in[3], in[4], out[0], out[1], out[2], ac, s(0),
                                                 s(1), s(2));
    }
  });
}

template <int R>
std::vector<Tensor> mode_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g);
template <int R>
std::vector<Tensor> mode_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg);
template <int R>
std::vector<SampleCase> mode_samples();

template <int R>
const OpDef kModeOp{kNames<R>.op, kNames<R>.backward, "input", mode_backward_fn<R>, mode_samples<R>, true};
template <int R>
const OpDef kModeBackwardOp{kNames<R>.backward, R == 1   ? "upsample_linear1d_backward_backward"
                                                : R == 2 ? "upsample_bicubic2d_backward_backward"
                                                         : "upsample_trilinear3d_backward_backward",
                            "grad_output", mode_backward_backward_fn<R>, nullptr, true};

template <int R>
Tensor upsample_forward(const Tensor& input, const std::array<int64_t, R>& output_size, bool align_corners,
                        const Scales<R>& scales) {
  if (auto c = autocast::to_float32(input))  // framework/autocast.h
    return upsample_forward<R>(c[0], output_size, align_corners, scales);
  const char* op = kNames<R>.op;
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(input.dim() == R + 2, op, ": expected a ", R + 2, "-D input ", kNames<R>.layout, ", got ",
           format_shape(input.shape()));
  TG_CHECK(is_floating(input.dtype()), op, ": expected a floating input, got ", dtype_name(input.dtype()));
  std::array<int64_t, R + 2> in;
  for (int d = 0; d < R + 2; ++d) in[d] = input.size(d);
  check_input_size<R>(op, "input", in);
  check_arguments<R>(op, output_size, scales);
  const Shape out_shape = shape_of<R>(in[0], in[1], output_size);
  checked_numel(out_shape, op, "the output shape (N, C, output_size)");
  Tensor x = input.detach().contiguous();  // accepts any strides (a channels-last view, say)
  Tensor out = Tensor::empty(out_shape, input.dtype());
  run_kernel<R>(false, x, out, in, output_size, align_corners, scales);
  if (Recorder rec{kModeOp<R>, {input}}) {
    rec.set_attrs(ModeAttrs<R>{output_size, in, align_corners, scales});
    rec.set_outputs({out});
  }
  return out;
}

template <int R>
Tensor upsample_backward(const Tensor& grad_out, const std::array<int64_t, R>& output_size,
                         const std::array<int64_t, R + 2>& input_size, bool align_corners, const Scales<R>& scales) {
  const char* op = kNames<R>.backward;
  check_arguments<R>(op, output_size, scales);
  check_input_size<R>(op, "input_size", input_size);
  TG_CHECK(grad_out.defined(), op, ": expected a defined grad_out");
  const Shape expected = shape_of<R>(input_size[0], input_size[1], output_size);
  TG_CHECK(grad_out.shape() == expected, op, ": expected grad_out of shape ", format_shape(expected),
           " (N, C, output_size), got ", format_shape(grad_out.shape()));
  TG_CHECK(is_floating(grad_out.dtype()), op, ": expected a floating grad_out, got ", dtype_name(grad_out.dtype()));
  // Checked: input_size [4, 4, 2^31, 2^31] must be an Error, not an allocation.
  const Shape in_shape(input_size.begin(), input_size.end());
  checked_numel(in_shape, op, "input_size");
  Tensor g = grad_out.detach().contiguous();
  Tensor grad_in = Tensor::empty(in_shape, grad_out.dtype());
  run_kernel<R>(true, g, grad_in, input_size, output_size, align_corners, scales);
  if (Recorder rec{kModeBackwardOp<R>, {grad_out}}) {  // under create_graph, say
    rec.set_attrs(ModeAttrs<R>{output_size, input_size, align_corners, scales});
    rec.set_outputs({grad_in});
  }
  return grad_in;
}

template <int R>
std::vector<Tensor> mode_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<ModeAttrs<R>>();
  return {upsample_backward<R>(g[0], a.output_size, a.input_size, a.align_corners, a.scales)};
}

template <int R>
std::vector<Tensor> mode_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<ModeAttrs<R>>();
  return {upsample_forward<R>(gg[0], a.output_size, a.align_corners, a.scales)};
}

// Sample cases: up and down, align_corners, user scales (output size floor(in * scale)), an
// output or input size of 1, and for bicubic in == out with a scale != 1 (no copy shortcut).
template <int R>
SampleCase mode_case(std::string name, Shape in, std::array<int64_t, R> out, bool ac, Scales<R> scales = {}) {
  using Inputs = std::vector<Tensor>;
  return SampleCase{name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
                    [=](const Inputs& x) { return Inputs{upsample_forward<R>(x[0], out, ac, scales)}; }};
}

template <int R>
std::vector<SampleCase> mode_samples() {
  if constexpr (R == 1) {
    return {mode_case<1>("[2,3,5] -> [8]", {2, 3, 5}, {8}, false),
            mode_case<1>("[1,2,6] -> [4] align_corners", {1, 2, 6}, {4}, true),
            mode_case<1>("[1,2,5] -> [8], scale 1.7 given", {1, 2, 5}, {8}, false, {1.7}),
            mode_case<1>("[1,1,4] -> [1]", {1, 1, 4}, {1}, false)};
  } else if constexpr (R == 2) {
    return {mode_case<2>("[1,2,4,5] -> [7,9]", {1, 2, 4, 5}, {7, 9}, false),
            mode_case<2>("[2,1,5,4] -> [3,6] align_corners", {2, 1, 5, 4}, {3, 6}, true),
            mode_case<2>("[1,1,5,5] -> [8,3], scales 1.7 and 0.6 given", {1, 1, 5, 5}, {8, 3}, false, {1.7, 0.6}),
            mode_case<2>("[1,1,4,4] -> [4,4], scale 1.2 given (in == out)", {1, 1, 4, 4}, {4, 4}, false, {1.2, 1.2}),
            mode_case<2>("[1,1,1,3] -> [2,1]", {1, 1, 1, 3}, {2, 1}, false)};
  } else {
    return {mode_case<3>("[1,2,3,4,3] -> [5,6,4]", {1, 2, 3, 4, 3}, {5, 6, 4}, false),
            mode_case<3>("[1,1,3,2,4] -> [2,4,7] align_corners", {1, 1, 3, 2, 4}, {2, 4, 7}, true),
            mode_case<3>("[1,1,3,3,3] -> [5,1,6], scales 1.7, 0.6, 2 given", {1, 1, 3, 3, 3}, {5, 1, 6}, false,
                         {1.7, 0.6, 2.0})};
  }
}

}  // namespace

Tensor upsample_linear1d(const Tensor& input, std::array<int64_t, 1> output_size, bool align_corners,
                         std::optional<double> scales) {
  return upsample_forward<1>(input, output_size, align_corners, {scales});
}

Tensor upsample_bicubic2d(const Tensor& input, std::array<int64_t, 2> output_size, bool align_corners,
                          std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_forward<2>(input, output_size, align_corners, {scales_h, scales_w});
}

Tensor upsample_trilinear3d(const Tensor& input, std::array<int64_t, 3> output_size, bool align_corners,
                            std::optional<double> scales_d, std::optional<double> scales_h,
                            std::optional<double> scales_w) {
  return upsample_forward<3>(input, output_size, align_corners, {scales_d, scales_h, scales_w});
}

Tensor upsample_linear1d_backward(const Tensor& grad_out, std::array<int64_t, 1> output_size,
                                  std::array<int64_t, 3> input_size, bool align_corners,
                                  std::optional<double> scales) {
  return upsample_backward<1>(grad_out, output_size, input_size, align_corners, {scales});
}

Tensor upsample_bicubic2d_backward(const Tensor& grad_out, std::array<int64_t, 2> output_size,
                                   std::array<int64_t, 4> input_size, bool align_corners,
                                   std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_backward<2>(grad_out, output_size, input_size, align_corners, {scales_h, scales_w});
}

Tensor upsample_trilinear3d_backward(const Tensor& grad_out, std::array<int64_t, 3> output_size,
                                     std::array<int64_t, 5> input_size, bool align_corners,
                                     std::optional<double> scales_d, std::optional<double> scales_h,
                                     std::optional<double> scales_w) {
  return upsample_backward<3>(grad_out, output_size, input_size, align_corners, {scales_d, scales_h, scales_w});
}

void register_upsample_mode_ops(Registry& r) {
  r.add(kModeOp<1>);
  r.add(kModeBackwardOp<1>);
  r.add(kModeOp<2>);
  r.add(kModeBackwardOp<2>);
  r.add(kModeOp<3>);
  r.add(kModeBackwardOp<3>);
}

}  // namespace tg
