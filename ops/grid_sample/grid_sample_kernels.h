// Numeric kernels of grid_sample and affine_grid (2-D and 3-D), PyTorch semantics.
//
// Shape legend
//   N  = batch              C  = channels
//   H, W   = input height and width
//   Ho, Wo = output height and width (= grid height and width)
//   input       (N, C, H, W)
//   grid        (N, Ho, Wo, 2)   last dim is (x, y): x indexes W, y indexes H, both
//                                normalised so that [-1, 1] spans the image
//   output      (N, C, Ho, Wo)
//   theta       (N, 2, 3)        affine matrix mapping output (x, y, 1) to grid (x, y)
// 3-D (volumes), the same with a depth:
//   D = input depth, Do = output depth
//   input (N, C, D, H, W), grid (N, Do, Ho, Wo, 3) holding (x, y, z) (z indexes D),
//   output (N, C, Do, Ho, Wo), theta (N, 3, 4)
//
// All buffers are contiguous C-order. The kernels know nothing of tensors or the tape and do
// no validation (the Tensor layer does); they never read out of bounds for any shape,
// including zero-size dimensions and grid coordinates that are huge, infinite or NaN.
//
// Semantics are those of PyTorch's CPU grid_sampler_2d / grid_sampler_2d_backward (the
// vectorised kernel in aten/src/ATen/native/cpu/GridSamplerKernel.cpp, which is what
// PyTorch runs for 4-D float and double input) and of affine_grid_generator:
//   * unnormalisation: align_corners = true maps -1 and +1 to the centres of the corner
//     pixels, x_pix = (x + 1) / 2 * (W - 1); align_corners = false maps them to the outer
//     edges of the corner pixels, x_pix = (x + 1) * W / 2 - 1/2.
//   * padding: zeros reads 0 outside the image; border clips the source coordinate to
//     [0, W - 1]; reflection reflects it about the image edges (the corner-pixel centres
//     when align_corners) and then clips. The clip's derivative is 0 on and beyond the
//     boundary, so a coordinate exactly on the border gets a zero grid gradient.
//   * nearest rounds half to even (nearbyint) and has a zero grid gradient.
//   * bicubic uses the cubic convolution kernel with A = -0.75 on a 4x4 neighbourhood;
//     the padding is applied to each of the 16 tap positions, not to the sample point,
//     so its grid gradient is never clipped.
//   * NaN / Inf coordinates: with zeros padding they behave as in PyTorch (the weights
//     become NaN and so do output and grid gradient; nothing is read). With border and
//     reflection the clipped coordinate of a NaN is 0, as in PyTorch's forward.
//     PyTorch 1.13's bilinear backward gathers at INT_MIN for such points: in float64 it
//     crashes, in float32 it returns what that out-of-range read happens to give (NaN grid
//     and input gradients in our runs); here the point is treated as clipped: it samples
//     pixel 0 and its grid gradient multiplier is 0.
//   * reflection folds a coordinate by a - trunc(a / 2 span) 2 span in one fused
//     multiply-add, as PyTorch's AVX2 / AVX-512 builds do (its scalar build rounds the
//     product first, which decides the answer millions of periods out).
//
// The 3-D kernels follow PyTorch's 3-D CPU kernel (native/GridSampler.cpp), which computes the
// coordinates with the scalar helpers of native/GridSampler.h rather than the vectorised 2-D
// kernel's; the differences (all of them at NaN, huge or tie coordinates) are listed at Axis in
// internal/grid_sample_kernels_shared.h:
//   * unnormalisation ((x + 1) / 2) * (W - 1) or ((x + 1) * W - 1) / 2, unfused;
//   * a NaN clips to the last voxel in the forward (border, reflection), while the backward
//     keeps it NaN, so that point passes no gradient; with zeros padding, and for any point
//     whose neighbours are all outside, output and gradients are 0 (never NaN);
//   * reflection of a coordinate beyond 2^31 periods folds as if the count were even;
//   * nearest rounds half away from zero (std::round), not half to even. (PyTorch 1.13; later
//     versions changed the 3-D kernel to nearbyint.)
//   * trilinear only (PyTorch has no 3-D bicubic): the 3-D kernels treat any mode other than
//     Nearest as Bilinear; the Tensor layer refuses Bicubic.
//
// T is float or double for every kernel; grid_sample_2d_forward and grid_sample_2d_backward
// (and their 3-D counterparts) also take BFloat16 and Float16 (framework/half.h): they read the 16-bit tensors as given
// (each thread widens the planes and rows in hand into small float32 buffers; no float32 copy of
// a whole tensor), compute in float32 exactly as the float kernel does on the widened values,
// sum grad_input in float32 and round each output element once, so the result is the float
// kernel's result on widened inputs, rounded to T.
//
// Threading: OpenMP, no atomics. Every output element is produced by exactly one thread,
// in an order that does not depend on the number of threads, so all five kernels give
// bit-identical results for any thread count (see the .cpp for how the scatter-add of
// grad_input is split).
#pragma once

