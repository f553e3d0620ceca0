// Nearest-neighbour resampling kernels (forward and backward) for 1, 2 and 3 spatial dims, one
// kernel for all three: PyTorch's upsample_nearest{1,2,3}d and _upsample_nearest_exact{1,2,3}d
// (CPU aten, UpSampleKernel.cpp in 1.13), NC(D)HW contiguous.
//
// Shape legend
//   NC        = N * C, the number of independent planes
//   D, H, W   = input depth, height, width;  Do, Ho, Wo = output depth, height, width
//   x, grad_x : (NC, D, H, W)      y, grad_y : (NC, Do, Ho, Wo)
// A 2-D op is the 3-D one with D = Do = 1, a 1-D op with H = Ho = 1 too.
//
// Source index per dim (in, out, the user's scale s when one was passed through), computed once
// per call by nearest_source_indices as aten 1.13's forward computes it, in the tensor's
// arithmetic S (float; double for float64):
//   step = S(1 / s) when s > 0 is given, else S(in) / S(out)
//   nearest:        src = min(floor(float(S(dst) * step)), in - 1)
//   nearest-exact:  src = min(floor(float(max(step * (dst + 0.5) - 0.5, 0) + 0.5)), in - 1)
//   y[od, oh, ow] = x[src_d[od], src_h[oh], src_w[ow]]
//
// Where we differ from PyTorch 1.13: its backward does not use its forward's indices. It
// recomputes them in float whatever the dtype, and for nearest takes two shortcuts the
// forward does not (out == in: src = dst; out == 2 in: src = dst / 2, both ignoring a given
// scale). So where those give other indices (a scale of 2.1 on a length of 5, or float64
// positions that round differently in float), PyTorch's input gradient is not the gradient of
// its output. Ours is: the backward uses the forward's indices (the tests check against the
// adjoint of PyTorch's forward, tools/fixtures/interpolate.py). PyTorch 1.13 also resamples a
// channels-last input, and so any 2-D / 3-D input with C == 1 (its strides are channels-last
// too), by another kernel that uses the backward's rules; we follow the contiguous NC(D)HW
// kernel's rules for every layout. The results differ only in those corner cases: a given
// scale with out == in or out == 2 in, or a float64 position whose float rounding moves it.
// And in bfloat16 / float16 PyTorch 1.13 computes the positions in the 16-bit type (wrong
// indices from about 40 outputs on); we compute them in float, as later PyTorch does.
//
// Backward: grad_x[src] += grad_y[dst], in aten's order (per plane: od, oh, ow), so float
// results are PyTorch's bit for bit. Each thread owns whole planes of grad_x: no atomics, the
// same bits for any thread count. The backward is linear in grad_y and the forward is its
// adjoint (the double backward).
//
// No validation here: the Tensor-level ops (upsample_nearest.cpp) check ranks and sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace tg::kernels {

struct NearestParams {
  int64_t NC = 0, D = 1, H = 1, W = 1, Do = 1, Ho = 1, Wo = 1;
  const int64_t* src_d = nullptr;  // Do source indices, each in [0, D)
  const int64_t* src_h = nullptr;  // Ho, in [0, H)
  const int64_t* src_w = nullptr;  // Wo, in [0, W)
};

// The source index of every output position along one dim (the rules above). scale <= 0
// means none given; in_double: the arithmetic of float64 tensors.
std::vector<int64_t> nearest_source_indices(int64_t in, int64_t out, double scale, bool exact, bool in_double);

// T = float, double. Overwrites y (NC, Do, Ho, Wo).
template <class T>
void upsample_nearest3d_forward(const T* x, T* y, const NearestParams& p);

// Overwrites grad_x (NC, D, H, W).
template <class T>
void upsample_nearest3d_backward(const T* grad_y, T* grad_x, const NearestParams& p);

}  // namespace tg::kernels
