// grid_sample (3-D) and affine_grid (3-D) kernels. Semantics and shape legend: see
// grid_sample_kernels.h. The work is organised as for the 2-D kernels (the drivers in
// internal/grid_sample_drivers.h and the comment at the top of grid_sample_kernels.cpp: tap
// tables per block of positions, contiguous channel loops, no atomics, the same bits for any
// thread count); this file holds the two 3-D samplers and the entry points.
//
// The coordinate maths is PyTorch 1.13's scalar form (Axis<T, AxisForm::Scalar>), the one its
// 3-D CPU kernels (native/GridSampler.cpp) use, not the vectorised form of its 2-D kernel.
#include "grid_sample_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"
#include "internal/grid_sample_drivers.h"

// Same compiler settings as grid_sample_kernels.cpp (the shared header sets them again for
// every includer): no FMA contraction, no auto-vectorisation.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#endif

namespace tg::kernels::TG_ISA_NS {
namespace {

using namespace gs_detail;  // Axis, tap_value, kBlock, acc_t, Extent, the drivers

template <class T>
using Axis3 = Axis<T, AxisForm::Scalar>;

// Trilinear: the 2x2x2 neighbourhood of the sample point (TrilinearPoint, shared with the
// second-order kernel, has the taps' order and weights).
template <class TS, class Idx>
struct TrilinearSampler {
  using T = opmath_t<TS>;
  static constexpr bool kHasGridGrad = true;
  static constexpr int kCoords = 3;
  static constexpr int kTaps = 8;
  using Acc = acc_t<T>;
  // The tables are [tap][position] with rows kStride apart, not kBlock: rows 8 KB apart all map
  // to the same L1 sets, and the 8 weight rows plus the 8 offset rows outnumber the ways (the
  // table writes then took a third of the forward; 64 bytes of skew per row put each in a set
  // of its own).
  static constexpr int64_t kStride = kBlock + 16;

  Axis3<T> ax, ay, az;
  int64_t W, HW, DHW, P;
  std::vector<Idx> base;  // [B] offset of tnw if all 8 taps are inside, else -1
  std::vector<Idx> off;   // [8][B] offset of each tap, -1 = outside (used when base < 0)
  std::vector<T> wt;      // [8][B] interpolation weights
  std::vector<T> fr;      // [6][B] (x1 - x, x - x0, y1 - y, y - y0, z1 - z, z - z0) (backward)
  std::vector<T> mult;    // [3][B] d source / d grid (backward)
  std::vector<Acc> gs;    // [3][B] grid-gradient sums (backward)

  TrilinearSampler(const Extent& e, int64_t P_, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), az(e.D, padding, align_corners),
        W(e.W), HW(e.H * e.W), DHW(e.plane()), P(P_), base(kBlock), off(8 * kStride),
        wt(8 * kStride) {}

  template <class G>
  void prepare(const G* grid, int64_t len, bool backward) {
    if (backward && fr.empty()) {
      fr.resize(6 * kStride);
      mult.resize(3 * kStride);
      gs.resize(3 * kStride);
    }
    const Axis3<T>* const axes[3] = {&ax, &ay, &az};
    for (int64_t p = 0; p < len; ++p) {
      TrilinearPoint<T> pt;
      pt.locate(axes, grid + 3 * p, backward, W, HW);
      base[p] = Idx(pt.base);
      for (int k = 0; k < 8; ++k) {
        off[k * kStride + p] = Idx(pt.off[k]);
        wt[k * kStride + p] = pt.weight(k);
      }
      if (backward)
        for (int i = 0; i < 3; ++i) {
          mult[i * kStride + p] = pt.m[i];
          fr[(2 * i) * kStride + p] = pt.w[0][i];
          fr[(2 * i + 1) * kStride + p] = pt.w[1][i];
        }
    }
  }

  // The 2x2x2 neighbourhood of position p, base b, in one plane, in tap order.
  void load(const TS* plane, Idx b, int64_t p, T v[8]) const {
    if (b >= 0) {
      const TS* r = plane + b;
      v[0] = load_op(r, 0);
      v[1] = load_op(r, 1);
      v[2] = load_op(r, W);
      v[3] = load_op(r, W + 1);
      v[4] = load_op(r, HW);
      v[5] = load_op(r, HW + 1);
      v[6] = load_op(r, HW + W);
      v[7] = load_op(r, HW + W + 1);
    } else {
      for (int k = 0; k < 8; ++k) v[k] = tap_value(plane, off[k * kStride + p]);
    }
  }

