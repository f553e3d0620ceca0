// Padding kernels for the modes that read the input again (reflect, replicate, circular),
// PyTorch's reflection_pad / replication_pad / _pad_circular semantics; constant padding is a
// fill and a strided copy (ops/pad/pad.cpp) and needs no kernel.
//
// Shape legend
//   P          = planes, the product of the dims in front of the padded ones (N * C, or C)
//   D, H, W    = the padded input dims (fewer padded dims: the leading ones are 1, pads 0)
//   Do, Ho, Wo = D + before[0] + after[0], ...
//   x, grad_x : (P, D, H, W)      y, grad_y : (P, Do, Ho, Wo)
//
// Each output position o of a dim of size n reads input index (before/after may be negative,
// which crops first):
//   reflect:   j = o - before; j < 0 -> -j; j >= n -> 2 (n - 1) - j      (before, after < n)
//   replicate: clamp(o - before, 0, n - 1)
//   circular:  the dim cropped by the negative pads, c = [max(-before, 0), n - max(-after, 0)),
//              read cyclically: c[(o - max(before, 0)) mod |c|]          (pads <= |c|)
// so a padded output is x[map_d[od], map_h[oh], map_w[ow]], and the backward is its adjoint:
// grad_x[i] = the sum of grad_y over the outputs that read i.
//
// The backward gathers: each input row (p, id, ih) sums the output rows that read it, in
// ascending output order (od, oh, then ow), which is PyTorch's serial order, into a row buffer
// in float32 (16-bit T) or T; so it is deterministic for any thread count and needs no atomics.
// No validation here (ops/pad/pad.cpp checks the modes' limits); zero sizes are tolerated.
#pragma once

#include <array>
#include <cstdint>

namespace tg::kernels {

enum class PadMode { Constant, Reflect, Replicate, Circular };

struct PadGeometry {
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1};      // D, H, W
  std::array<int64_t, 3> before{0, 0, 0};  // per dim, may be negative (a crop)
  std::array<int64_t, 3> after{0, 0, 0};
  int64_t out(int d) const { return in[d] + before[d] + after[d]; }
};

// T = float, double, BFloat16, Float16. mode != Constant.
// Overwrites y (P, Do, Ho, Wo).
template <class T>
void pad_forward(const T* x, T* y, const PadGeometry& g, PadMode mode);

// Overwrites grad_x (P, D, H, W) with the adjoint of pad_forward applied to grad_y.
template <class T>
void pad_backward(const T* grad_y, T* grad_x, const PadGeometry& g, PadMode mode);

}  // namespace tg::kernels

// The explicit instantiations, for pad_kernels.cpp (each instruction set's copy) and
// pad_dispatch.cpp (the entry points): one list of element types.
#define TG_PAD_INSTANTIATE(T)                                                    \
  template void pad_forward<T>(const T*, T*, const PadGeometry&, PadMode);     \
  template void pad_backward<T>(const T*, T*, const PadGeometry&, PadMode);
#define TG_PAD_INSTANTIATE_ALL \
  TG_PAD_INSTANTIATE(float)    \
  TG_PAD_INSTANTIATE(double)   \
  TG_PAD_INSTANTIATE(BFloat16) \
  TG_PAD_INSTANTIATE(Float16)
