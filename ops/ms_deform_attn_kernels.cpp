// Multi-scale deformable attention kernels. Shapes and semantics: see ms_deform_attn_kernels.h.
//
// Legend: N = batch, K = keys, M = heads, C = channels per head, L = levels, Q = queries,
// P = points. A "slice" is one (n, m) pair: the C-channel rows value[n, :, m, :] that one head of
// one image reads, rows K apart by M*C elements. A sample is one (n, q, m, l, p).
//
// The maths, for one sample with attention weight a at pixel coordinates (x, y) of level l:
//   x0 = floor(x), y0 = floor(y), fx = x - x0, fy = y - y0
//   corners  nw = (x0, y0)  ne = (x0+1, y0)  sw = (x0, y0+1)  se = (x0+1, y0+1)
//   weights  w_nw = (1-fy)(1-fx)  w_ne = (1-fy)fx  w_sw = fy(1-fx)  w_se = fy fx
//   forward      out[c]        += a * sum_k w_k v_k[c]               (v_k = 0 outside the map)
//   backward     grad_v_k[c]   += a * w_k * g[c]                     (only corners inside)
//                d_k            = sum_c g[c] v_k[c]
//                grad_a        += sum_k w_k d_k
//                grad_x         = a * ((d_ne - d_nw)(1-fy) + (d_se - d_sw) fy) * W
//                grad_y         = a * ((d_sw - d_nw)(1-fx) + (d_se - d_ne) fx) * H
// (the factor W: x = loc_x * W - 0.5). Everything per channel is a contiguous loop over C,
// which is where the time goes; corners outside the map read a row of zeros and write into a
// scratch row, so that loop has no branches and PyTorch's zero padding (outside value 0, still
// multiplied by its weight, hence NaN weights give NaN) falls out for free.
#include "ms_deform_attn_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tg::kernels {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

template <class T>
struct Problem {
  const T* value;
  const int64_t* spatial_shapes;
  const int64_t* level_start_index;
  const T* sampling_locations;
  const T* attention_weights;
  int64_t N, K, M, C, L, Q, P;
};

// Where one sampling point lands on one level: its four corners (order nw, ne, sw, se), each
// as a key index within the level or -1 when the corner lies outside the map.
template <class T>
struct Footprint {
  T fx, fy;  // distances to the west / north corners (PyTorch's "w" and "n")
  T w[4];
  int64_t key[4];
};

template <class T>
inline Footprint<T> footprint(T loc_x, T loc_y, int64_t H, int64_t W) {
  // The arithmetic of F.grid_sample(align_corners=False) applied to grid = 2*loc - 1, rather than
  // the shorter loc*W - 0.5, so that a point on a pixel border picks the same corners as PyTorch.
  const T grid_x = 2 * loc_x - 1, grid_y = 2 * loc_y - 1;
  const T x = (grid_x + 1) * (static_cast<T>(W) / 2) - T(0.5);
  const T y = (grid_y + 1) * (static_cast<T>(H) / 2) - T(0.5);
  const T x0 = std::floor(x), y0 = std::floor(y);
  Footprint<T> f;
  f.fx = x - x0;
  f.fy = y - y0;
  const T e = 1 - f.fx, s = 1 - f.fy;
  f.w[0] = s * e;
  f.w[1] = s * f.fx;
  f.w[2] = f.fy * e;
  f.w[3] = f.fy * f.fx;
  // Bounds are tested in floating point before any integer conversion: NaN, Inf and huge
  // coordinates fail every comparison and so are simply outside.
  const T Wf = static_cast<T>(W), Hf = static_cast<T>(H);
  const bool west_in = x0 >= 0 && x0 < Wf, east_in = x0 >= -1 && x0 < Wf - 1;
  const bool north_in = y0 >= 0 && y0 < Hf, south_in = y0 >= -1 && y0 < Hf - 1;
  const int64_t xi = (west_in || east_in) ? static_cast<int64_t>(x0) : 0;
  const int64_t yi = (north_in || south_in) ? static_cast<int64_t>(y0) : 0;
  f.key[0] = (north_in && west_in) ? yi * W + xi : -1;
  f.key[1] = (north_in && east_in) ? yi * W + xi + 1 : -1;
  f.key[2] = (south_in && west_in) ? (yi + 1) * W + xi : -1;
  f.key[3] = (south_in && east_in) ? (yi + 1) * W + xi + 1 : -1;
  return f;
}

