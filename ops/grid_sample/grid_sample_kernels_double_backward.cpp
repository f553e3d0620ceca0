// The second-order kernel of grid_sample (2-D and 3-D): the backward of its grid gradient. Read it
// beside the first-order samplers in grid_sample_kernels.cpp; shapes as in grid_sample_kernels.h.
//
// Notation, for one output position p of sample n:
//   (gx, gy) = grid[n, p]                 the normalised sample point
//   u = su(gx), v = sv(gy)                its source-pixel coordinates (Axis: unnormalise, pad)
//   mx = du/dgx, my = dv/dgy              Axis::source_grad (bilinear), Axis::scale (bicubic)
//   w_k(u, v)                             the weight of tap k (4 taps bilinear, 16 bicubic)
//   x_c[k]                                input[n, c] at tap k (0 for a tap outside the image)
//   go_c = grad_output[n, c, p]
// The first-order kernels compute
//   output[n, c, p]  = sum_k w_k x_c[k]
//   grad_input       : x_c[k] receives go_c w_k                  (a scatter-add)
//   grad_grid[n, p]  = (mx sum_c go_c sum_k dw_k/du x_c[k],  my sum_c go_c sum_k dw_k/dv x_c[k])
// Their backward takes upstream gradients gg_input (the shape of input) and gg_grid = (ggx, ggy)
// (the shape of grid) and differentiates  L = <gg_input, grad_input> + <gg_grid, grad_grid>.
// The gg_input half is <go, grid_sample(gg_input, grid)>, so its gradients are a grid_sample
// and a grid_sample backward; grid_sample.cpp calls those as recorded ops. This file computes
// the gg_grid half. With gg_grid carried to source coordinates, a = ggx mx and b = ggy my, and
//   D_k = a dw_k/du + b dw_k/dv           (the derivative of w_k along gg_grid),
// <gg_grid, grad_grid> = sum_p sum_c go_c sum_k D_k x_c[k], and so
//   grad_grad_output[n, c, p] = sum_k D_k x_c[k]
//   grad_input               : x_c[k] receives go_c D_k         (a scatter-add, as first order)
//   grad_grid[n, p]           = (mx sum_c go_c sum_k (a d2w_k/du2  + b d2w_k/dudv) x_c[k],
//                                my sum_c go_c sum_k (a d2w_k/dudv + b d2w_k/dv2 ) x_c[k])
// The last line uses that u is piecewise linear in gx (unnormalisation is affine; border's clip
// and reflection's folds have slope 0 or +-1 between their kinks), so d2u/dgx2 = 0 almost
// everywhere, and that which pixels are the taps is piecewise constant. A point the first
// order treats as clipped (mx = 0: on or beyond a border, or NaN under border / reflection)
// gets a = 0 and a zero x-row, as a constant should.
//
// Bilinear, taps nw, ne, sw, se, with fx = u - floor(u), fy = v - floor(v):
//   w        = ((1 - fx)(1 - fy),  fx (1 - fy),  (1 - fx) fy,  fx fy)
//   dw/du    = (-(1 - fy),  1 - fy,  -fy,  fy)
//   dw/dv    = (-(1 - fx),  -fx,  1 - fx,  fx)
//   d2w/dudv = (+1, -1, -1, +1),   d2w/du2 = d2w/dv2 = 0
// so the Hessian in the grid is the cross term within the cell, and
//   grad_grid[n, p] = (mx b, my a) * sum_c go_c (x_c[nw] - x_c[ne] - x_c[sw] + x_c[se]).
// Bicubic: w_(j, i) = cx_i(tx) cy_j(ty), the cubic convolution coefficients of
// tx = u - floor(u) and ty = v - floor(v); separable, so
//   dw/du = cx_i' cy_j,  dw/dv = cx_i cy_j',
//   d2w/du2 = cx_i'' cy_j,  d2w/dudv = cx_i' cy_j',  d2w/dv2 = cx_i cy_j''.
// Bicubic pads each tap, not the sample point, so mx = Axis::scale, never clipped.
// Nearest: grad_grid is identically zero, and so is everything here.
//
// Points outside the image and on its borders take exactly the taps the first-order kernels
// take (the same Axis calls, in the same order): a tap outside reads 0 and receives nothing.
//
// Work split, no atomics, as in grid_sample_kernels.cpp: grad_grad_output and grad_grid belong
// to positions (one item per sample and block of positions, channels summed in order 0..C-1);
// grad_input is a scatter (one item per sample and range of channels, walking the positions in
// order 0..P-1). Neither order depends on how the work is cut: any thread count, same bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"
#include "grid_sample_kernels.h"
#include "internal/grid_sample_drivers.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

