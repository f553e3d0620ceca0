// Multi-scale deformable attention, double backward: the backward of the first-order backward.
// Shapes and semantics: ms_deform_attn_kernels.h. Read beside ms_deform_attn_kernels.cpp, whose
// notation this follows.
//
// Legend: N = batch, K = keys, M = heads, C = channels per head, L = levels, Q = queries,
// P = points. A "slice" is one (n, m) pair; a sample is one (n, q, m, l, p).
//
// ---- One sample ----
// Attention weight a, location (loc_x, loc_y) in [0, 1], level of size H x W. Pixel coordinates
//   x = loc_x * W - 0.5,  y = loc_y * H - 0.5,  x0 = floor(x), y0 = floor(y),
//   fx = x - x0,  fy = y - y0,  ex = 1 - fx,  ey = 1 - fy.
// Corners k = nw (x0, y0), ne (x0+1, y0), sw (x0, y0+1), se (x0+1, y0+1), with value rows v_k
// (C channels; zero for a corner outside the level). Bilinear weights and their derivatives:
//            w_k        wx_k = dw_k/dfx    wy_k = dw_k/dfy    xy_k = d2w_k/dfx dfy
//   nw     ey * ex          -ey                -ex                +1
//   ne     ey * fx          +ey                -fx                -1
//   sw     fy * ex          -fy                +ex                -1
//   se     fy * fx          +fy                +fx                +1
// and d2w_k/dfx2 = d2w_k/dfy2 = 0: the sample s = sum_k w_k v_k is linear in the values and
// bilinear in (fx, fy), so its Hessian in the location has only the cross term, within a cell:
//   d2s/dloc_x dloc_y = W * H * sum_k xy_k v_k = W * H * (v_nw - v_ne - v_sw + v_se).
// (dfx/dloc_x = W, dfy/dloc_y = H, away from the kinks where x or y is an integer.)
//
// ---- The first-order backward (ms_deform_attn_backward_kernels.cpp) ----
// With go the C channels of grad_output of the sample's (n, q, m), and d_k = <go, v_k>:
//   grad_value[corner k]  += a * w_k * go                          (corners inside the level)
//   grad_attn              = <go, s>          = sum_k w_k d_k
//   grad_loc_x             = a * W * <go, ds/dfx> = a * W * sum_k wx_k d_k
//   grad_loc_y             = a * H * <go, ds/dfy> = a * H * sum_k wy_k d_k
//
// ---- Its backward ----
// Upstream gradients of those three outputs: gg_value (like value), gg_loc = (gx, gy) and
// gg_attn = ga per sample. Differentiating the first-order backward means differentiating
//   Phi = <gg_value, grad_value> + <gg_loc, grad_loc> + <gg_attn, grad_attn>
// with respect to go, value, loc and a. With u_k the gg_value row of corner k (zero outside),
// e_k = <go, u_k>, and t = sum_k w_k u_k (gg_value sampled like value), one sample adds to Phi
//   a * <go, t>  +  a * (gx * W * <go, ds/dfx> + gy * H * <go, ds/dfy>)  +  ga * <go, s>
//   = <go, a * t + sum_k c_k v_k>,   where   c_k = a * (gx * W * wx_k + gy * H * wy_k) + ga * w_k.
// c_k is the weight with which v_k enters the terms of gg_loc and gg_attn. Hence:
//
//   d/dgo[n, q, m, :]  = sum_{l, p} (a * t + sum_k c_k v_k)
//                      = ms_deform_attn(gg_value, loc, a)            (the forward on gg_value:
//                                                                      done by the caller)
//                        + sum_{l, p} sum_k c_k v_k                  ("grad_grad_output_rest")
//   d/dvalue[corner k] += c_k * go                                   (corners inside the level;
//                                                                      a scatter like grad_value)
//   d/da               = <go, t> + gx * W * <go, ds/dfx> + gy * H * <go, ds/dfy>
//                      = sum_k w_k e_k + sum_k (gx * W * wx_k + gy * H * wy_k) d_k
//   d/dloc_x           = W * ( a * sum_k wx_k e_k                    (gg_value: the bilinear
//                                                                      weights move with loc)
//                            + a * gy * H * X                        (gg_loc: the cross term)
//                            + ga * sum_k wx_k d_k )                 (gg_attn: grad_attn moves)
//   d/dloc_y           = H * ( a * sum_k wy_k e_k + a * gx * W * X + ga * sum_k wy_k d_k )
//   where X = sum_k xy_k d_k = d_nw - d_ne - d_sw + d_se = <go, (1 / (W H)) d2s/dloc_x dloc_y>.
// The gx term of d/dloc_x (and gy of d/dloc_y) would carry d2w/dfx2, which is zero.
//
// Borders and the outside: the corners and (fx, fy) are computed with exactly the first-order
// kernels' arithmetic (see footprint below), so a point on a pixel border or outside a level
// picks the same corners and weights; a corner outside reads a row of zeros (which a NaN weight
// still turns into NaN, as PyTorch's zero padding does) and receives no gradient.
//
// Work split and determinism: like the first-order backward with at least as many slices as
// threads, whole slices go to threads, so each grad_value row has one writer (no atomics) and
// receives its contributions in (query, level, point) order whatever the thread count. The other
// outputs are per (n, q, m) row; when grad_value is not asked for, blocks of a slice's queries
// are handed out instead. Every output element is computed by the same code in the same order
// for any split, so the results are bit-identical for every thread count. (Unlike the
// first-order kernel, which cuts fewer than 8 slices into query chunks with their own gradient
// buffers, a slice is never shared between threads: with fewer slices than threads, some
// threads idle. The double backward is for gradient penalties and Hessian-vector
// products, not the training loop, so plain loops are preferred to the SIMD of the first order.)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ms_deform_attn_kernels.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves (as the first order).
constexpr int64_t kParallelWork = 1 << 15;
// Queries per task when grad_value is not asked for.
constexpr int64_t kQueryBlock = 64;

