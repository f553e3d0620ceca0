// Upsampling kernels (forward and backward), PyTorch's upsample_bilinear2d, upsample_bicubic2d
// and upsample_trilinear3d semantics (CPU aten), contiguous planes. (upsample_linear1d is the
// bilinear kernel on (NC, 1, L) planes: H = Ho = 1 is aten's copy rule, a weight of exactly 1.)
//
// Shape legend
//   NC        = N * C, the number of independent planes
//   D, H, W   = input depth, height and width
//   Do, Ho, Wo = output depth, height and width
//   2-d: x, grad_x : (NC, H, W)     y, grad_y : (NC, Ho, Wo)
//   3-d: x, grad_x : (NC, D, H, W)  y, grad_y : (NC, Do, Ho, Wo)
//
// Linear modes (bilinear, trilinear: per dim, the same rule; aten's compute_source_index_and_lambda):
// Source coordinates (per dim, in = H or W, out = Ho or Wo), as aten's UpSample.h computes them:
//   align_corners:  scale = (in - 1) / (out - 1), 0 when out == 1; the given scale is ignored;
//                   src = scale * dst
//   otherwise:      scale = 1 / scales when scales > 0 is given, else in / out;
//                   src = max(scale * (dst + 0.5) - 0.5, 0)
//   in == out:      src = dst whatever the scale (aten's shortcut: a plain copy)
//   i0 = min(floor(src), in - 1), i1 = min(i0 + 1, in - 1), l1 = clamp(src - i0, 0, 1), l0 = 1 - l1
//   y[oh, ow] = l0h * (l0w * x[i0h, i0w] + l1w * x[i0h, i1w])
//             + l1h * (l0w * x[i1h, i0w] + l1w * x[i1h, i1w])
// As in PyTorch 1.13, the scale is computed in T (float for float), the source coordinate in
// double, and only the weights l0, l1 are rounded to T (checked bit for bit against torch's
// weights). PyTorch 1.13 then sums the four terms x * (lh * lw) in double with the weight
// products rounded to float; we interpolate separably (W, then H) in T, which is what makes
// the kernels fast and the backward an exact adjoint. Float results differ from PyTorch's by
// an ulp or two (max 1.3e-7 relative in our checks; 75% of random cases are bit-identical).
//
// Trilinear nests the sums as aten does (W, then H, then D), in T; float results are within an
// ulp or two of PyTorch's.
//
// Bicubic (aten's HelperInterpCubic, A = -0.75; per dim):
//   scale as above (align_corners or not); src = scale * dst (align_corners) or
//   scale * (dst + 0.5) - 0.5, NOT clamped at 0; i = floor(src), t = src - i;
//   taps i-1, i, i+1, i+2, each clamped to [0, in - 1] (border replication);
//   weights w0 = c2(t + 1), w1 = c1(t), w2 = c1(1 - t), w3 = c2(2 - t) with
//   c1(x) = ((A + 2) x - (A + 3)) x^2 + 1 and c2(x) = ((A x - 5A) x + 8A) x - 4A, evaluated in
//   double and rounded once to T (aten evaluates them in T; see internal/separable.h).
//   No in == out shortcut (with a user scale != 1 the output differs from the input).
//   Float outputs are within ~5e-6 of PyTorch's (its float weights and sum order); float64
//   agrees to ~1e-15.
//   PyTorch 1.13's backward copies grad_y when in == out in both dims even with a user scale
//   (then it is not its forward's gradient; torch.autograd.gradcheck fails there); ours is
//   always the adjoint of the forward.
//
// Where we differ from PyTorch 1.13: a user scale that is inconsistent with the sizes (say
// scales = 0.25 for 4 -> 8) makes aten read past the input; we clamp i0 to in - 1 as later
// PyTorch versions do. NaN or infinite scales never make us read out of bounds either.
//
// scales_d / scales_h / scales_w: the user's scale factor (output / input) when one was given and passed
// through (F.interpolate(scale_factor=..., recompute_scale_factor=False)); <= 0 means none.
// 16-bit storage (T = tg::BFloat16, tg::Float16, framework/half.h): x, y, grad_y and grad_x
// are 16-bit; everything else runs as in the float32 kernel (weights, scale and interpolation
// in float, the backward's sums in double), each value read widened exactly to float and each
// output rounded once to T (the backward's via float, as the float32 kernel's result would
// be): the result is the float32 kernel's on the widened inputs, rounded once.
//
// No validation here (the Tensor-level op checks sizes > 0 and the ranks). Zero sizes are
// tolerated: an empty input gives a zero output, an empty grad_y a zero grad_x.
#pragma once

#include <cstdint>

namespace tg::kernels {

// Linear 1-D (aten's upsample_linear1d): y (NC, Wo) from x (NC, W), the bilinear kernel's
// width pass alone; with no height axis, no 0 * x is formed, so an Inf stays an Inf where
// aten's 1-D kernel keeps it (the 2-D kernel on H = Ho = 1 gives NaN there, as aten's 2-D
// does). The backward overwrites grad_x (NC, W). Same types and contract as bilinear.
template <class T>
void upsample_linear1d_forward(const T* x, T* y, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                               double scales_w);
template <class T>
void upsample_linear1d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t W, int64_t Wo, bool align_corners,
                                double scales_w);

// T = float, double, BFloat16, Float16. Overwrites y (NC, Ho, Wo).
template <class T>
void upsample_bilinear2d_forward(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho,
                                 int64_t Wo, bool align_corners, double scales_h,
                                 double scales_w);

// Overwrites grad_x (NC, H, W) with the adjoint of the forward applied to grad_y (NC, Ho, Wo).
template <class T>
void upsample_bilinear2d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W,
                                  int64_t Ho, int64_t Wo, bool align_corners, double scales_h,
                                  double scales_w);

// Bicubic: the same contract as bilinear.
template <class T>
void upsample_bicubic2d_forward(const T* x, T* y, int64_t NC, int64_t H, int64_t W, int64_t Ho,
                                int64_t Wo, bool align_corners, double scales_h, double scales_w);
template <class T>
void upsample_bicubic2d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t H, int64_t W,
                                 int64_t Ho, int64_t Wo, bool align_corners, double scales_h,
                                 double scales_w);

// Trilinear: overwrites y (NC, Do, Ho, Wo); the backward overwrites grad_x (NC, D, H, W).
template <class T>
void upsample_trilinear3d_forward(const T* x, T* y, int64_t NC, int64_t D, int64_t H, int64_t W,
                                  int64_t Do, int64_t Ho, int64_t Wo, bool align_corners,
                                  double scales_d, double scales_h, double scales_w);
template <class T>
void upsample_trilinear3d_backward(const T* grad_y, T* grad_x, int64_t NC, int64_t D, int64_t H,
                                   int64_t W, int64_t Do, int64_t Ho, int64_t Wo, bool align_corners,
                                   double scales_d, double scales_h, double scales_w);

}  // namespace tg::kernels
