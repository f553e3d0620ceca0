// Bilinear 2-D upsampling (and downsampling) on tensors and the tape, PyTorch's semantics.
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

}  // namespace tg