// Where one sample lands: the distances to the west and north corners, and which of the
// corners nw, ne, sw, se are inside the level, with their keys (within the slice's rows).
template <class T>
struct Footprint {
  T fx, fy;
  int64_t key[4];
  bool inside[4];
};

// The arithmetic of query_footprints in internal/sampling.h, one sample at a time:
// grid_sample's (2 * loc - 1 + 1) * W / 2 - 0.5 (so a point on a pixel border picks the same
// corners as PyTorch), the coordinate clamped to [-2, min(W, 2^30)] (NaN to -2) before the floor,
// and x - x added to the distance so that a NaN or infinite coordinate gives NaN weights.
template <class T>
Footprint<T> footprint(T loc_x, T loc_y, int64_t H, int64_t W, int64_t start) {
  const T half_W = static_cast<T>(W) / 2, half_H = static_cast<T>(H) / 2;
  const T clamp_W = static_cast<T>(std::min<int64_t>(W, int64_t(1) << 30));
  const T clamp_H = static_cast<T>(std::min<int64_t>(H, int64_t(1) << 30));
  const T x = (2 * loc_x - 1 + 1) * half_W - T(0.5);
  const T y = (2 * loc_y - 1 + 1) * half_H - T(0.5);
  const T x_lo = x >= -2 ? x : T(-2), y_lo = y >= -2 ? y : T(-2);
  const T xc = x_lo <= clamp_W ? x_lo : clamp_W, yc = y_lo <= clamp_H ? y_lo : clamp_H;
  const T x0 = std::floor(xc), y0 = std::floor(yc);
  Footprint<T> f;
  f.fx = (xc - x0) + (x - x);
  f.fy = (yc - y0) + (y - y);
  const int64_t xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
  const bool west_in = xi >= 0 && xi < W, east_in = xi >= -1 && xi < W - 1;
  const bool north_in = yi >= 0 && yi < H, south_in = yi >= -1 && yi < H - 1;
  const int64_t nw = start + yi * W + xi;
  f.key[0] = nw;
  f.key[1] = nw + 1;
  f.key[2] = nw + W;
  f.key[3] = nw + W + 1;
  f.inside[0] = north_in && west_in;
  f.inside[1] = north_in && east_in;
  f.inside[2] = south_in && west_in;
  f.inside[3] = south_in && east_in;
  return f;
}