using namespace gs_detail;

// Positions whose terms are tabulated at once (one table per thread; a bicubic entry is about
// 0.5 KB in double).
constexpr int64_t kTermsBlock = 256;

// d c[k] / d t and d2 c[k] / d t2 of cubic_coefficients: tap k is at distance t + 1, t, 1 - t,
// 2 - t, and the kernel is f2(s) = A s^3 - 5A s^2 + 8A s - 4A for 1 <= s < 2 (taps 0, 3) and
// f1(s) = (A + 2) s^3 - (A + 3) s^2 + 1 for s < 1 (taps 1, 2). The first derivative is the
// first order's own, negated (cubic_coefficients_grad returns -d c / d t).
template <class T>
inline void cubic_coefficients_d1(T t, T c[4]) {
  cubic_coefficients_grad(t, c);
  for (int k = 0; k < 4; ++k) c[k] = -c[k];
}

template <class T>
inline void cubic_coefficients_d2(T t, T c[4]) {
  const T A = T(-0.75);
  c[0] = T(6) * A * (t + T(1)) - T(10) * A;                    // f2''(t + 1)
  c[1] = T(6) * (A + T(2)) * t - T(2) * (A + T(3));            // f1''(t)
  c[2] = T(6) * (A + T(2)) * (T(1) - t) - T(2) * (A + T(3));   // f1''(1 - t): two sign flips
  c[3] = T(6) * A * (T(2) - t) - T(10) * A;                    // f2''(2 - t)
}

// What one position needs, for K taps in R dimensions: where they are and the coefficients of
// the formulas above (D_k, and the R rows of the Hessian contracted with (a, b) or (a, b, c)).
template <class T, int K, int R>
struct PointTerms {
  int64_t off[K];  // plane offset of tap k, -1 when outside (reads 0, receives nothing)
  T d[K];          // D_k = a dw_k/du + b dw_k/dv (+ c dw_k/dw in 3-D)
  T h[R][K];       // row r: a d2w_k/dudr + b d2w_k/dvdr (+ c d2w_k/dwdr); r = u is hu, r = v hv
  T m[R];          // du/dgx, dv/dgy (, dw/dgz): mx, my (, mz)
};

template <class T>
struct BilinearTerms {
  static constexpr int kTaps = 4;
  static constexpr int kDims = 2;
  Axis<T> ax, ay;
  int64_t W;

  BilinearTerms(const Extent& e, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), W(e.W) {}

  // g: the grid point (gx, gy); gg: gg_grid there.
  void compute(const T* g, const T* gg, PointTerms<T, 4, 2>& t) const {
    // The taps exactly as BilinearSampler::prepare(backward) takes them.
    const T u = ax.source_grad(g[0], &t.m[0]);
    const T v = ay.source_grad(g[1], &t.m[1]);
    const T u0 = std::floor(u), v0 = std::floor(v);
    const T fx = u - u0, fy = v - v0;
    const bool zeros = ax.padding == GridSamplePadding::Zeros;
    const int64_t ix = zeros ? ax.floor_index(u0) : int64_t(u0);
    const int64_t iy = zeros ? ay.floor_index(v0) : int64_t(v0);
    const bool in_w = ix >= 0 && ix < ax.size, in_e = ix + 1 >= 0 && ix + 1 < ax.size;
    const bool in_n = iy >= 0 && iy < ay.size, in_s = iy + 1 >= 0 && iy + 1 < ay.size;
    const int64_t b0 = iy * W + ix;
    t.off[0] = in_n && in_w ? b0 : -1;
    t.off[1] = in_n && in_e ? b0 + 1 : -1;
    t.off[2] = in_s && in_w ? b0 + W : -1;
    t.off[3] = in_s && in_e ? b0 + W + 1 : -1;

    const T a = gg[0] * t.m[0], b = gg[1] * t.m[1];
    const T dw_du[4] = {-(T(1) - fy), T(1) - fy, -fy, fy};
    const T dw_dv[4] = {-(T(1) - fx), -fx, T(1) - fx, fx};
    const T d2w_dudv[4] = {T(1), T(-1), T(-1), T(1)};  // d2w/du2 = d2w/dv2 = 0
    for (int k = 0; k < 4; ++k) {
      t.d[k] = a * dw_du[k] + b * dw_dv[k];
      t.h[0][k] = b * d2w_dudv[k];
      t.h[1][k] = a * d2w_dudv[k];
    }
  }
};