// Forward for queries [q0, q1) of slice (n, m).
template <class T>
void forward_queries(const Problem<T>& pb, T* output, int64_t n, int64_t m, int64_t q0,
                     int64_t q1, const T* zeros) {
  const int64_t C = pb.C, L = pb.L, P = pb.P, row_stride = pb.M * C;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t nqm = (n * pb.Q + q) * pb.M + m;
    const T* loc = pb.sampling_locations + nqm * L * P * 2;
    const T* attn = pb.attention_weights + nqm * L * P;
    T* out = output + nqm * C;
    std::fill(out, out + C, T(0));
    for (int64_t l = 0; l < L; ++l) {
      const int64_t H = pb.spatial_shapes[2 * l], W = pb.spatial_shapes[2 * l + 1];
      const T* v_level = pb.value + ((n * pb.K + pb.level_start_index[l]) * pb.M + m) * C;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t i = l * P + p;
        const Footprint<T> f = footprint(loc[2 * i], loc[2 * i + 1], H, W);
        const T a = attn[i];
        const T* v[4];
        for (int k = 0; k < 4; ++k) v[k] = f.key[k] >= 0 ? v_level + f.key[k] * row_stride : zeros;
        const T *v0 = v[0], *v1 = v[1], *v2 = v[2], *v3 = v[3];
        const T w0 = f.w[0], w1 = f.w[1], w2 = f.w[2], w3 = f.w[3];
        // a multiplies the interpolated value, as in PyTorch, so an infinite weight gives
        // +-Inf rather than Inf - Inf between corners.
#pragma omp simd
        for (int64_t c = 0; c < C; ++c)
          out[c] += a * (w0 * v0[c] + w1 * v1[c] + w2 * v2[c] + w3 * v3[c]);
      }
    }
  }
}

