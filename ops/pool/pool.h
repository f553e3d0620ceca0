// Pooling on tensors and the tape: max_pool2d, avg_pool2d, adaptive_avg_pool1d/2d/3d, with
// PyTorch's argument order, defaults, output sizes and semantics. The window rules, forward
// beside backward, are in ops/pool/pool_kernels.h.
//
// input is (N, C, H, W) or, unbatched, (C, H, W) (adaptive: 1 to 3 spatial dims); the output
// keeps the same leading dims.
// Parameter lists take one value (both dims) or two (H, W); an empty stride means
// stride = kernel_size, as in PyTorch. padding must be at most half the kernel size.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "../../framework/tensor.h"
#include "../reduce.h"  // ValuesIndices

namespace tg {

// Differentiable in input. A NaN in a window is that window's maximum (as in PyTorch).
Tensor max_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1}, bool ceil_mode = false);

// The same, and the position of each maximum within its input plane (h * W + w, int64), as
// F.max_pool2d(..., return_indices=True). Of equal maxima the first (row-major) wins.
ValuesIndices max_pool2d_with_indices(const Tensor& input, const IntList& kernel_size, const IntList& stride = {},
                                      const IntList& padding = {0}, const IntList& dilation = {1},
                                      bool ceil_mode = false);

// divisor_override, when given (non-zero), replaces the window size as the divisor.
Tensor avg_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);

// Adaptive average pooling (F.adaptive_avg_pool1d/2d/3d; interpolate's mode "area"). input
// (N, C, L) or (C, L); (N, C, H, W) or (C, H, W); (N, C, D, H, W) or (C, D, H, W). output_size:
// one value (every dim) or one per spatial dim, each >= 1. Output (oh, ow) averages rows
// [floor(oh H / Ho), ceil((oh + 1) H / Ho)) and the same along the other dims.
Tensor adaptive_avg_pool1d(const Tensor& input, const IntList& output_size);
Tensor adaptive_avg_pool2d(const Tensor& input, const IntList& output_size);
Tensor adaptive_avg_pool3d(const Tensor& input, const IntList& output_size);

// The backward kernels: input gradients for grad_output of the forward's output shape.
// input_size is the forward input's shape; indices are max_pool2d_with_indices' (-1: skipped).
// Each is linear in grad_output and recorded when grad_output requires grad (double backward,
// create_graph): its own gradient is its adjoint (a gather at the indices, avg_pool2d,
// adaptive_avg_poolKd).
Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Shape& input_size, const Tensor& indices);
Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size, const IntList& kernel_size,
                           const IntList& stride, const IntList& padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override);
Tensor adaptive_avg_pool1d_backward(const Tensor& grad_output, const Shape& input_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size);
Tensor adaptive_avg_pool3d_backward(const Tensor& grad_output, const Shape& input_size);

}  // namespace tg
