// Convolution kernels (see conv_kernels.h for the parameters and tensor layouts).
//
// The files of ops/conv/ (the .cpp files are named after the header they implement):
//   conv.h / conv.cpp               the tensor op: argument checks, dtype dispatch, the tape
//   conv_kernels.h                  the kernel API (parameters, layouts, output mask)
//   conv_kernels.cpp                this overview, convolution_forward / _backward (one copy per
//                                   instruction set, see ops/internal/isa_dispatch.h)
//   conv_dispatch.cpp               the public kernel API: ConvParams helpers, and the entry
//                                   points that call the active instruction set's copy
//   conv_kernels_correlate.cpp      correlate: direct, depthwise, im2col + GEMM
//   conv_kernels_adjoint.cpp        correlate_adjoint: direct per image phase, depthwise, GEMM + col2im
//   conv_kernels_weight_grad.cpp    weight_grad: outer and dot tilings, depthwise, im2col + GEMM; and
//                                   bias_grad
//   conv_kernels_winograd.cpp       Winograd F(4x4, 3x3): correlate and correlate_adjoint of
//                                   float32 3x3 (3-D: kx3x3) kernels of stride 1, where it is faster
//   conv_kernels_reduced.cpp        the three pieces with 16-bit operands (bf16 / fp16) and float32
//                                   results: im2col in 16 bits + gemm_batched_reduced
//   internal/conv_kernels_shared.h  what the kernels share: constants, Scratch, boxes (Box,
//                                   pad_image, crop_image, ...), Geom, grids (im2col, col2im_add,
//                                   zero_garbage, grid_from_rows), the GEMM wrapper, Lanes, the
//                                   non-finite helpers, and the declarations of the three pieces
//   internal/conv_direct.h          direct correlation (direct_blocks, repack), used by correlate
//                                   and correlate_adjoint
// (internal/ holds the private headers: they need Eigen and are not installed.)
//
// Everything is written in the geometry of a *normal* convolution, whatever the direction:
//
//   image   x : (N, Ci, Di, Hi, Wi)   the tensor the sliding windows read from
//   columns y : (N, Co, Do, Ho, Wo)   one value per window position
//   weight  w : (Co, Ci / G, kd, kh, kw)
//
//   normal convolution:     image = input,  columns = output
//   transposed convolution: image = output, columns = input   (weight is (C_in, C_out/G, k...),
//                                                              which is exactly (Co, Ci/G, k...))
//
// Legend: G = groups, Cig = Ci / G, Cog = Co / G, K = kd*kh*kw, CKg = Cig * K,
//         Li = Di*Hi*Wi, Lo = Do*Ho*Wo, o = a window position, t = a kernel tap.
//
// Three pieces carry all the maths, each written once (per group g, per sample):
//
//   correlate          y = w . im2col(x)           normal forward    | transposed grad_input
//   correlate_adjoint  x = col2im(w^T . y)         normal grad_input | transposed forward
//   weight_grad        dw = sum_n y . im2col(x)^T  normal: y = grad_output, x = input
//                                                  transposed: y = input, x = grad_output
//
// im2col(x) is the (CKg x Lo) matrix whose row (ci, t) holds x[ci, o * stride - pad + t * dil]
// for every window position o (zero outside the image); col2im is its adjoint (a scatter-add).
//
// Boxes and grids. Image channels are first copied into zero-padded boxes that hold exactly what
// the windows cover, split into phases by the stride (padded position z lives in phase z % s at
// z / s). Tap t of window o then reads box[o + offset(t)] (per dim, inside one phase): every
// convolution becomes a stride-1 problem, no inner loop checks bounds, and rows of windows read
// contiguous memory. When the extra width is small, window positions are laid on a "flat" grid
// as wide as a box row, so that a tap of a whole slice of windows is one contiguous run; the few
// garbage positions per row are dropped, or kept out of every sum (see zero_garbage and the
// non-finite fallbacks), so Inf and NaN propagate exactly as the definition says: only taps
// inside the image contribute (see "Non-finite weights and column values" in
// internal/conv_kernels_shared.h).
//
// How each piece runs (float32 3x3 (or kx3x3) convolutions of stride 1 with at least 16 channels
// (24 in 2-D) and 16x16 positions on each side take Winograd's F(4x4, 3x3) in correlate and
// correlate_adjoint first,
// unless an input is not finite or too large: conv_kernels_winograd.cpp):
//   correlate          flat grid: direct correlation (direct_blocks): a block of output channels
//                      x positions is summed in registers over (ci, t) straight from the box,
//                      no column matrix. Otherwise im2col + Eigen GEMM.
//   correlate_adjoint  one direct correlation per phase of the image: image position
//                      i = m * s + phase - pad gathers the taps with (t * dil) % s == phase,
//                      each from y[m - (t * dil) / s], i.e. y correlated with part of the flipped,
//                      transposed kernel. Non-finite weights (the correlation would meet 0 * Inf
//                      in y's padding) and narrow grids take GEMM + col2im instead.
//   weight_grad        flat grids: direct (weight_grad_direct), tiles of column channels x
//                      (image channel, tap) rows summed in registers straight from the boxes,
//                      with column channels in the vector lanes (two vectors of them or more
//                      per group) or positions in them (fewer). Otherwise im2col + Eigen GEMM, the
//                      positions in the GEMM's depth.
// Register tiles (direct blocks, weight-gradient tiles) and the vectors they hold (Lanes) are
// sized per instruction set (kVecBytes, kAccRegs in internal/conv_kernels_shared.h): each copy
// keeps its sums in its own registers, 24 of AVX-512's 32, 12 of AVX2's or SSE's 16.
// The GEMMs use column-major maps of our row-major buffers: a row-major (R x C) buffer is a
// column-major (C x R) matrix, so y^T (Lo x Cog) = im2col(x)^T (Lo x CKg) * w^T. Column matrices
// are built in chunks of positions (about kChunkBytes) that stay in L2 until the GEMM packs them.
// Special cases: "unit" convolutions (1x1x1, stride 1, no padding) use the image itself as the
// column matrix; depthwise ones (one image channel per group) use direct loops where no flat
// grid exists and for the weight gradient, where a GEMM would have a depth of only K.
//
// Parallel plan (OpenMP, no atomics): every piece is cut into items that each own the slice of
// the result they write, and the cut never changes the order of any sum, so results are
// bit-identical for any thread count:
//   correlate, correlate_adjoint: items (n, g, range of blocks or chunks) -> own y / x there
//   GEMM adjoint:       items (n, g, block of image channels)              -> own x[n, g, block]
//   weight_grad direct: tiles (g, co block, block of rows) of one step        -> own dw there
//                       (each thread lays out the y and the boxes its tiles read itself, so no
//                       thread waits for another between steps)
//   weight_grad GEMM:   items (slot of samples, g, block of ci, block of co) -> own their slot's
//                       partial dw[g, co-block, ci-block]; slots are added in a fixed order
// Every cut that reaches a GEMM depends on the shape only. Inside our parallel regions Eigen's
// GEMM runs single-threaded (Eigen checks omp_get_num_threads()).
#include "conv_kernels.h"

