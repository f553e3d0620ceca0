// What the grid_sample kernels share (grid_sample_kernels.cpp, the first-order forward and
// backward; grid_sample_kernels_double_backward.cpp, the second-order terms): the accumulation type,
// the block and parallel thresholds, one axis's unnormalisation and padding (Axis), the
// masked tap read and the cubic convolution coefficients. Only those two files include this;
// it is not installed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../grid_sample_kernels.h"
#include "../../internal/half_access.h"
#include "../../internal/isa_dispatch.h"

// The arithmetic below must be compiled the same way in every file that includes it (a
// coordinate computed one ulp differently can land on another pixel; see the pragma's
// comment in grid_sample_kernels.cpp): no implicit FMA contraction, no auto-vectorisation.
// Like any file-scope pragma it holds for the rest of the including file too, which both
// includers want.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#endif

namespace tg::kernels::TG_ISA_NS::gs_detail {

// Long sums (the grid gradient over channels, grad_theta over positions) of float data
// are accumulated in double.
template <class T>
struct AccType { using type = T; };
template <>
struct AccType<float> { using type = double; };
template <class T>
using acc_t = typename AccType<T>::type;

// Output positions per block. The tap table of a block (7 numbers per position for the
// bilinear fast path, 1 for nearest, 25 for bicubic) is reread once per channel and
// should stay in L2; larger blocks mean fewer sweeps over the input planes.
constexpr int64_t kBlock = 2048;

// Below this many tap reads an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = int64_t(1) << 16;

// ---------------------------------------------------------------------------------------
// One spatial axis: from a grid value to a source-pixel coordinate (PyTorch's
// ComputeLocation). The arithmetic is written in the order PyTorch's vectorised kernel
// uses, so that exactly representable cases (pixel centres, borders, half-pixels) land
// on exactly the same side of every floor, round and clip.
// ---------------------------------------------------------------------------------------
template <class T>
struct Axis {
  int64_t size;
  GridSamplePadding padding;
  bool align_corners;
  T scale;       // d(source coordinate) / d(grid value)
  T max_val;     // clip limit: size - 1
  T low;         // lower reflection edge: 0 (align_corners) or -1/2
  T twice_span;  // reflection period
  bool empty;    // align_corners with one pixel: every coordinate reflects to 0

  Axis(int64_t size_, GridSamplePadding padding_, bool align_corners_)
      : size(size_),
        padding(padding_),
        align_corners(align_corners_),
        scale(align_corners_ ? T(size_ - 1) / 2 : T(size_) / 2),
        max_val(T(size_ - 1)),
        low(align_corners_ ? T(0) : T(-0.5)),
        twice_span(align_corners_ ? T(size_ - 1) * 2 : T(size_) * 2),
        empty(align_corners_ ? size_ <= 1 : size_ <= 0) {}

  // [-1, 1] -> [0, size - 1] (align_corners) or [-1/2, size - 1/2]. PyTorch computes
  // (g + 1) * scale - 1/2 and its compiler fuses it into one FMA: measured against
  // torch 1.13, the fused form picks the same pixel on every tested pixel centre, the
  // unfused one misses about 1.5% of them (e.g. g = 3/11 - 1, W = 11 rounds to 1.0
  // unfused but 0.99999999999999989 fused).
  T unnormalize(T g) const {
    return align_corners ? (g + 1) * scale : std::fma(g + 1, scale, T(-0.5));
  }

  // Clip to [0, size - 1]. Written so that NaN clips to 0, as PyTorch's forward does
  // (std::max would let it through and the index would be garbage).
  T clip(T x) const {
    x = x > T(0) ? x : T(0);
    return x < max_val ? x : max_val;
  }

  // clip() and its derivative. The derivative is 0 on the boundary itself: a point
  // exactly on the border gets no gradient, as in PyTorch.
  T clip_grad(T x, T* d) const {
    *d = (x > T(0) && x < max_val) ? T(1) : T(0);
    return clip(x);
  }

  // Fold x into [low, low + span] by reflecting at both edges (then clipped by caller:
  // rounding can leave the fold a hair outside). NaN and Inf come out as NaN.
  T reflect(T x) const {
    if (empty) return T(0);
    const T a = std::abs(x - low);
    const T extra = a - std::trunc(a / twice_span) * twice_span;
    return std::min(extra, twice_span - extra) + low;
  }

