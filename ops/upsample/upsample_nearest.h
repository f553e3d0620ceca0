// Nearest-neighbour upsampling (and downsampling) in 1, 2 and 3 spatial dims on tensors and
// the tape, PyTorch's upsample_nearest{1,2,3}d ("nearest") and _upsample_nearest_exact{1,2,3}d
// ("nearest-exact"). The index rules, forward beside backward, are in
// ops/upsample/nearest_kernels.h; interpolate (ops/upsample/interpolate.h) is the usual way in.
//
// input (N, C, L), (N, C, H, W) or (N, C, D, H, W); N may be 0. The scales are the user's scale
// factors (output / input) when given: they set the source step (1 / scale) instead of
// in / out. Dtypes float32, float64, bfloat16, float16 (16-bit copied exactly; the backward
// sums in float32 and rounds once). Twice differentiable: each backward is linear in
// grad_output, and its gradient is the forward.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "../../framework/tensor.h"

namespace tg {

Tensor upsample_nearest1d(const Tensor& input, std::array<int64_t, 1> output_size,
                          std::optional<double> scales = std::nullopt);
Tensor upsample_nearest2d(const Tensor& input, std::array<int64_t, 2> output_size,
                          std::optional<double> scales_h = std::nullopt, std::optional<double> scales_w = std::nullopt);
Tensor upsample_nearest3d(const Tensor& input, std::array<int64_t, 3> output_size,
                          std::optional<double> scales_d = std::nullopt, std::optional<double> scales_h = std::nullopt,
                          std::optional<double> scales_w = std::nullopt);

Tensor upsample_nearest_exact1d(const Tensor& input, std::array<int64_t, 1> output_size,
                                std::optional<double> scales = std::nullopt);
Tensor upsample_nearest_exact2d(const Tensor& input, std::array<int64_t, 2> output_size,
                                std::optional<double> scales_h = std::nullopt,
                                std::optional<double> scales_w = std::nullopt);
Tensor upsample_nearest_exact3d(const Tensor& input, std::array<int64_t, 3> output_size,
                                std::optional<double> scales_d = std::nullopt,
                                std::optional<double> scales_h = std::nullopt,
                                std::optional<double> scales_w = std::nullopt);

// The kernel API: the input gradient for grad_output (N, C, output_size...), input_size the
// forward input's shape.
Tensor upsample_nearest1d_backward(const Tensor& grad_output, std::array<int64_t, 1> output_size,
                                   std::array<int64_t, 3> input_size, std::optional<double> scales = std::nullopt);
Tensor upsample_nearest2d_backward(const Tensor& grad_output, std::array<int64_t, 2> output_size,
                                   std::array<int64_t, 4> input_size, std::optional<double> scales_h = std::nullopt,
                                   std::optional<double> scales_w = std::nullopt);
Tensor upsample_nearest3d_backward(const Tensor& grad_output, std::array<int64_t, 3> output_size,
                                   std::array<int64_t, 5> input_size, std::optional<double> scales_d = std::nullopt,
                                   std::optional<double> scales_h = std::nullopt,
                                   std::optional<double> scales_w = std::nullopt);

Tensor upsample_nearest_exact1d_backward(const Tensor& grad_output, std::array<int64_t, 1> output_size,
                                         std::array<int64_t, 3> input_size,
                                         std::optional<double> scales = std::nullopt);
Tensor upsample_nearest_exact2d_backward(const Tensor& grad_output, std::array<int64_t, 2> output_size,
                                         std::array<int64_t, 4> input_size,
                                         std::optional<double> scales_h = std::nullopt,
                                         std::optional<double> scales_w = std::nullopt);
Tensor upsample_nearest_exact3d_backward(const Tensor& grad_output, std::array<int64_t, 3> output_size,
                                         std::array<int64_t, 5> input_size,
                                         std::optional<double> scales_d = std::nullopt,
                                         std::optional<double> scales_h = std::nullopt,
                                         std::optional<double> scales_w = std::nullopt);

}  // namespace tg
