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
// ComputeLocation). PyTorch 1.13 has two sets of these formulas, and Axis follows either:
//   Vectorised  the vectorised 2-D kernel (cpu/GridSamplerKernel.cpp), grid_sample 2-D;
//   Scalar      the scalar helpers of native/GridSampler.h, which its 3-D kernels use.
// They agree on every ordinary point but differ where it shows: the unnormalisation's
// rounding, where a NaN clips to (0 vs size - 1 in the forward; the scalar backward keeps
// it NaN, which then reads nothing), the fold of a huge coordinate under reflection (the
// scalar form counts the folds in an int, which saturates to INT_MIN, read as even) and
// nearest's rounding of a tie (nearbyint vs std::round, half away from zero).
// The arithmetic is written in the order PyTorch's kernels use, so that exactly
// representable cases (pixel centres, borders, half-pixels) land on exactly the same side
// of every floor, round and clip.
// ---------------------------------------------------------------------------------------
enum class AxisForm { Vectorised, Scalar };

template <class T, AxisForm F = AxisForm::Vectorised>
struct Axis {
  static constexpr bool kScalar = F == AxisForm::Scalar;
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
  // The scalar form is ((g + 1) / 2) * (size - 1) or ((g + 1) * size - 1) / 2, unfused.
  T unnormalize(T g) const {
    if constexpr (kScalar)
      return align_corners ? ((g + 1) / 2) * T(size - 1) : ((g + 1) * T(size) - 1) / 2;
    return align_corners ? (g + 1) * scale : std::fma(g + 1, scale, T(-0.5));
  }

  // Clip to [0, size - 1]. NaN clips to 0 (Vectorised) or to size - 1 (Scalar:
  // std::min(size - 1, std::max(x, 0))), as PyTorch's forwards do.
  T clip(T x) const {
    if constexpr (kScalar) {
      x = x < T(0) ? T(0) : x;
      return x < max_val ? x : max_val;
    }
    x = x > T(0) ? x : T(0);
    return x < max_val ? x : max_val;
  }

  // clip() and its derivative. The derivative is 0 on the boundary itself: a point
  // exactly on the border gets no gradient, as in PyTorch. The scalar form lets a NaN
  // through with derivative 1 (PyTorch's clip_coordinates_set_grad): its taps are then
  // all outside (floor_index), so it reads and receives nothing.
  T clip_grad(T x, T* d) const {
    if constexpr (kScalar) {
      *d = T(0);
      if (x <= T(0)) return T(0);
      if (x >= max_val) return max_val;
      *d = T(1);
      return x;
    }
    *d = (x > T(0) && x < max_val) ? T(1) : T(0);
    return clip(x);
  }

  // Scalar form: x folded by fmod into [0, span) and whether the number of folds is odd.
  // PyTorch counts the folds as static_cast<int>(floor(x / span)), which x86 saturates to
  // INT_MIN (even) for a NaN or a count beyond int's range.
  T fold(T a, bool* odd) const {
    const T span = twice_span / 2;
    const T q = std::floor(a / span);
    *odd = q >= T(-2147483648.0) && q < T(2147483648.0) && (static_cast<int64_t>(q) & 1) != 0;
    return std::fmod(a, span);
  }

  // Vectorised form: a (>= 0) less its whole periods, a - trunc(a / 2 span) 2 span as one fused
  // multiply-add, as PyTorch's AVX2 / AVX-512 kernels compute it (their compiler contracts the
  // product and the difference). Unfused, the product's rounding is the whole answer once a is
  // past the mantissa (float32 from ~1e6 periods): a reflected sample landed up to a pixel or two
  // away and its grid gradient changed sign. std::fma rounds once on every path, the portable
  // one included (a library call there).
  T fold_fused(T a) const { return std::fma(-std::trunc(a / twice_span), twice_span, a); }

  // Fold x into [low, low + span] by reflecting at both edges (then clipped by caller:
  // rounding can leave the fold a hair outside). NaN and Inf come out as NaN.
  T reflect(T x) const {
    if (empty) return T(0);
    if constexpr (kScalar) {
      bool odd;
      const T extra = fold(std::abs(x - low), &odd);
      return odd ? twice_span / 2 - extra + low : extra + low;
    }
    const T a = std::abs(x - low);
    const T extra = fold_fused(a);
    return std::min(extra, twice_span - extra) + low;
  }