#include "internal/conv_kernels_shared.h"

#include <vector>

// This file is compiled once per instruction set (ops/internal/isa_dispatch.h); conv_dispatch.cpp
// holds the public entry points and the ConvParams helpers.
namespace tg::kernels::TG_ISA_NS {

using namespace conv_detail;  // Geom, make_geom and the three pieces

template <class T>
void convolution_forward(const T* input, const T* weight, const T* bias, T* output,
                         const ConvParams& p) {
  const Geom g = make_geom(p);
  if (!p.transposed) {
    correlate(input, weight, bias, output, g);  // image = input, columns = output
  } else {
    correlate_adjoint(input, weight, bias, output, g);  // columns = input, image = output
  }
}

template <class T>
void convolution_backward(const T* grad_output, const T* input, const T* weight, T* grad_input,
                          T* grad_weight, T* grad_bias, const ConvParams& p) {
  const Geom g = make_geom(p);
  if (grad_bias) {
    bias_grad(grad_output, grad_bias, p.N, p.C_out, p.out[0] * p.out[1] * p.out[2]);
  }
  if (!p.transposed) {
    if (grad_input) correlate_adjoint(grad_output, weight, static_cast<const T*>(nullptr), grad_input, g);
    if (grad_weight) weight_grad(grad_output, input, grad_weight, g);
  } else {
    if (grad_input) correlate(grad_output, weight, static_cast<const T*>(nullptr), grad_input, g);
    if (grad_weight) weight_grad(input, grad_output, grad_weight, g);
  }
}

template void convolution_forward<float>(const float*, const float*, const float*, float*,
                                         const ConvParams&);
template void convolution_forward<double>(const double*, const double*, const double*, double*,
                                          const ConvParams&);
template void convolution_backward<float>(const float*, const float*, const float*, float*, float*,
                                          float*, const ConvParams&);
template void convolution_backward<double>(const double*, const double*, const double*, double*,
                                           double*, double*, const ConvParams&);

}  // namespace tg::kernels::TG_ISA_NS