template <class T>
struct BicubicTerms {
  static constexpr int kTaps = 16;
  static constexpr int kDims = 2;
  Axis<T> ax, ay;
  int64_t W;

  BicubicTerms(const Extent& e, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), W(e.W) {}

  void compute(const T* g, const T* gg, PointTerms<T, 16, 2>& t) const {
    // The taps exactly as BicubicSampler::prepare takes them: the point is not padded, each
    // tap is; tap (j, i) is row floor(v) - 1 + j, column floor(u) - 1 + i.
    const T u = ax.unnormalize(g[0]), v = ay.unnormalize(g[1]);
    const T u0 = std::floor(u), v0 = std::floor(v);
    t.m[0] = ax.scale;
    t.m[1] = ay.scale;
    T cx[4], cy[4], dcx[4], dcy[4], d2cx[4], d2cy[4];
    cubic_coefficients(u - u0, cx);
    cubic_coefficients(v - v0, cy);
    cubic_coefficients_d1(u - u0, dcx);
    cubic_coefficients_d1(v - v0, dcy);
    cubic_coefficients_d2(u - u0, d2cx);
    cubic_coefficients_d2(v - v0, d2cy);
    int64_t col[4], row[4];
    for (int k = 0; k < 4; ++k) {
      col[k] = ax.index(ax.pad(u0 + T(k - 1)));
      row[k] = ay.index(ay.pad(v0 + T(k - 1)));
    }
    const T a = gg[0] * t.m[0], b = gg[1] * t.m[1];
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        const int k = 4 * j + i;
        t.off[k] = row[j] >= 0 && col[i] >= 0 ? row[j] * W + col[i] : -1;
        t.d[k] = a * dcx[i] * cy[j] + b * cx[i] * dcy[j];
        t.h[0][k] = a * d2cx[i] * cy[j] + b * dcx[i] * dcy[j];
        t.h[1][k] = a * dcx[i] * dcy[j] + b * cx[i] * d2cy[j];
      }
    }
  }
};

// Trilinear (3-D), taps and weights from TrilinearPoint (the first-order sampler's own):
// w_k = X_dx(u) Y_dy(v) Z_dz(w), each factor linear in its coordinate with slope s(0) = -1,
// s(1) = +1, so with (a, b, c) = gg_grid * (mx, my, mz) carried to source coordinates
//   D_k = a s(dx) Y Z + b X s(dy) Z + c X Y s(dz)
//   h[r][k] = the sum over the two axes i != r of (a, b, c)_i s(d_i) s(d_r) times the weight of
//             the third axis (the second derivatives along one axis are 0).
template <class T>
struct TrilinearTerms {
  static constexpr int kTaps = 8;
  static constexpr int kDims = 3;
  Axis<T, AxisForm::Scalar> ax, ay, az;
  int64_t W, HW;

  TrilinearTerms(const Extent& e, GridSamplePadding padding, bool align_corners)
      : ax(e.W, padding, align_corners), ay(e.H, padding, align_corners), az(e.D, padding, align_corners),
        W(e.W), HW(e.H * e.W) {}

  void compute(const T* g, const T* gg, PointTerms<T, 8, 3>& t) const {
    const Axis<T, AxisForm::Scalar>* const axes[3] = {&ax, &ay, &az};
    TrilinearPoint<T> pt;
    pt.locate(axes, g, /*backward=*/true, W, HW);
    T a[3];
    for (int i = 0; i < 3; ++i) {
      t.m[i] = pt.m[i];
      a[i] = gg[i] * pt.m[i];
    }
    for (int k = 0; k < 8; ++k) {
      t.off[k] = pt.off[k];
      const int d[3] = {k & 1, (k >> 1) & 1, k >> 2};
      T f[3], sl[3];  // the factor of each axis and its slope
      for (int i = 0; i < 3; ++i) {
        f[i] = pt.w[d[i]][i];
        sl[i] = d[i] ? T(1) : T(-1);
      }
      t.d[k] = a[0] * sl[0] * f[1] * f[2] + a[1] * f[0] * sl[1] * f[2] + a[2] * f[0] * f[1] * sl[2];
      for (int r = 0; r < 3; ++r) {
        T h = T(0);
        for (int i = 0; i < 3; ++i)
          if (i != r) h += a[i] * sl[i] * sl[r] * f[3 - i - r];
        t.h[r][k] = h;
      }
    }
  }
};