  template <int K>
  void sample(const TS* in, TS* out, int64_t len) const {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      T w[8];
      for (int t = 0; t < 8; ++t) w[t] = wt[t * kStride + p];
      for (int k = 0; k < K; ++k) {
        T v[8];
        load(in + k * DHW, b, p, v);
        store_op(out, k * P + p,
                 v[0] * w[0] + v[1] * w[1] + v[2] * w[2] + v[3] * w[3] + v[4] * w[4] + v[5] * w[5] +
                     v[6] * w[6] + v[7] * w[7]);
      }
    }
  }

  template <int K, bool kInput, bool kGrid>
  void backward(const TS* in, const TS* gout, T* gin, int64_t len) {
    for (int64_t p = 0; p < len; ++p) {
      const Idx b = base[p];
      T w[8];
      for (int t = 0; t < 8; ++t) w[t] = wt[t * kStride + p];
      // d out / d x weighs the x-differences of the 4 (y, z) edges by their (y, z) weights,
      // and likewise for y and z.
      T wyz[4], wxz[4], wxy[4];
      if constexpr (kGrid) {
        const T* f = &fr[p];
        const T x0 = f[0], x1 = f[kStride], y0 = f[2 * kStride], y1 = f[3 * kStride], z0 = f[4 * kStride],
                z1 = f[5 * kStride];
        wyz[0] = y0 * z0, wyz[1] = y1 * z0, wyz[2] = y0 * z1, wyz[3] = y1 * z1;
        wxz[0] = x0 * z0, wxz[1] = x1 * z0, wxz[2] = x0 * z1, wxz[3] = x1 * z1;
        wxy[0] = x0 * y0, wxy[1] = x1 * y0, wxy[2] = x0 * y1, wxy[3] = x1 * y1;
      }
      Acc sx = kGrid ? gs[p] : Acc(0), sy = kGrid ? gs[kStride + p] : Acc(0),
          sz = kGrid ? gs[2 * kStride + p] : Acc(0);
      for (int k = 0; k < K; ++k) {
        const T g = load_op(gout, k * P + p);
        if constexpr (kInput) {  // the transpose of sample(): scatter g times the weights
          T* plane = gin + k * DHW;
          if (b >= 0) {
            T* r = plane + b;
            r[0] += w[0] * g;
            r[1] += w[1] * g;
            r[W] += w[2] * g;
            r[W + 1] += w[3] * g;
            r[HW] += w[4] * g;
            r[HW + 1] += w[5] * g;
            r[HW + W] += w[6] * g;
            r[HW + W + 1] += w[7] * g;
          } else {
            for (int t = 0; t < 8; ++t) {
              const Idx o = off[t * kStride + p];
              if (o >= 0) plane[o] += w[t] * g;
            }
          }
        }
        if constexpr (kGrid) {
          T v[8];
          load(in + k * DHW, b, p, v);
          sx += Acc(((v[1] - v[0]) * wyz[0] + (v[3] - v[2]) * wyz[1] + (v[5] - v[4]) * wyz[2] +
                     (v[7] - v[6]) * wyz[3]) * g);
          sy += Acc(((v[2] - v[0]) * wxz[0] + (v[3] - v[1]) * wxz[1] + (v[6] - v[4]) * wxz[2] +
                     (v[7] - v[5]) * wxz[3]) * g);
          sz += Acc(((v[4] - v[0]) * wxy[0] + (v[5] - v[1]) * wxy[1] + (v[6] - v[2]) * wxy[2] +
                     (v[7] - v[3]) * wxy[3]) * g);
        }
      }
      if constexpr (kGrid) {
        gs[p] = sx;
        gs[kStride + p] = sy;
        gs[2 * kStride + p] = sz;
      }
    }
  }

  void clear_sums(int64_t len) {
    for (int i = 0; i < 3; ++i) std::fill(gs.begin() + i * kStride, gs.begin() + i * kStride + len, Acc(0));
  }

  template <class G>
  void finish(G* grad_grid, int64_t len) const {
    for (int64_t p = 0; p < len; ++p)
      for (int i = 0; i < 3; ++i)
        store_op(grad_grid, 3 * p + i, T(gs[i * kStride + p] * Acc(mult[i * kStride + p])));
  }
};

template <class TS, class Idx>
using Nearest3dSampler = NearestSampler<TS, Idx, 3>;  // internal/grid_sample_drivers.h

}  // namespace

template <class T>
void grid_sample_3d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C, int64_t D,
                            int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners) {
  const int64_t P = Do * Ho * Wo;
  if (N * C * P == 0) return;
  const Extent e{D, H, W};
  if (e.plane() <= 0) {  // nothing to read: every tap is outside
    std::fill(output, output + N * C * P, T(0));
    return;
  }
  if (mode == GridSampleMode::Nearest)
    dispatch_forward<Nearest3dSampler>(input, grid, output, N, C, e, P, padding, align_corners);
  else
    dispatch_forward<TrilinearSampler>(input, grid, output, N, C, e, P, padding, align_corners);
}