template <class T>
struct Args {
  const T* value;
  const int64_t* spatial_shapes;
  const int64_t* level_start_index;
  const T* loc;
  const T* attn;
  const T* go;
  const T* gg_value;  // null: zero
  const T* gg_loc;    // null: zero
  const T* gg_attn;   // null: zero
  T* d_go_rest;       // null: not asked for (and likewise below)
  T* d_value;
  T* d_loc;
  T* d_attn;
  int64_t N, K, M, C, L, Q, P;
};

// All four outputs for queries [q0, q1) of slice (n, m). d_value's rows of the slice must be
// zeroed beforehand (by the owner of the whole slice).
template <class T>
void double_backward_queries(const Args<T>& g, int64_t n, int64_t m, int64_t q0, int64_t q1,
                             const T* zeros) {
  const int64_t C = g.C, LP = g.L * g.P, row_stride = g.M * C;
  // The row of key `key` of the slice in value, gg_value or d_value (N, K, M, C).
  const int64_t slice_offset = n * g.K * row_stride + m * C;
  const bool need_dots = g.d_loc || g.d_attn;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t nqm = (n * g.Q + q) * g.M + m;
    const T* go = g.go + nqm * C;
    T* d_go = g.d_go_rest ? g.d_go_rest + nqm * C : nullptr;
    if (d_go) std::fill_n(d_go, C, T(0));
    for (int64_t i = 0; i < LP; ++i) {
      const int64_t l = i / g.P, sample = nqm * LP + i;
      const int64_t H = g.spatial_shapes[2 * l], W = g.spatial_shapes[2 * l + 1];
      const Footprint<T> f =
          footprint(g.loc[2 * sample], g.loc[2 * sample + 1], H, W, g.level_start_index[l]);
      const T a = g.attn[sample];
      const T gx = g.gg_loc ? g.gg_loc[2 * sample] : T(0);
      const T gy = g.gg_loc ? g.gg_loc[2 * sample + 1] : T(0);
      const T ga = g.gg_attn ? g.gg_attn[sample] : T(0);
      const T Wf = static_cast<T>(W), Hf = static_cast<T>(H);
      const T fx = f.fx, fy = f.fy, ex = 1 - fx, ey = 1 - fy;
      const T w[4] = {ey * ex, ey * fx, fy * ex, fy * fx};
      const T wx[4] = {-ey, ey, -fy, fy};
      const T wy[4] = {-ex, -fx, ex, fx};
      const T xy[4] = {1, -1, -1, 1};
      const T gxW = gx * Wf, gyH = gy * Hf;
      // c_k: the weight of v_k in the gg_loc and gg_attn terms (see the top of the file).
      T c[4];
      for (int k = 0; k < 4; ++k) c[k] = a * (gxW * wx[k] + gyH * wy[k]) + ga * w[k];
      const T* v[4];
      const T* u[4];
      for (int k = 0; k < 4; ++k) {
        const int64_t row = slice_offset + f.key[k] * row_stride;
        v[k] = f.inside[k] ? g.value + row : zeros;
        u[k] = f.inside[k] && g.gg_value ? g.gg_value + row : zeros;
      }
      // d/dgo (the rest): sum_k c_k v_k.
      if (d_go)
        for (int64_t ch = 0; ch < C; ++ch)
          d_go[ch] += c[0] * v[0][ch] + c[1] * v[1][ch] + c[2] * v[2][ch] + c[3] * v[3][ch];
      // d/dvalue: c_k * go into the rows of the corners inside.
      if (g.d_value)
        for (int k = 0; k < 4; ++k) {
          if (!f.inside[k]) continue;
          T* dv = g.d_value + slice_offset + f.key[k] * row_stride;
          const T ck = c[k];
          for (int64_t ch = 0; ch < C; ++ch) dv[ch] += ck * go[ch];
        }
      if (!need_dots) continue;
      // d_k = <go, v_k>, e_k = <go, u_k>.
      T d[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
      for (int64_t ch = 0; ch < C; ++ch) {
        const T gc = go[ch];
        for (int k = 0; k < 4; ++k) {
          d[k] += gc * v[k][ch];
          e[k] += gc * u[k][ch];
        }
      }
      if (g.d_attn) {
        T acc = 0;
        for (int k = 0; k < 4; ++k) acc += w[k] * e[k] + (gxW * wx[k] + gyH * wy[k]) * d[k];
        g.d_attn[sample] = acc;
      }
      if (g.d_loc) {
        T wx_e = 0, wy_e = 0, wx_d = 0, wy_d = 0, X = 0;
        for (int k = 0; k < 4; ++k) {
          wx_e += wx[k] * e[k];
          wy_e += wy[k] * e[k];
          wx_d += wx[k] * d[k];
          wy_d += wy[k] * d[k];
          X += xy[k] * d[k];
        }
        g.d_loc[2 * sample] = Wf * (a * wx_e + a * gyH * X + ga * wx_d);
        g.d_loc[2 * sample + 1] = Hf * (a * wy_e + a * gxW * X + ga * wy_d);
      }
    }
  }
}

}  // namespace