template <class Terms, class T>
void double_backward_impl(const T* grad_output, const T* input, const T* grid, const T* gg_grid,
                          T* grad_grad_output, T* grad_input, T* grad_grid, int64_t N, int64_t C,
                          const Extent& e, int64_t P, GridSamplePadding padding,
                          bool align_corners) {
  constexpr int K = Terms::kTaps, R = Terms::kDims;
  using Acc = acc_t<T>;
  using Terms_ = PointTerms<T, K, R>;
  const int64_t HW = e.plane();
  const int64_t nb = ceil_div(P, kTermsBlock);
  const bool parallel = N * C * P * K >= kParallelWork;
  const int64_t threads = parallel ? max_threads() : 1;

  // The terms of positions [p0, p0 + len) of sample n.
  auto tabulate = [&](const Terms& terms, std::vector<Terms_>& tab, int64_t n,
                      int64_t p0, int64_t len) {
    for (int64_t p = 0; p < len; ++p) {
      const int64_t q = (n * P + p0 + p) * R;
      terms.compute(grid + q, gg_grid + q, tab[p]);
    }
  };

  // grad_grad_output and grad_grid of one block of positions: channels in order 0..C-1.
  auto position_block = [&](const Terms& terms, std::vector<Terms_>& tab,
                            std::vector<Acc>& sums, int64_t n, int64_t blk) {
    const int64_t p0 = blk * kTermsBlock, len = std::min(kTermsBlock, P - p0);
    tabulate(terms, tab, n, p0, len);
    std::fill(sums.begin(), sums.begin() + R * len, Acc(0));  // [p][r]
    for (int64_t c = 0; c < C; ++c) {
      const T* plane = input + (n * C + c) * HW;
      const T* go = grad_output + (n * C + c) * P + p0;
      T* ggo = grad_grad_output ? grad_grad_output + (n * C + c) * P + p0 : nullptr;
      for (int64_t p = 0; p < len; ++p) {
        const Terms_& t = tab[p];
        T sd = T(0), sh[R] = {};
        for (int k = 0; k < K; ++k) {
          const T x = tap_value(plane, t.off[k]);
          sd += t.d[k] * x;
          for (int r = 0; r < R; ++r) sh[r] += t.h[r][k] * x;
        }
        if (ggo) ggo[p] = sd;                 // sum_k D_k x_c[k]
        if (grad_grid)                        // sum_c go_c sum_k (hessian row) x_c[k]
          for (int r = 0; r < R; ++r) sums[p * R + r] += Acc(sh[r] * go[p]);
      }
    }
    if (grad_grid) {
      T* out = grad_grid + (n * P + p0) * R;
      for (int64_t p = 0; p < len; ++p)
        for (int r = 0; r < R; ++r) out[R * p + r] = T(sums[p * R + r] * Acc(tab[p].m[r]));
    }
  };

  // grad_input of sample n, channels [c0, c1): x_c[k] receives go_c D_k, positions in order.
  auto input_planes = [&](const Terms& terms, std::vector<Terms_>& tab, int64_t n,
                          int64_t c0, int64_t c1) {
    std::fill(grad_input + (n * C + c0) * HW, grad_input + (n * C + c1) * HW, T(0));
    for (int64_t blk = 0; blk < nb; ++blk) {
      const int64_t p0 = blk * kTermsBlock, len = std::min(kTermsBlock, P - p0);
      tabulate(terms, tab, n, p0, len);
      for (int64_t c = c0; c < c1; ++c) {
        T* plane = grad_input + (n * C + c) * HW;
        const T* go = grad_output + (n * C + c) * P + p0;
        for (int64_t p = 0; p < len; ++p) {
          const Terms_& t = tab[p];
          for (int k = 0; k < K; ++k)
            if (t.off[k] >= 0) plane[t.off[k]] += t.d[k] * go[p];
        }
      }
    }
  };

  // Channel ranges per sample for grad_input: enough for every thread (the cut changes no bit).
  const int64_t kc = grad_input ? std::max<int64_t>(1, std::min(C, ceil_div(threads, N))) : 0;
  const int64_t input_items = grad_input ? N * kc : 0;
  const int64_t position_items = (grad_grad_output || grad_grid) ? N * nb : 0;
  const int64_t items = input_items + position_items;
#pragma omp parallel if (parallel && items > 1)
  {
    const Terms terms(e, padding, align_corners);
    std::vector<Terms_> tab(std::min(kTermsBlock, P));
    std::vector<Acc> sums(R * tab.size());
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      if (it < input_items) {
        const int64_t n = it / kc, k = it % kc;
        input_planes(terms, tab, n, C * k / kc, C * (k + 1) / kc);
      } else {
        const int64_t j = it - input_items;
        position_block(terms, tab, sums, j / nb, j % nb);
      }
    }
  }
}

}  // namespace