// Backward for queries [q0, q1) of slice (n, m). grad_v_slice points at key 0 of this slice's
// grad_value rows (in grad_value itself or in a thread's private buffer), gv_stride apart.
// kGradValue: scatter into grad_value. kDots: the channel dots d_k, needed by the gradients
// of the locations and of the attention weights.
template <class T, bool kGradValue, bool kDots>
void backward_queries(const Problem<T>& pb, const T* grad_output, T* grad_v_slice,
                      int64_t gv_stride, T* grad_loc, T* grad_attn, int64_t n, int64_t m,
                      int64_t q0, int64_t q1, const T* zeros, T* sinks) {
  const int64_t C = pb.C, L = pb.L, P = pb.P, row_stride = pb.M * C;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t nqm = (n * pb.Q + q) * pb.M + m;
    const T* loc = pb.sampling_locations + nqm * L * P * 2;
    const T* attn = pb.attention_weights + nqm * L * P;
    const T* g = grad_output + nqm * C;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t H = pb.spatial_shapes[2 * l], W = pb.spatial_shapes[2 * l + 1];
      const int64_t start = pb.level_start_index[l];
      const T* v_level = pb.value + ((n * pb.K + start) * pb.M + m) * C;
      T* gv_level = kGradValue ? grad_v_slice + start * gv_stride : nullptr;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t i = l * P + p;
        const Footprint<T> f = footprint(loc[2 * i], loc[2 * i + 1], H, W);
        const T a = attn[i];
        const T* v[4];
        T* gv[4];
        T aw[4];
        for (int k = 0; k < 4; ++k) {
          const bool in = f.key[k] >= 0;
          v[k] = in ? v_level + f.key[k] * row_stride : zeros;
          gv[k] = (kGradValue && in) ? gv_level + f.key[k] * gv_stride : sinks + k * C;
          aw[k] = a * f.w[k];
        }
        const T *v0 = v[0], *v1 = v[1], *v2 = v[2], *v3 = v[3];
        T *gv0 = gv[0], *gv1 = gv[1], *gv2 = gv[2], *gv3 = gv[3];
        T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
        if (kGradValue && kDots) {
#pragma omp simd reduction(+ : d0, d1, d2, d3)
          for (int64_t c = 0; c < C; ++c) {
            const T gc = g[c];
            d0 += gc * v0[c];
            d1 += gc * v1[c];
            d2 += gc * v2[c];
            d3 += gc * v3[c];
            gv0[c] += aw[0] * gc;
            gv1[c] += aw[1] * gc;
            gv2[c] += aw[2] * gc;
            gv3[c] += aw[3] * gc;
          }
        } else if (kGradValue) {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const T gc = g[c];
            gv0[c] += aw[0] * gc;
            gv1[c] += aw[1] * gc;
            gv2[c] += aw[2] * gc;
            gv3[c] += aw[3] * gc;
          }
        } else {
#pragma omp simd reduction(+ : d0, d1, d2, d3)
          for (int64_t c = 0; c < C; ++c) {
            const T gc = g[c];
            d0 += gc * v0[c];
            d1 += gc * v1[c];
            d2 += gc * v2[c];
            d3 += gc * v3[c];
          }
        }
        if (kDots) {
          if (grad_attn)
            grad_attn[nqm * L * P + i] = f.w[0] * d0 + f.w[1] * d1 + f.w[2] * d2 + f.w[3] * d3;
          if (grad_loc) {
            const T e = 1 - f.fx, s = 1 - f.fy;
            T gx = a * ((d1 - d0) * s + (d3 - d2) * f.fy);
            T gy = a * ((d2 - d0) * e + (d3 - d1) * f.fx);
            if (!std::isfinite(a)) {
              // PyTorch multiplies a into every channel's term before summing; with an infinite
              // a that order decides between +-Inf and NaN, so follow it here (rare, scalar).
              gx = gy = 0;
              for (int64_t c = 0; c < C; ++c) {
                const T ga = g[c] * a;
                gx += ((v1[c] - v0[c]) * s + (v3[c] - v2[c]) * f.fy) * ga;
                gy += ((v2[c] - v0[c]) * e + (v3[c] - v1[c]) * f.fx) * ga;
              }
            }
            T* gl = grad_loc + (nqm * L * P + i) * 2;
            gl[0] = gx * static_cast<T>(W);
            gl[1] = gy * static_cast<T>(H);
          }
        }
      }
    }
  }
}

template <class T>
using BackwardFn = void (*)(const Problem<T>&, const T*, T*, int64_t, T*, T*, int64_t, int64_t,
                            int64_t, int64_t, const T*, T*);

}  // namespace

template <class T>
void ms_deform_attn_forward(const T* value, const int64_t* spatial_shapes,
                            const int64_t* level_start_index, const T* sampling_locations,
                            const T* attention_weights, T* output, int64_t bs, int64_t num_keys,
                            int64_t heads, int64_t channels, int64_t levels, int64_t queries,
                            int64_t points) {
  const Problem<T> pb{value,    spatial_shapes, level_start_index, sampling_locations,
                      attention_weights, bs, num_keys, heads, channels, levels, queries, points};
  const int64_t slices = bs * heads, total = slices * queries;
  const int64_t work = total * levels * points * (channels + 8);
  // Every output row belongs to one (slice, query), so any split is race-free; walking slice by
  // slice keeps one head's value rows hot in cache.
#pragma omp parallel if (work > kParallelWork)
  {
    const std::vector<T> zeros(static_cast<size_t>(channels), T(0));
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = total * t / nt, end = total * (t + 1) / nt;
    for (int64_t i = begin; i < end;) {
      const int64_t s = i / queries, q0 = i % queries, q1 = std::min(queries, q0 + end - i);
      forward_queries(pb, output, s / heads, s % heads, q0, q1, zeros.data());
      i += q1 - q0;
    }
  }
}

