// The drivers of the grid_sample kernels, generic over the sampler and the number of spatial
// dimensions (grid_sample_kernels.cpp, 2-D; grid_sample3d_kernels.cpp, 3-D): how the work is cut
// among threads without atomics (the comment at the top of grid_sample_kernels.cpp), the 16-bit
// staging buffers (and when a sampler reads bfloat16 in place instead), and affine_grid's base
// coordinates. Only the kernel files include this; it
// is not installed.
//
// A sampler (one per interpolation mode and rank; nearest's, the same for both ranks, is below)
// offers
//   Sampler(extent, P, padding, align_corners)   P = the channel stride of output / grad_output
//   kCoords (2 or 3, grid values per position), kTaps (reads per position), kHasGridGrad
//   prepare / sample<K> / backward<K, kInput, kGrid> / clear_sums / finish
// as described at the samplers in grid_sample_kernels.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../../framework/parallel.h"
#include "grid_sample_kernels_shared.h"

namespace tg::kernels::TG_ISA_NS::gs_detail {

// The spatial size of one input plane: D = 1 for 2-D.
struct Extent {
  int64_t D, H, W;
  int64_t plane() const { return D * H * W; }
};

// Nearest, for R = 2 or 3 grid coordinates (the coordinate maths of the rank: Axis's
// Vectorised form for 2-D, Scalar for 3-D, as PyTorch's kernels; see Axis).
template <class TS, class Idx, int R>
struct NearestSampler {
  using T = opmath_t<TS>;
  static constexpr bool kHasGridGrad = false;  // piecewise constant in the grid
  static constexpr int kCoords = R;
  static constexpr int kTaps = 1;
  static constexpr AxisForm kForm = R == 3 ? AxisForm::Scalar : AxisForm::Vectorised;

  Axis<T, kForm> ax, ay, az;  // az: depth 1 in 2-D, unused
  int64_t W, HW, P;           // HW: the whole plane (D * H * W)
  std::vector<Idx> off;       // [B] offset of the nearest pixel, -1 = outside

  NearestSampler(const Extent& e, int64_t P_, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), az(e.D, padding, align_corners),
        W(e.W), HW(e.plane()), P(P_), off(kBlock) {}

  // The scalar form's backward locates the point through source_grad, as PyTorch's 3-D backward
  // does: a NaN that the forward clipped onto the last voxel stays NaN there and receives
  // nothing. (In the vectorised form the two agree.)
  template <class G>
  void prepare(const G* grid, int64_t len, bool backward) {
    const Axis<T, kForm>* const axes[3] = {&ax, &ay, &az};
    for (int64_t p = 0; p < len; ++p) {
      int64_t i[3] = {0, 0, 0};
      for (int k = 0; k < R; ++k) {
        const T g = load_op(grid, R * p + k);
        T d;
        const T c = backward && kForm == AxisForm::Scalar ? axes[k]->source_grad(g, &d) : axes[k]->source(g);
        i[k] = axes[k]->index(axes[k]->round(c));
      }
      off[p] = Idx(i[0] >= 0 && i[1] >= 0 && i[2] >= 0 ? (i[2] * ay.size + i[1]) * W + i[0] : -1);
    }
  }

  template <int K>
  void sample(const TS* in, TS* out, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      const Idx o = off[p];
      for (int k = 0; k < K; ++k) store_op(out, k * P + p, tap_value(in + k * HW, o));
    }
  }

  template <int K, bool kInput, bool kGrid>
  void backward(const TS* /*in*/, const TS* gout, T* gin, int64_t len) {
    if constexpr (kInput) {
      for (int64_t p = 0; p < len; ++p) {
        const Idx o = off[p];
        if (o >= 0)
          for (int k = 0; k < K; ++k) gin[k * HW + o] += load_op(gout, k * P + p);
      }
    }
  }

  void clear_sums(int64_t) {}
  template <class G>
  void finish(G* grad_grid, int64_t len) const {
    std::fill(grad_grid, grad_grid + R * len, G(T(0)));
  }
};

// Where a work item sums its grad_input planes (n planes from dst on, zeroed first): dst itself
// for float and double; for the 16-bit types a float32 buffer of the thread's, rounded into
// dst once the item has summed everything (end()), so each element is rounded once.
template <class T>
class PlaneSums {
 public:
  using M = opmath_t<T>;
  M* begin(T* dst, int64_t n) {
    dst_ = dst;
    n_ = n;
    if constexpr (std::is_same_v<T, M>) {
      std::fill(dst, dst + n, M(0));
      return dst;
    } else {
      if (static_cast<int64_t>(buf_.size()) < n) buf_.resize(n);
      std::fill(buf_.begin(), buf_.begin() + n, M(0));
      return buf_.data();
    }
  }
  void end() {
    if constexpr (!std::is_same_v<T, M>) store_row(buf_.data(), n_, dst_);
  }

