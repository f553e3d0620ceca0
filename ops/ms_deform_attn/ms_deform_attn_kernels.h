// Multi-scale deformable attention (Deformable DETR), forward and backward kernels.
//
// Shape legend
//   N = batch (bs)            K = num_keys (all levels' pixels, concatenated)
//   M = heads                 C = channels per head
//   L = levels                Q = queries            P = points per (query, head, level)
//
//   value               (N, K, M, C)
//   spatial_shapes      (L, 2) int64, each row (H_l, W_l)
//   level_start_index   (L) int64, first key of level l; level l occupies keys
//                       [start_l, start_l + H_l * W_l), pixel (y, x) is key start_l + y*W_l + x
//   sampling_locations  (N, Q, M, L, P, 2), last dim (x, y) normalised to [0, 1]
//   attention_weights   (N, Q, M, L, P)
//   output              (N, Q, M*C)
//
// Semantics are exactly Deformable-DETR's pure-PyTorch reference `ms_deform_attn_core_pytorch`:
// per level, bilinear F.grid_sample of the (N*M, C, H_l, W_l) map with grid = 2*loc - 1,
// padding_mode zeros, align_corners False, i.e. sampling at pixel coordinates
//   x_pix = x * W_l - 0.5,   y_pix = y * H_l - 0.5,
// where a corner outside the map contributes value 0; then
//   output[n, q, m*C + c] = sum_{l, p} attention_weights[n, q, m, l, p] * sample_l(n, m, c, loc).
// Note on the coordinate order: the specification page (MultiScaleDeformableAttentionGrad) says
// the last dim of the locations is (y, x). We follow Deformable-DETR, whose layers users port,
// and read it as (x, y) (x indexes W, y indexes H).
//
// Non-finite locations or weights give what PyTorch gives: a NaN/Inf location makes that
// sample NaN (its bilinear weights are NaN), and it never touches grad_value. Locations far
// outside the map read nothing. No input validation happens here (the Tensor layer validates);
// for any shapes that satisfy the above, no out-of-bounds access happens.
//
// All buffers contiguous, C order. Outputs are overwritten, never accumulated into.
// Parallel with OpenMP over the N*M (image, head) pairs, "slices"; no atomics; bit-identical
// results for any thread count. Memory: per thread, a few L*P-sized arrays and, when a slice is
// sampled at least twice per key, a K x C copy of its value rows (forward) or of its value and
// gradient rows (backward), which keeps one head's rows contiguous in cache; for a backward of
// fewer than 8 slices, up to 8 K x C gradient buffers in all (see the backward). SIMD through
// GCC/Clang vector extensions: any target, AVX-512 at best.
//
// T is float or double; the forward and the first-order backward also take BFloat16 and Float16
// (framework/half.h): they read the 16-bit tensors as they are (a query's inputs widened into
// small per-thread buffers, a slice's value rows into its per-thread copy; only when slices are
// not copied is value widened whole, once), compute exactly as the
// float kernel does on the widened values, sum grad_value in float32 and round every output
// element once, so the result is the float kernel's on widened inputs, rounded to T. The
// double backward takes float and double only.
#pragma once

#include <cstdint>

namespace tg::kernels {

template <class T>
void ms_deform_attn_forward(const T* value, const int64_t* spatial_shapes,
                            const int64_t* level_start_index, const T* sampling_locations,
                            const T* attention_weights, T* output, int64_t bs, int64_t num_keys,
                            int64_t heads, int64_t channels, int64_t levels, int64_t queries,
                            int64_t points);

// grad_output (N, Q, M*C). Gradients asked for are given as non-null buffers of the shape of
// their input (grad_value (N, K, M, C), grad_sampling_locations (N, Q, M, L, P, 2),
// grad_attention_weights (N, Q, M, L, P)); a null pointer means "not asked for" and that
// gradient is not computed. Every non-null buffer is overwritten.
//
// Determinism: grad_value is a scatter-add, done without atomics, bit-identical for every
// thread count. A task owns a whole slice (N*M of them), or, with fewer than 8 slices, a chunk
// of a slice's queries; the number of chunks depends on the shapes only. A slice's first chunk
// accumulates into grad_value, each other chunk into its own K x C buffer, and the buffers are
// added in chunk order. The forward and the other two gradients are bit-identical for every
// thread count too (each of their elements has one writer).
template <class T>
void ms_deform_attn_backward(const T* value, const int64_t* spatial_shapes,
                             const int64_t* level_start_index, const T* sampling_locations,
                             const T* attention_weights, const T* grad_output, T* grad_value,
                             T* grad_sampling_locations, T* grad_attention_weights, int64_t bs,
                             int64_t num_keys, int64_t heads, int64_t channels, int64_t levels,
                             int64_t queries, int64_t points);

// Double backward (ms_deform_attn_kernels_double_backward.cpp, where the maths is written out):
// the backward of ms_deform_attn_backward. Upstream gradients of its outputs, each null for zero:
// gg_value (N, K, M, C), gg_sampling_locations (N, Q, M, L, P, 2), gg_attention_weights
// (N, Q, M, L, P). Outputs, each null when not asked for, overwritten when given:
//   grad_grad_output_rest (N, Q, M*C): the terms of d/dgrad_output that come from gg_loc and
//       gg_attn. The remaining term, from gg_value, is the forward on gg_value (the caller adds
//       ms_deform_attn(gg_value, ...)), so the kernel does not repeat it.
//   grad_value (N, K, M, C), grad_sampling_locations (N, Q, M, L, P, 2),
//   grad_attention_weights (N, Q, M, L, P): the full gradients of the three inputs.
// Corners are picked, and points on a pixel border or outside a level handled, with the same
// arithmetic as the first-order kernels. No atomics; bit-identical for every thread count:
// grad_value is accumulated by the thread that owns its whole slice (n, m), queries in order.
template <class T>
void ms_deform_attn_double_backward(const T* value, const int64_t* spatial_shapes,
                                    const int64_t* level_start_index, const T* sampling_locations,
                                    const T* attention_weights, const T* grad_output,
                                    const T* gg_value, const T* gg_sampling_locations,
                                    const T* gg_attention_weights, T* grad_grad_output_rest,
                                    T* grad_value, T* grad_sampling_locations,
                                    T* grad_attention_weights, int64_t bs, int64_t num_keys,
                                    int64_t heads, int64_t channels, int64_t levels,
                                    int64_t queries, int64_t points);

}  // namespace tg::kernels