template <class T>
void ms_deform_attn_backward(const T* value, const int64_t* spatial_shapes,
                             const int64_t* level_start_index, const T* sampling_locations,
                             const T* attention_weights, const T* grad_output, T* grad_value,
                             T* grad_sampling_locations, T* grad_attention_weights, int64_t bs,
                             int64_t num_keys, int64_t heads, int64_t channels, int64_t levels,
                             int64_t queries, int64_t points) {
  const Problem<T> pb{value,    spatial_shapes, level_start_index, sampling_locations,
                      attention_weights, bs, num_keys, heads, channels, levels, queries, points};
  const bool need_dots = grad_sampling_locations || grad_attention_weights;
  BackwardFn<T> run;
  if (grad_value && need_dots)
    run = backward_queries<T, true, true>;
  else if (grad_value)
    run = backward_queries<T, true, false>;
  else if (need_dots)
    run = backward_queries<T, false, true>;
  else
    return;

  const int64_t K = num_keys, C = channels, row_stride = heads * C;
  const int64_t slices = bs * heads, total = slices * queries;
  if (total == 0) {
    // No query reads value, so its gradient is zero (the other gradients are empty).
    if (grad_value) std::fill(grad_value, grad_value + bs * K * row_stride, T(0));
    return;
  }
  const int64_t work = total * levels * points * (channels + 8);
  const int max_threads = work > kParallelWork ? omp_get_max_threads() : 1;
  // Thread t's private grad_value rows (K x C) for the slice its range begins inside of.
  std::vector<std::vector<T>> partial(static_cast<size_t>(max_threads));
  std::vector<int64_t> partial_slice(static_cast<size_t>(max_threads), -1);

#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    // Row 0: zeros read by outside corners; rows 1-4: where outside corners' gradients go.
    std::vector<T> scratch(static_cast<size_t>(5 * C), T(0));
    const int64_t begin = total * t / nt, end = total * (t + 1) / nt;
    for (int64_t i = begin; i < end;) {
      const int64_t s = i / queries, q0 = i % queries, q1 = std::min(queries, q0 + end - i);
      const int64_t n = s / heads, m = s % heads;
      T* gv_slice = nullptr;
      int64_t gv_stride = 0;
      if (grad_value) {
        if (q0 == 0) {
          // This thread starts the slice, so it owns its rows in grad_value: no one else writes
          // them until the reduction below.
          gv_slice = grad_value + (n * K * heads + m) * C;
          gv_stride = row_stride;
          for (int64_t k = 0; k < K; ++k) std::fill_n(gv_slice + k * gv_stride, C, T(0));
        } else {
          partial[t].assign(static_cast<size_t>(K * C), T(0));
          partial_slice[t] = s;
          gv_slice = partial[t].data();
          gv_stride = C;
        }
      }
      run(pb, grad_output, gv_slice, gv_stride, grad_sampling_locations, grad_attention_weights,
          n, m, q0, q1, scratch.data(), scratch.data() + C);
      i += q1 - q0;
    }

    if (grad_value) {
#pragma omp barrier
      // Add the private parts in thread order (fixed, hence deterministic); each thread adds
      // them for its own share of the keys.
      const int64_t k0 = K * t / nt, k1 = K * (t + 1) / nt;
      for (int u = 0; u < nt; ++u) {
        if (partial_slice[u] < 0) continue;
        const int64_t s = partial_slice[u], n = s / heads, m = s % heads;
        const T* src = partial[u].data();
        for (int64_t k = k0; k < k1; ++k) {
          T* dst = grad_value + ((n * K + k) * heads + m) * C;
          const T* row = src + k * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) dst[c] += row[c];
        }
      }
    }
  }
}

#define TG_INSTANTIATE(T)                                                                      \
  template void ms_deform_attn_forward<T>(const T*, const int64_t*, const int64_t*, const T*,  \
                                          const T*, T*, int64_t, int64_t, int64_t, int64_t,    \
                                          int64_t, int64_t, int64_t);                          \
  template void ms_deform_attn_backward<T>(const T*, const int64_t*, const int64_t*, const T*, \
                                           const T*, const T*, T*, T*, T*, int64_t, int64_t,   \
                                           int64_t, int64_t, int64_t, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::kernels