 private:
  T* dst_ = nullptr;
  int64_t n_ = 0;
  std::vector<M> buf_;
};

// A thread's float32 copies of 16-bit data for the samplers (which run in the arithmetic type):
// k whole input planes, and k rows of len values (grad_output, or output before rounding)
// kBlock apart, which is then the samplers' channel stride P. Widening a plane once per block
// of positions costs far less than widening each of its values at every tap that reads it.
template <class TS>
class Widened {
 public:
  using M = opmath_t<TS>;
  const M* planes(const TS* src, int k, int64_t HW) {
    if (static_cast<int64_t>(planes_.size()) < k * HW) planes_.resize(k * HW);
    for (int j = 0; j < k; ++j) load_row(src + j * HW, HW, planes_.data() + j * HW);
    return planes_.data();
  }
  M* rows(int k) {
    if (static_cast<int64_t>(rows_.size()) < k * kBlock) rows_.resize(k * kBlock);
    return rows_.data();
  }
  // k rows of len values, `stride` apart in src.
  const M* rows_from(const TS* src, int k, int64_t stride, int64_t len) {
    M* r = rows(k);
    for (int j = 0; j < k; ++j) load_row(src + j * stride, len, r + j * kBlock);
    return r;
  }
  // Rounds k rows of rows(k) into dst, `stride` apart.
  void store_rows(int k, int64_t len, TS* dst, int64_t stride) const {
    for (int j = 0; j < k; ++j) store_row(rows_.data() + j * kBlock, len, dst + j * stride);
  }

 private:
  std::vector<M> planes_, rows_;
};

// Calls step(K, c) over the channels [c0, c1), two at a time and the odd one alone,
// with K a std::integral_constant.
template <class Step>
void for_channels(int64_t c0, int64_t c1, Step&& step) {
  int64_t c = c0;
  for (; c + 1 < c1; c += 2) step(std::integral_constant<int, 2>(), c);
  if (c < c1) step(std::integral_constant<int, 1>(), c);
}

// Whether Sampler reads bfloat16 planes in place (sample_bf16, pair_taps) rather than through
// Widened's float32 copies.
template <class Sampler, class = void>
struct ReadsBFloat16 : std::false_type {};
template <class Sampler>
struct ReadsBFloat16<Sampler, std::void_t<decltype(Sampler::kReadsBFloat16)>>
    : std::bool_constant<Sampler::kReadsBFloat16> {};

// The tables such a sampler reads them through (Sampler::Pairs), for bfloat16 tensors only.
template <class Sampler, class T, bool = std::is_same_v<T, BFloat16> && ReadsBFloat16<Sampler>::value>
struct PairsFor {
  struct type {};
};
template <class Sampler, class T>
struct PairsFor<Sampler, T, true> {
  using type = typename Sampler::Pairs;
};

template <class Sampler, class T>
void forward_impl(const T* input, const T* grid, T* output, int64_t N, int64_t C, const Extent& e,
                  int64_t P, GridSamplePadding padding, bool align_corners) {
  const int64_t nb = ceil_div(P, kBlock);
  const int64_t items = N * nb;
  const int64_t HW = e.plane();
  constexpr int64_t kCoords = Sampler::kCoords;
  const bool parallel = items > 1 && N * C * P * Sampler::kTaps >= kParallelWork;
  constexpr bool kNative = std::is_same_v<T, typename Sampler::T>;  // else 16-bit, widened
  // bfloat16 read in place (see the sampler) when a plane holds a 32-bit word (HW >= 2). The
  // float32 code is left exactly as it was: no variable of the bfloat16 path reaches it.
  constexpr bool kInPlace = std::is_same_v<T, BFloat16> && ReadsBFloat16<Sampler>::value;
  // Items are coarse (a block times all channels), so handing them out dynamically costs
  // nothing and keeps both cores busy when one thread gets descheduled.
#pragma omp parallel if (parallel)
  {
    Sampler s(e, kNative || (kInPlace && HW >= 2) ? P : kBlock, padding, align_corners);
    Widened<T> wide;
    typename PairsFor<Sampler, T>::type pairs;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / nb, p0 = (it % nb) * kBlock;
      const int64_t len = std::min(kBlock, P - p0);
      s.prepare(grid + (n * P + p0) * kCoords, len, false);
      if constexpr (kInPlace) {
        if (HW >= 2) s.pair_taps(len, pairs);
      }
      for_channels(0, C, [&](auto K, int64_t c) {
        constexpr int k = decltype(K)::value;
        const T* in = input + (n * C + c) * HW;
        T* out = output + (n * C + c) * P + p0;
        if constexpr (kNative) {
          s.template sample<k>(in, out, len);
        } else if (kInPlace && HW >= 2) {
          if constexpr (kInPlace) s.template sample_bf16<k>(pairs, in, out, len);
        } else {
          s.template sample<k>(wide.planes(in, k, HW), wide.rows(k), len);
          wide.store_rows(k, len, out, P);
        }
      });
    }
  }
}

