// Upsampling (and downsampling) on tensors and the tape, PyTorch's semantics: bilinear 2-D,
// linear 1-D, bicubic 2-D, trilinear 3-D.
// The source-coordinate rules, forward beside backward, are in ops/upsample/upsample_kernels.h.
#pragma once

#include <array>
#include <optional>

#include "../../framework/tensor.h"
#include "interpolate.h"  // interpolate(input, size or scale_factor), the usual way in

namespace tg {

// Dtypes: float32, float64, bfloat16, float16. In bfloat16 / float16 the interpolation (and the
// backward's sums) run in float32 and each result is rounded once to the dtype.

// input (N, C, H, W) -> (N, C, Ho, Wo). scales_h / scales_w are the user's scale factors
// (output / input) when given: with align_corners false they set the source step (1 / scale)
// instead of in / out; with align_corners true they are ignored.
Tensor upsample_bilinear2d(const Tensor& input, std::array<int64_t, 2> output_size, bool align_corners,
                           std::optional<double> scales_h = std::nullopt,
                           std::optional<double> scales_w = std::nullopt);

// The kernel API: the input gradient for grad_out (N, C, Ho, Wo), input_size (N, C, H, W).
Tensor upsample_bilinear2d_backward(const Tensor& grad_out, std::array<int64_t, 2> output_size,
                                    std::array<int64_t, 4> input_size, bool align_corners,
                                    std::optional<double> scales_h = std::nullopt,
                                    std::optional<double> scales_w = std::nullopt);

// Linear 1-D, bicubic 2-D and trilinear 3-D, as aten's upsample_linear1d, upsample_bicubic2d
// and upsample_trilinear3d: input (N, C, L) / (N, C, H, W) / (N, C, D, H, W), N may be 0; the
// scales as for bilinear (the user's scale factors, used for the source step when align_corners
// is false, ignored when true). Bicubic uses A = -0.75 and replicates the border (the
// coordinate is not clamped, the taps are); see ops/upsample/upsample_kernels.h for the rules
// and where we differ from PyTorch 1.13 (bicubic's backward when in == out with a user scale).
Tensor upsample_linear1d(const Tensor& input, std::array<int64_t, 1> output_size, bool align_corners,
                         std::optional<double> scales = std::nullopt);
Tensor upsample_trilinear3d(const Tensor& input, std::array<int64_t, 3> output_size, bool align_corners,
                            std::optional<double> scales_d = {}, std::optional<double> scales_h = {},
                            std::optional<double> scales_w = {});
Tensor upsample_bicubic2d(const Tensor& input, std::array<int64_t, 2> output_size, bool align_corners,
                          std::optional<double> scales_h = {}, std::optional<double> scales_w = {});

// Their kernel-API backwards: the input gradient for grad_out (N, C, output_size...) and
// input_size (N, C, spatial...). Each is the adjoint of its forward, and is itself recorded
// (its gradient is the forward), so the ops are twice differentiable.
Tensor upsample_linear1d_backward(const Tensor& grad_out, std::array<int64_t, 1> output_size,
                                  std::array<int64_t, 3> input_size, bool align_corners,
                                  std::optional<double> scales = std::nullopt);
Tensor upsample_trilinear3d_backward(const Tensor& grad_out, std::array<int64_t, 3> output_size,
                                     std::array<int64_t, 5> input_size, bool align_corners,
                                     std::optional<double> scales_d = {}, std::optional<double> scales_h = {},
                                     std::optional<double> scales_w = {});
Tensor upsample_bicubic2d_backward(const Tensor& grad_out, std::array<int64_t, 2> output_size,
                                   std::array<int64_t, 4> input_size, bool align_corners,
                                   std::optional<double> scales_h = {}, std::optional<double> scales_w = {});

}  // namespace tg