template <class T>
void ms_deform_attn_double_backward(const T* value, const int64_t* spatial_shapes,
                                    const int64_t* level_start_index, const T* sampling_locations,
                                    const T* attention_weights, const T* grad_output,
                                    const T* gg_value, const T* gg_sampling_locations,
                                    const T* gg_attention_weights, T* grad_grad_output_rest,
                                    T* grad_value, T* grad_sampling_locations,
                                    T* grad_attention_weights, int64_t bs, int64_t num_keys,
                                    int64_t heads, int64_t channels, int64_t levels,
                                    int64_t queries, int64_t points) {
  const Args<T> args{value,
                     spatial_shapes,
                     level_start_index,
                     sampling_locations,
                     attention_weights,
                     grad_output,
                     gg_value,
                     gg_sampling_locations,
                     gg_attention_weights,
                     grad_grad_output_rest,
                     grad_value,
                     grad_sampling_locations,
                     grad_attention_weights,
                     bs,
                     num_keys,
                     heads,
                     channels,
                     levels,
                     queries,
                     points};
  if (!grad_grad_output_rest && !grad_value && !grad_sampling_locations && !grad_attention_weights)
    return;
  const int64_t slices = bs * heads, K = num_keys, C = channels, row_stride = heads * C;
  // Tasks: whole slices when grad_value is asked for (one writer per row, queries in order),
  // else blocks of kQueryBlock queries of a slice.
  const int64_t block = grad_value ? std::max<int64_t>(queries, 1) : kQueryBlock;
  const int64_t blocks = grad_value ? 1 : (queries + block - 1) / block;
  const int64_t tasks = slices * blocks;
  const int64_t work = slices * queries * levels * points * (channels + 8);
  const int max_threads = work > kParallelWork ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    const std::vector<T> zeros(static_cast<size_t>(C), T(0));  // what a corner outside reads
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t s = task / blocks, n = s / heads, m = s % heads;
      const int64_t q0 = task % blocks * block, q1 = std::min(queries, q0 + block);
      if (grad_value) {
        T* rows = grad_value + n * K * row_stride + m * C;
        for (int64_t k = 0; k < K; ++k) std::fill_n(rows + k * row_stride, C, T(0));
      }
      double_backward_queries(args, n, m, q0, q1, zeros.data());
    }
  }
}

#define TG_INSTANTIATE(T)                                                                     \
  template void ms_deform_attn_double_backward<T>(                                           \
      const T*, const int64_t*, const int64_t*, const T*, const T*, const T*, const T*,       \
      const T*, const T*, T*, T*, T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
      int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