template <class Sampler, class T>
void backward_impl(const T* grad_output, const T* input, const T* grid, T* grad_input,
                   T* grad_grid, int64_t N, int64_t C, const Extent& e, int64_t P,
                   GridSamplePadding padding, bool align_corners) {
  const int64_t nb = ceil_div(P, kBlock);
  const int64_t HW = e.plane();
  constexpr int64_t kCoords = Sampler::kCoords;
  const bool need_input = grad_input != nullptr;
  const bool need_grid = grad_grid != nullptr;
  const bool parallel = N * C * P * Sampler::kTaps >= kParallelWork;
  using M = typename Sampler::T;  // the arithmetic type, in which grad_input is summed
  constexpr bool kNative = std::is_same_v<T, M>;  // else 16-bit: widened for the sampler
  const int64_t threads = parallel ? max_threads() : 1;
  // bfloat16 planes read in place by the grid gradient (see the sampler; HW >= 2, as in the
  // forward); grad_output is still widened a block row at a time, which also feeds the
  // grad_input scatter. As in the forward, the float32 code is left exactly as it was.
  constexpr bool kInPlace = std::is_same_v<T, BFloat16> && ReadsBFloat16<Sampler>::value;

  // The grid gradient of one block of sample n: channels summed in order 0..C-1.
  using Pairs = typename PairsFor<Sampler, T>::type;
  auto grid_block = [&](Sampler& s, Widened<T>& wide, Pairs& pairs, int64_t n, int64_t b) {
    const int64_t p0 = b * kBlock, len = std::min(kBlock, P - p0);
    if (Sampler::kHasGridGrad) {
      s.prepare(grid + (n * P + p0) * kCoords, len, true);
      if constexpr (kInPlace) {
        if (HW >= 2) s.pair_taps(len, pairs);
      }
      s.clear_sums(len);
      for_channels(0, C, [&](auto K, int64_t c) {
        constexpr int k = decltype(K)::value;
        const T* in = input + (n * C + c) * HW;
        const T* go = grad_output + (n * C + c) * P + p0;
        if constexpr (kNative) {
          s.template backward<k, false, true>(in, go, nullptr, len);
        } else if (kInPlace && HW >= 2) {
          if constexpr (kInPlace) s.template grid_grad_bf16<k>(pairs, in, wide.rows_from(go, k, P, len), len);
        } else {
          s.template backward<k, false, true>(wide.planes(in, k, HW), wide.rows_from(go, k, P, len),
                                              nullptr, len);
        }
      });
    }
    s.finish(grad_grid + (n * P + p0) * kCoords, len);
  };
  // grad_input of sample n, channels [c0, c1): positions in order 0..P-1.
  auto input_planes = [&](Sampler& s, PlaneSums<T>& sums, Widened<T>& wide, int64_t n, int64_t c0,
                          int64_t c1) {
    M* gin = sums.begin(grad_input + (n * C + c0) * HW, (c1 - c0) * HW);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t p0 = b * kBlock, len = std::min(kBlock, P - p0);
      s.prepare(grid + (n * P + p0) * kCoords, len, true);
      for_channels(c0, c1, [&](auto K, int64_t c) {
        constexpr int k = decltype(K)::value;
        const T* go = grad_output + (n * C + c) * P + p0;
        if constexpr (kNative)
          s.template backward<k, true, false>(nullptr, go, gin + (c - c0) * HW, len);
        else
          s.template backward<k, true, false>(nullptr, wide.rows_from(go, k, P, len),
                                              gin + (c - c0) * HW, len);
      });
    }
    sums.end();
  };

  const bool fused = need_input && need_grid && Sampler::kHasGridGrad &&
                     (N % threads == 0 || N >= 4 * threads);
  if (fused) {
    // Same additions in the same order as input_planes + grid_block, in one pass.
#pragma omp parallel if (parallel && N > 1)
    {
      Sampler s(e, kNative ? P : kBlock, padding, align_corners);
      PlaneSums<T> sums;
      Widened<T> wide;
      Pairs pairs;
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < N; ++n) {
        M* gin = sums.begin(grad_input + n * C * HW, C * HW);
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t p0 = b * kBlock, len = std::min(kBlock, P - p0);
          s.prepare(grid + (n * P + p0) * kCoords, len, true);
          if constexpr (kInPlace) {
            if (HW >= 2) s.pair_taps(len, pairs);
          }
          s.clear_sums(len);
          for_channels(0, C, [&](auto K, int64_t c) {
            constexpr int k = decltype(K)::value;
            const T* in = input + (n * C + c) * HW;
            const T* go = grad_output + (n * C + c) * P + p0;
            if constexpr (kNative) {
              s.template backward<k, true, true>(in, go, gin + c * HW, len);
            } else if (kInPlace && HW >= 2) {  // the two gradients are independent: one after the other
              const M* rows = wide.rows_from(go, k, P, len);
              s.template backward<k, true, false>(nullptr, rows, gin + c * HW, len);
              if constexpr (kInPlace) s.template grid_grad_bf16<k>(pairs, in, rows, len);
            } else {
              s.template backward<k, true, true>(wide.planes(in, k, HW), wide.rows_from(go, k, P, len),
                                                 gin + c * HW, len);
            }
          });
          s.finish(grad_grid + (n * P + p0) * kCoords, len);
        }
        sums.end();
      }
    }
    return;
  }

  // Split passes. Channel ranges per sample for grad_input: enough for every thread.
  const int64_t kc = need_input ? std::max<int64_t>(1, std::min(C, ceil_div(threads, N))) : 0;
  const int64_t input_items = need_input ? N * kc : 0;
  const int64_t grid_items = need_grid ? N * nb : 0;
  const int64_t items = input_items + grid_items;
  // The grad_input items are the long ones: they come first and are handed out
  // dynamically, the grid blocks fill in around them.