template <class T>
void grid_sample_3d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input, T* grad_grid,
                             int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  const int64_t P = Do * Ho * Wo;
  const Extent e{D, H, W};
  if (grad_input == nullptr && grad_grid == nullptr) return;
  if (N * P == 0 || e.plane() <= 0) {
    // No positions, or nothing to sample from: the gradients are zero (or empty).
    if (grad_input) std::fill(grad_input, grad_input + N * C * std::max<int64_t>(e.plane(), 0), T(0));
    if (grad_grid) std::fill(grad_grid, grad_grid + N * P * 3, T(0));
    return;
  }
  if (mode == GridSampleMode::Nearest)
    dispatch_backward<Nearest3dSampler>(grad_output, input, grid, grad_input, grad_grid, N, C, e, P, padding,
                                        align_corners);
  else
    dispatch_backward<TrilinearSampler>(grad_output, input, grid, grad_input, grad_grid, N, C, e, P, padding,
                                        align_corners);
}

template <class T>
void affine_grid_3d_forward(const T* theta, T* grid, int64_t N, int64_t D, int64_t H, int64_t W,
                            bool align_corners) {
  const std::vector<T> xs = linspace_from_neg_one<T>(W, align_corners);
  const std::vector<T> ys = linspace_from_neg_one<T>(H, align_corners);
  const std::vector<T> zs = linspace_from_neg_one<T>(D, align_corners);
#pragma omp parallel for schedule(static) if (N * D * H * W >= kParallelWork)
  for (int64_t r = 0; r < N * D * H; ++r) {  // one output row (n, d, h) per iteration
    const T* th = theta + (r / (D * H)) * 12;
    const T y = ys[r % H], z = zs[(r / H) % D];
    T* g = grid + r * W * 3;
    // Base point (x, y, z, 1) times theta^T, in the order of PyTorch's bmm.
    for (int64_t w = 0; w < W; ++w)
      for (int i = 0; i < 3; ++i) {
        const T* t = th + 4 * i;
        g[3 * w + i] = xs[w] * t[0] + y * t[1] + z * t[2] + t[3];
      }
  }
}

template <class T>
void affine_grid_3d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t D, int64_t H, int64_t W,
                             bool align_corners) {
  using Acc = acc_t<T>;
  const std::vector<T> xs = linspace_from_neg_one<T>(W, align_corners);
  const std::vector<T> ys = linspace_from_neg_one<T>(H, align_corners);
  const std::vector<T> zs = linspace_from_neg_one<T>(D, align_corners);
  // Per row (n, d, h) and output coordinate i: sums over w of g_i * x_w and of g_i. Rows are
  // then summed in order, so the result does not depend on how rows are shared among threads.
  std::vector<Acc> rows(N * D * H * 6);
#pragma omp parallel for schedule(static) if (N * D * H * W >= kParallelWork)
  for (int64_t r = 0; r < N * D * H; ++r) {
    const T* g = grad_grid + r * W * 3;
    Acc s[6] = {0, 0, 0, 0, 0, 0};
    for (int64_t w = 0; w < W; ++w)
      for (int i = 0; i < 3; ++i) {
        s[2 * i] += Acc(g[3 * w + i]) * Acc(xs[w]);
        s[2 * i + 1] += Acc(g[3 * w + i]);
      }
    std::copy(s, s + 6, &rows[r * 6]);
  }
  for (int64_t n = 0; n < N; ++n) {
    Acc t[12] = {};
    for (int64_t dh = 0; dh < D * H; ++dh) {
      const Acc* o = &rows[(n * D * H + dh) * 6];
      const Acc y = Acc(ys[dh % H]), z = Acc(zs[dh / H]);
      for (int i = 0; i < 3; ++i) {
        t[4 * i] += o[2 * i];
        t[4 * i + 1] += o[2 * i + 1] * y;
        t[4 * i + 2] += o[2 * i + 1] * z;
        t[4 * i + 3] += o[2 * i + 1];
      }
    }
    for (int k = 0; k < 12; ++k) grad_theta[n * 12 + k] = T(t[k]);
  }
}

#define TG_INSTANTIATE(T)                                                                                     \
  template void grid_sample_3d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                          int64_t, int64_t, int64_t, GridSampleMode, GridSamplePadding, bool); \
  template void grid_sample_3d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t, int64_t,    \
                                           int64_t, int64_t, int64_t, int64_t, int64_t, GridSampleMode,        \
                                           GridSamplePadding, bool);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE
template void affine_grid_3d_forward<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, bool);
template void affine_grid_3d_forward<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, bool);
template void affine_grid_3d_backward<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, bool);
template void affine_grid_3d_backward<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, bool);

}  // namespace tg::kernels::TG_ISA_NS