  // reflect() and its derivative, +1 or -1 depending on the number of folds.
  T reflect_grad(T x, T* d) const {
    if (empty) {
      *d = T(0);
      return T(0);
    }
    const T in = x - low;
    const bool negative = in < T(0);
    const T a = std::abs(in);
    const T extra = a - std::trunc(a / twice_span) * twice_span;
    const T reflected = twice_span - extra;
    const bool one_more_flip = extra > reflected;
    *d = (one_more_flip != negative) ? T(-1) : T(1);
    return (one_more_flip ? reflected : extra) + low;
  }

  // Padding applied to a coordinate: to the sample point (bilinear, nearest) or to each
  // tap (bicubic). With border and reflection the result is always in [0, size - 1].
  T pad(T x) const {
    switch (padding) {
      case GridSamplePadding::Border: return clip(x);
      case GridSamplePadding::Reflection: return clip(reflect(x));
      default: return x;
    }
  }

  // Source coordinate of a grid value, padding included (bilinear, nearest).
  T source(T g) const { return pad(unnormalize(g)); }

  // source() and d source / d g. A NaN that clipping turned into 0 has derivative 0.
  T source_grad(T g, T* d) const {
    T x = unnormalize(g);
    if (padding == GridSamplePadding::Zeros) {
      *d = scale;
      return x;
    }
    T d_refl = T(1), d_clip;
    if (padding == GridSamplePadding::Reflection) x = reflect_grad(x, &d_refl);
    x = clip_grad(x, &d_clip);
    *d = d_clip != T(0) ? d_refl * scale : T(0);
    return x;
  }

  // Index of an integral-valued coordinate, or -1 when it is outside the image (NaN and
  // infinities included). Never converts an out-of-range float to an integer.
  int64_t index(T v) const { return (v >= T(0) && v < T(size)) ? int64_t(v) : -1; }

  // Index of floor(x) for bilinear, where both floor(x) and floor(x) + 1 are used:
  // anything outside [-1, size - 1] gives -2 so that both taps read as outside.
  int64_t floor_index(T xf) const {
    return (xf >= T(-1) && xf <= max_val) ? int64_t(xf) : -2;
  }
};

// Masked read: a tap outside the image reads 0 (and is never dereferenced). A 16-bit plane's
// value is widened to float (load_op).
template <class T, class Idx>
inline opmath_t<T> tap_value(const T* plane, Idx off) {
  return off >= 0 ? load_op(plane, off) : opmath_t<T>(0);
}

// Cubic convolution (Keys) with A = -0.75, as PyTorch's grid_sample and upsample_bicubic2d.
// c[k] weighs the tap at floor(x) - 1 + k, for t = x - floor(x) in [0, 1).
template <class T>
inline void cubic_coefficients(T t, T c[4]) {
  const T A = T(-0.75);
  T x = t + T(1);  // distance to tap 0, in [1, 2)
  c[0] = ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A;
  x = t;  // distance to tap 1, in [0, 1)
  c[1] = ((A + T(2)) * x - (A + T(3))) * x * x + T(1);
  x = T(1) - t;  // distance to tap 2
  c[2] = ((A + T(2)) * x - (A + T(3))) * x * x + T(1);
  x = T(2) - t;  // distance to tap 3
  c[3] = ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A;
}

// -d c[k] / d t, in PyTorch's form (the backward subtracts it).
template <class T>
inline void cubic_coefficients_grad(T t, T c[4]) {
  const T A = T(-0.75);
  T x = T(-1) - t;
  c[0] = (T(-3) * A * x - T(10) * A) * x - T(8) * A;
  x = T(0) - t;
  c[1] = (T(-3) * (A + T(2)) * x - T(2) * (A + T(3))) * x;
  x = T(1) - t;
  c[2] = (T(3) * (A + T(2)) * x - T(2) * (A + T(3))) * x;
  x = T(2) - t;
  c[3] = (T(3) * A * x - T(10) * A) * x + T(8) * A;
}

}  // namespace tg::kernels::TG_ISA_NS::gs_detail