#pragma omp parallel if (parallel && items > 1)
  {
    Sampler s(e, kNative ? P : kBlock, padding, align_corners);
    PlaneSums<T> sums;
    Widened<T> wide;
    Pairs pairs;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      if (it < input_items) {
        const int64_t n = it / kc, k = it % kc;
        input_planes(s, sums, wide, n, C * k / kc, C * (k + 1) / kc);
      } else {
        const int64_t j = it - input_items;
        grid_block(s, wide, pairs, j / nb, j % nb);
      }
    }
  }
}

// The samplers' offsets are int32_t when a plane has fewer than 2^31 elements (half the table).
template <template <class, class> class Sampler, class T>
void dispatch_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C, const Extent& e,
                      int64_t P, GridSamplePadding padding, bool align_corners) {
  if (e.plane() <= std::numeric_limits<int32_t>::max())
    forward_impl<Sampler<opmath_t<T>, int32_t>>(input, grid, output, N, C, e, P, padding, align_corners);
  else
    forward_impl<Sampler<opmath_t<T>, int64_t>>(input, grid, output, N, C, e, P, padding, align_corners);
}

template <template <class, class> class Sampler, class T>
void dispatch_backward(const T* grad_output, const T* input, const T* grid, T* grad_input,
                       T* grad_grid, int64_t N, int64_t C, const Extent& e, int64_t P,
                       GridSamplePadding padding, bool align_corners) {
  if (e.plane() <= std::numeric_limits<int32_t>::max())
    backward_impl<Sampler<opmath_t<T>, int32_t>>(grad_output, input, grid, grad_input, grad_grid, N, C,
                                                 e, P, padding, align_corners);
  else
    backward_impl<Sampler<opmath_t<T>, int64_t>>(grad_output, input, grid, grad_input, grad_grid, N, C,
                                                 e, P, padding, align_corners);
}

// PyTorch's linspace_from_neg_one: torch.linspace(-1, 1, steps) (both halves anchored at
// their own end), times (steps - 1) / steps when !align_corners; 0 for a single step.
template <class T>
std::vector<T> linspace_from_neg_one(int64_t steps, bool align_corners) {
  std::vector<T> v(std::max<int64_t>(steps, 0));
  if (steps == 1) v[0] = T(0);
  if (steps <= 1) return v;
  const T step = T(2) / T(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    v[i] = i < halfway ? T(-1) + step * T(i) : T(1) - step * T(steps - i - 1);
    if (!align_corners) v[i] = v[i] * T(steps - 1) / T(steps);
  }
  return v;
}

}  // namespace tg::kernels::TG_ISA_NS::gs_detail