#include <cstdint>

namespace tg::kernels {

enum class GridSampleMode { Bilinear = 0, Nearest = 1, Bicubic = 2 };  // PyTorch's numbering
enum class GridSamplePadding { Zeros = 0, Border = 1, Reflection = 2 };

// output (N, C, Ho, Wo) = input sampled at grid. Overwrites every element of output.
template <class T>
void grid_sample_2d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C,
                            int64_t H, int64_t W, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners);

// grad_input (N, C, H, W) and grad_grid (N, Ho, Wo, 2) from grad_output (N, C, Ho, Wo).
// Pass nullptr for a gradient that is not needed: it is then not computed at all (the
// output mask). Both are overwritten, not accumulated into.
template <class T>
void grid_sample_2d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input,
                             T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding,
                             bool align_corners);

// The second-order terms that come from gg_grid (N, Ho, Wo, 2), the upstream gradient of
// grad_grid (grid_sample_kernels_double_backward.cpp has the formulas): the gradients of
// <gg_grid, grad_grid> with respect to grad_output (grad_grad_output, (N, C, Ho, Wo)), input
// (grad_input, (N, C, H, W)) and grid (grad_grid, (N, Ho, Wo, 2)). Nearest's grad_grid is
// identically zero, and so are these. nullptr for one that is not needed; input may be
// nullptr when only grad_input is asked for. All are overwritten, not accumulated into; same
// threading guarantee as the others.
template <class T>
void grid_sample_2d_double_backward(const T* grad_output, const T* input, const T* grid,
                                    const T* gg_grid, T* grad_grad_output, T* grad_input,
                                    T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W,
                                    int64_t Ho, int64_t Wo, GridSampleMode mode,
                                    GridSamplePadding padding, bool align_corners);

// grid (N, H, W, 2) = theta (N, 2, 3) applied to the base grid (x_w, y_h, 1), where x_w and
// y_h are linspace(-1, 1) over W and H (scaled by (W - 1) / W when !align_corners; a size
// of 1 gives 0). H and W here are the sizes of the grid, i.e. of grid_sample's output.
// Overwrites grid.
template <class T>
void affine_grid_2d_forward(const T* theta, T* grid, int64_t N, int64_t H, int64_t W,
                            bool align_corners);

// grad_theta (N, 2, 3) = sum over (h, w) of grad_grid[n, h, w, i] * (x_w, y_h, 1)[j].
// Overwrites grad_theta. Sums are accumulated in double.
template <class T>
void affine_grid_2d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t H, int64_t W,
                             bool align_corners);

// 3-D: output (N, C, Do, Ho, Wo) = input (N, C, D, H, W) sampled at grid (N, Do, Ho, Wo, 3).
template <class T>
void grid_sample_3d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C, int64_t D,
                            int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners);

// 3-D: grad_input (N, C, D, H, W) and grad_grid (N, Do, Ho, Wo, 3) from grad_output
// (N, C, Do, Ho, Wo); nullptr for one not needed (not computed); both overwritten.
template <class T>
void grid_sample_3d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input, T* grad_grid,
                             int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding, bool align_corners);

// 3-D: the second-order terms from gg_grid (N, Do, Ho, Wo, 3), as grid_sample_2d_double_backward.
template <class T>
void grid_sample_3d_double_backward(const T* grad_output, const T* input, const T* grid, const T* gg_grid,
                                    T* grad_grad_output, T* grad_input, T* grad_grid, int64_t N, int64_t C,
                                    int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo,
                                    GridSampleMode mode, GridSamplePadding padding, bool align_corners);

// 3-D: grid (N, D, H, W, 3) = theta (N, 3, 4) applied to the base grid (x_w, y_h, z_d, 1).
template <class T>
void affine_grid_3d_forward(const T* theta, T* grid, int64_t N, int64_t D, int64_t H, int64_t W,
                            bool align_corners);

// 3-D: grad_theta (N, 3, 4) = sum over (d, h, w) of grad_grid[n, d, h, w, i] * (x_w, y_h, z_d, 1)[j],
// accumulated in double.
template <class T>
void affine_grid_3d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t D, int64_t H, int64_t W,
                             bool align_corners);

}  // namespace tg::kernels