template <class T>
void grid_sample_2d_double_backward(const T* grad_output, const T* input, const T* grid,
                                    const T* gg_grid, T* grad_grad_output, T* grad_input,
                                    T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W,
                                    int64_t Ho, int64_t Wo, GridSampleMode mode,
                                    GridSamplePadding padding, bool align_corners) {
  const int64_t P = Ho * Wo;
  const int64_t HW = std::max<int64_t>(H * W, 0);
  auto zero_all = [&] {
    if (grad_grad_output) std::fill(grad_grad_output, grad_grad_output + N * C * P, T(0));
    if (grad_input) std::fill(grad_input, grad_input + N * C * HW, T(0));
    if (grad_grid) std::fill(grad_grid, grad_grid + N * P * 2, T(0));
  };
  // Nearest: grad_grid is identically zero. No positions or no pixels: nothing to read.
  if (mode == GridSampleMode::Nearest || N * P == 0 || H <= 0 || W <= 0) {
    zero_all();
    return;
  }
  if (mode == GridSampleMode::Bilinear)
    double_backward_impl<BilinearTerms<T>>(grad_output, input, grid, gg_grid, grad_grad_output,
                                           grad_input, grad_grid, N, C, Extent{1, H, W}, P,
                                           padding, align_corners);
  else
    double_backward_impl<BicubicTerms<T>>(grad_output, input, grid, gg_grid, grad_grad_output,
                                          grad_input, grad_grid, N, C, Extent{1, H, W}, P,
                                          padding, align_corners);
}

template <class T>
void grid_sample_3d_double_backward(const T* grad_output, const T* input, const T* grid, const T* gg_grid,
                                    T* grad_grad_output, T* grad_input, T* grad_grid, int64_t N, int64_t C,
                                    int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo,
                                    GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  const int64_t P = Do * Ho * Wo;
  const Extent e{D, H, W};
  if (mode == GridSampleMode::Nearest || N * P == 0 || e.plane() <= 0) {  // as in 2-D: all zero
    if (grad_grad_output) std::fill(grad_grad_output, grad_grad_output + N * C * P, T(0));
    if (grad_input) std::fill(grad_input, grad_input + N * C * std::max<int64_t>(e.plane(), 0), T(0));
    if (grad_grid) std::fill(grad_grid, grad_grid + N * P * 3, T(0));
    return;
  }
  double_backward_impl<TrilinearTerms<T>>(grad_output, input, grid, gg_grid, grad_grad_output, grad_input,
                                          grad_grid, N, C, e, P, padding, align_corners);
}

template void grid_sample_3d_double_backward<float>(const float*, const float*, const float*, const float*,
                                                    float*, float*, float*, int64_t, int64_t, int64_t,
                                                    int64_t, int64_t, int64_t, int64_t, int64_t,
                                                    GridSampleMode, GridSamplePadding, bool);
template void grid_sample_3d_double_backward<double>(const double*, const double*, const double*,
                                                     const double*, double*, double*, double*, int64_t,
                                                     int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                                     int64_t, GridSampleMode, GridSamplePadding, bool);
template void grid_sample_2d_double_backward<float>(const float*, const float*, const float*,
                                                    const float*, float*, float*, float*, int64_t,
                                                    int64_t, int64_t, int64_t, int64_t, int64_t,
                                                    GridSampleMode, GridSamplePadding, bool);
template void grid_sample_2d_double_backward<double>(const double*, const double*, const double*,
                                                     const double*, double*, double*, double*,
                                                     int64_t, int64_t, int64_t, int64_t, int64_t,
                                                     int64_t, GridSampleMode, GridSamplePadding,
                                                     bool);

}  // namespace tg::kernels::TG_ISA_NS