  // reflect() and its derivative, +1 or -1 depending on the number of folds.
  T reflect_grad(T x, T* d) const {
    if (empty) {
      *d = T(0);
      return T(0);
    }
    if constexpr (kScalar) {
      T in = x - low;
      T sign = T(1);
      if (in < T(0)) {
        sign = T(-1);
        in = -in;
      }
      bool odd;
      const T extra = fold(in, &odd);
      *d = odd ? -sign : sign;
      return odd ? twice_span / 2 - extra + low : extra + low;
    }
    const T in = x - low;
    const bool negative = in < T(0);
    const T a = std::abs(in);
    const T extra = fold_fused(a);
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

  // Nearest's rounding: half to even (Vectorised, nearbyint in the default rounding mode) or
  // half away from zero (Scalar, std::round).
  T round(T x) const {
    if constexpr (kScalar) return std::round(x);
    return std::nearbyint(x);
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

// Trilinear taps of one 3-D point, as PyTorch's 3-D kernels find them (the scalar Axis form),
// shared by the first-order sampler (grid_sample3d_kernels.cpp) and the second-order terms
// (grid_sample_kernels_double_backward.cpp) so that both take exactly the same taps.
// Tap k = 4 dz + 2 dy + dx in PyTorch's order tnw, tne, tsw, tse, bnw, bne, bsw, bse (top =
// smaller z, north = smaller y, west = smaller x); its weight is w[dx][0] * w[dy][1] * w[dz][2]
// with w[0][i] = i1 - c_i and w[1][i] = c_i - i0 (PyTorch's products, in its order).
template <class T>
struct TrilinearPoint {
  T w[2][3];       // per axis: weight of the lower and of the upper neighbour
  T m[3];          // d source / d grid (backward only)
  int64_t off[8];  // plane offset of each tap, -1 = outside
  int64_t base;    // offset of tap 0 when all 8 are inside, else -1

  // g: the point (x, y, z); axes: W, H, D. `backward` locates it as PyTorch's backward does
  // (source_grad: in the scalar form a NaN stays NaN there). Even border and reflection can then
  // leave a coordinate outside: floor_index says -2 when both neighbours along an axis are, and
  // then all 8 taps are, as PyTorch's bounds checks find. Such a point reads and receives
  // nothing; its weights are 0 rather than computed from a NaN or huge coordinate.
  template <class G>
  void locate(const Axis<T, AxisForm::Scalar>* const axes[3], const G* g, bool backward, int64_t W, int64_t HW) {
    // Written with & and selects rather than && and ifs: which points straddle a border is
    // random, and the branches mispredicted often enough to dominate this function.
    int64_t idx[3];
    bool inside = true, in_axis[3][2];  // in_axis[i][d]: neighbour d along axis i is inside
    for (int i = 0; i < 3; ++i) {
      const T c = backward ? axes[i]->source_grad(load_op(g, i), &m[i]) : axes[i]->source(load_op(g, i));
      const T f = std::floor(c);
      const bool ok = (f >= T(-1)) & (f <= axes[i]->max_val);  // else both neighbours are outside
      idx[i] = ok ? static_cast<int64_t>(ok ? f : T(0)) : -2;  // axes[i]->floor_index(f), no branch
      inside &= ok;
      in_axis[i][0] = ok & (idx[i] >= 0);
      in_axis[i][1] = ok & (idx[i] + 1 < axes[i]->size);
      w[0][i] = ok ? (f + 1) - c : T(0);
      w[1][i] = ok ? c - f : T(0);
    }
    bool all = inside;
    const int64_t b = inside ? idx[2] * HW + idx[1] * W + idx[0] : 0;
    for (int k = 0; k < 8; ++k) {
      const int dx = k & 1, dy = (k >> 1) & 1, dz = k >> 2;
      const bool in = in_axis[0][dx] & in_axis[1][dy] & in_axis[2][dz];
      all &= in;
      off[k] = in ? b + dz * HW + dy * W + dx : -1;
    }
    base = all ? b : -1;
    if (!inside)
      for (int i = 0; i < 3; ++i) w[0][i] = w[1][i] = T(0);
  }

  T weight(int k) const { return w[k & 1][0] * w[(k >> 1) & 1][1] * w[k >> 2][2]; }
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
