// grid_sample and affine_grid, 2-D and 3-D, on tensors and the tape, PyTorch's semantics.
// The maths (unnormalisation, padding, rounding, NaN handling) is documented in
// ops/grid_sample/grid_sample_kernels.h. Shapes: input (N, C, H, W), grid (N, Ho, Wo, 2) holding (x, y)
// normalised to [-1, 1], output (N, C, Ho, Wo); theta (N, 2, 3). Volumes: input (N, C, D, H, W),
// grid (N, Do, Ho, Wo, 3) holding (x, y, z), output (N, C, Do, Ho, Wo); theta (N, 3, 4).
// Dtypes (every function below): float32, float64, bfloat16 or float16, one dtype per call (a
// tensor of another is a tg::Error naming it). bfloat16 and float16 are computed in float32 and
// each output rounded once, as PyTorch does on the CPU; gradients come back in that dtype.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "../../framework/tensor.h"
#include "grid_sample_kernels.h"

namespace tg {

// Bilinear = 0, Nearest = 1, Bicubic = 2 and Zeros = 0, Border = 1, Reflection = 2, as PyTorch
// numbers them (the integer forms below take these numbers).
using GridSampleMode = kernels::GridSampleMode;
using GridSamplePadding = kernels::GridSamplePadding;

// torch.nn.functional.grid_sample: 4-D input (grid_sampler_2d) or 5-D input (a volume,
// grid_sampler_3d: bilinear means trilinear; bicubic is refused, as in PyTorch). Differentiable
// in input and grid (nearest's grid gradient is zero), twice in every mode (create_graph).
// align_corners defaults to false, as in PyTorch.
Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode = GridSampleMode::Bilinear,
                   GridSamplePadding padding_mode = GridSamplePadding::Zeros, bool align_corners = false);

// The same with the mode and padding as integers (aten::grid_sampler_2d); out-of-range values
// throw.
Tensor grid_sampler_2d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners);

// The same for 5-D input (aten::grid_sampler_3d): mode 0 (trilinear) or 1 (nearest); 2
// (bicubic) throws, as in PyTorch. PyTorch 1.13's 3-D kernel rounds nearest's ties half away
// from zero and treats NaN coordinates its own way (grid_sample_kernels.h); so does this.
Tensor grid_sampler_3d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners);

struct GridSampleGrads {
  Tensor grad_input, grad_grid;  // undefined where output_mask did not ask for it
};

// The kernel API (aten::grid_sampler_2d_backward): the gradients for grad_output
// (N, C, Ho, Wo), computing only those output_mask asks for (input, grid). Recorded when an
// argument requires grad (grid_sample's backward under create_graph calls it that way): its
// gradients in grad_output, input and grid are grid_sample's second derivatives, in every
// mode (nearest's grid gradient is zero).
GridSampleGrads grid_sampler_2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                         int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                         std::array<bool, 2> output_mask = {true, true});

// The same for 5-D input (aten::grid_sampler_3d_backward): grad_output (N, C, Do, Ho, Wo).
GridSampleGrads grid_sampler_3d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                         int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                         std::array<bool, 2> output_mask = {true, true});

struct GridSampleDoubleGrads {
  Tensor grad_grad_output, grad_input, grad_grid;  // undefined where output_mask did not ask for it
};

// The second-order term of grid_sample that comes from gg_grid (N, Ho, Wo, 2), an upstream
// gradient of grid_sampler_2d_backward's grad_grid: the gradients of <gg_grid, grad_grid> with
// respect to grad_output, input and grid (output_mask in that order). No PyTorch counterpart
// (PyTorch 1.13 has no double backward of grid_sample). Recorded when an argument requires
// grad, but not differentiable: a third derivative through it is a tg::Error.
GridSampleDoubleGrads grid_sampler_2d_double_backward(const Tensor& grad_output, const Tensor& input,
                                                      const Tensor& grid, const Tensor& gg_grid,
                                                      int64_t interpolation_mode, int64_t padding_mode,
                                                      bool align_corners,
                                                      std::array<bool, 3> output_mask = {true, true, true});

// The same for 5-D input, gg_grid (N, Do, Ho, Wo, 3).
GridSampleDoubleGrads grid_sampler_3d_double_backward(const Tensor& grad_output, const Tensor& input,
                                                      const Tensor& grid, const Tensor& gg_grid,
                                                      int64_t interpolation_mode, int64_t padding_mode,
                                                      bool align_corners,
                                                      std::array<bool, 3> output_mask = {true, true, true});

// torch.nn.functional.affine_grid, 2-D: theta (N, 2, 3), size = {N, C, H, W} (the size of
// the image to produce) -> grid (N, H, W, 2); 3-D: theta (N, 3, 4), size = {N, C, D, H, W} ->
// grid (N, D, H, W, 3). Differentiable in theta (twice).
Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners = false);

// The kernel API of affine_grid's backward: grad_theta (N, 2, 3) for grad_grid (N, H, W, 2), or
// (N, 3, 4) for (N, D, H, W, 3) when size has 5 values.
// Linear in grad_grid; recorded when grad_grid requires grad (double backward, create_graph),
// its own gradient being affine_grid.
Tensor affine_grid_generator_backward(const Tensor& grad_grid, const std::vector<int64_t>& size, bool align_corners);

}  // namespace tg
