// Convolution kernels (see conv_kernels.h for the parameters and tensor layouts).
//
// Everything here is written in the geometry of a *normal* convolution, whatever the direction:
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
//   correlate          y = w . im2col(x)          normal forward   | transposed grad_input
//   correlate_adjoint  x = col2im(w^T . y)        normal grad_input | transposed forward
//   weight_grad        dw = sum_n y . im2col(x)^T  normal: y = grad_output, x = input
//                                                  transposed: y = input, x = grad_output
//
// im2col(x) is the (CKg x Lo) matrix whose row (ci, t) holds x[ci, o * stride - pad + t * dil]
// for every window position o (zero outside the image); col2im is its adjoint (a scatter-add).
// The GEMMs are Eigen's, on column-major maps of our row-major buffers: a row-major (R x C)
// buffer is a column-major (C x R) matrix, so y^T (Lo x Cog) = im2col(x)^T (Lo x CKg) * w^T.
//
// Parallel plan (OpenMP, no atomics): every piece is cut into items that each own the slice of
// the result they write, and the cut never changes the order of any sum, so results are
// bit-identical for any thread count:
//   correlate:          items (n, g, range of window positions)  -> owns y[n, g, range]
//   correlate_adjoint:  items (n, g, block of image channels)     -> owns x[n, g, block]
//   weight_grad:        items (g, block of ci, block of co)       -> owns dw[g, co-block, ci-block],
//                       summing samples and position ranges in a fixed order
// Column matrices are built in chunks of window positions (about kChunkBytes) so that they
// stay in the L2 cache between im2col and the GEMM. Inside our parallel regions Eigen's GEMM
// runs single-threaded (Eigen checks omp_get_num_threads()).
//
// Special paths:
//   - "unit" convolutions (1x1x1 kernel, stride 1, no padding, same sizes) need no im2col:
//     the image itself is the column matrix.
//   - depthwise (one image channel per group, few outputs per group) runs direct loops: im2col
//     + GEMM would multiply matrices with a depth of K (e.g. 9) and waste most of the time.
#include "conv_kernels.h"

#include <Eigen/Core>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tg::kernels {

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                         int64_t pad_before, int64_t pad_after, bool transposed,
                         int64_t output_padding) {
  const int64_t span = dilation * (kernel - 1);  // extent of one window minus 1
  if (transposed) {
    return (in - 1) * stride - pad_before - pad_after + span + output_padding + 1;
  }
  const int64_t num = in + pad_before + pad_after - span - 1;
  // floor division, so that a window larger than the padded input gives a size <= 0
  const int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
  return q + 1;
}

ConvParams make_conv_params(int dims, int64_t N, int64_t C_in, int64_t C_out, int64_t groups,
                            const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                            const std::vector<int64_t>& stride,
                            const std::vector<int64_t>& dilation,
                            const std::vector<int64_t>& pad_before,
                            const std::vector<int64_t>& pad_after, bool transposed,
                            const std::vector<int64_t>& output_padding) {
  ConvParams p;
  p.dims = dims;
  p.N = N;
  p.C_in = C_in;
  p.C_out = C_out;
  p.groups = groups;
  p.transposed = transposed;
  // right-align: a 2D (H, W) goes to slots 1, 2 and slot 0 keeps its unit defaults
  const int lead = 3 - dims;
  for (int d = 0; d < dims; ++d) {
    const int s = lead + d;
    p.in[s] = in[d];
    p.kernel[s] = kernel[d];
    p.stride[s] = stride[d];
    p.dilation[s] = dilation[d];
    p.pad_before[s] = pad_before[d];
    p.pad_after[s] = pad_after[d];
    p.output_padding[s] = output_padding.empty() ? 0 : output_padding[d];
  }
  for (int s = 0; s < 3; ++s) {
    p.out[s] = conv_output_size(p.in[s], p.kernel[s], p.stride[s], p.dilation[s], p.pad_before[s],
                                p.pad_after[s], transposed, p.output_padding[s]);
  }
  return p;
}

int64_t conv_weight_numel(const ConvParams& p) {
  const int64_t K = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const int64_t g = p.groups > 0 ? p.groups : 1;
  return p.transposed ? p.C_in * (p.C_out / g) * K : p.C_out * (p.C_in / g) * K;
}

namespace {

// Target size of one chunk of the column matrix: it is written by im2col and read back by the
// GEMM's packing right away, so it should live in L2 (2 MB per core here).
constexpr int64_t kChunkBytes = 512 * 1024;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kParallelWork = 1 << 17;

struct Geom {
  int64_t N, G;
  int64_t Ci, Co, Cig, Cog;  // image / column-side channels, and per group
  int64_t Di, Hi, Wi, Li;    // image spatial sizes
  int64_t Do, Ho, Wo, Lo;    // window positions
  int64_t kd, kh, kw, K;
  int64_t sd, sh, sw, dd, dh, dw, pd, ph, pw;
  int64_t CKg;  // rows of one group's column matrix
  bool unit;    // the column matrix is the image itself
  bool depthwise;
};

Geom make_geom(const ConvParams& p) {
  Geom g{};
  const auto& isz = p.transposed ? p.out : p.in;
  const auto& osz = p.transposed ? p.in : p.out;
  g.N = p.N;
  g.G = p.groups > 0 ? p.groups : 1;
  g.Ci = p.transposed ? p.C_out : p.C_in;
  g.Co = p.transposed ? p.C_in : p.C_out;
  g.Cig = g.Ci / g.G;
  g.Cog = g.Co / g.G;
  g.Di = isz[0], g.Hi = isz[1], g.Wi = isz[2];
  g.Do = osz[0], g.Ho = osz[1], g.Wo = osz[2];
  g.Li = g.Di * g.Hi * g.Wi;
  g.Lo = g.Do * g.Ho * g.Wo;
  g.kd = p.kernel[0], g.kh = p.kernel[1], g.kw = p.kernel[2];
  g.K = g.kd * g.kh * g.kw;
  g.sd = p.stride[0], g.sh = p.stride[1], g.sw = p.stride[2];
  g.dd = p.dilation[0], g.dh = p.dilation[1], g.dw = p.dilation[2];
  g.pd = p.pad_before[0], g.ph = p.pad_before[1], g.pw = p.pad_before[2];
  g.CKg = g.Cig * g.K;
  g.unit = g.K == 1 && g.sd == 1 && g.sh == 1 && g.sw == 1 && g.pd == 0 && g.ph == 0 &&
           g.pw == 0 && g.Di == g.Do && g.Hi == g.Ho && g.Wi == g.Wo;
  g.depthwise = g.Cig == 1 && g.Cog <= 4 && !g.unit;
  return g;
}

int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Smallest number of pieces (<= inner) to cut an inner dim into so that outer * pieces items
// share out evenly over `threads` (a multiple of it, or so many that the remainder is small).
int64_t pieces_for(int64_t outer, int64_t inner, int threads) {
  if (threads <= 1 || inner <= 1) return 1;
  for (int64_t s = 1; s <= inner; ++s) {
    if ((outer * s) % threads == 0 || outer * s >= 8 * threads) return s;
  }
  return inner;
}

// Length of a chunk of window positions for a column matrix of `rows` rows, balanced so that
// all chunks of [0, Lo) have about the same length.
int64_t chunk_len(int64_t rows, int64_t Lo, int64_t elem_bytes) {
  if (Lo <= 0) return 1;
  const int64_t want = std::max<int64_t>(kChunkBytes / (elem_bytes * std::max<int64_t>(rows, 1)), 64);
  const int64_t n_chunks = (Lo + want - 1) / want;
  return (Lo + n_chunks - 1) / n_chunks;
}

// Window positions o in [0, n_o) whose tap lands inside [0, n_i): 0 <= o * s + off < n_i.
inline void valid_range(int64_t off, int64_t s, int64_t n_i, int64_t n_o, int64_t* lo,
                        int64_t* hi) {
  int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t b = (n_i - 1 - off) < 0 ? 0 : (n_i - 1 - off) / s + 1;
  a = std::min(a, n_o);
  b = std::min(b, n_o);
  *lo = a;
  *hi = std::max(a, b);
}

// Calls f(dst_offset, x_row_offset_or_-1, ow0, ow1) for each row segment of window positions
// [l0, l1) for the tap (a, b) in d and h: dst_offset is where position (row, ow0) goes in a
// chunk that starts at l0; x_row_offset is the start of the image row the tap reads (-1 when
// the tap falls in the padding for this row).
template <class F>
inline void for_row_segments(const Geom& g, int64_t a, int64_t b, int64_t l0, int64_t l1, F&& f) {
  if (l1 <= l0) return;  // also keeps Wo == 0 or Ho == 0 away from the divisions
  int64_t r = l0 / g.Wo;  // r = od * Ho + oh, counted up without dividing again
  int64_t od = r / g.Ho, oh = r % g.Ho;
  for (int64_t pos = l0; pos < l1; ++r) {
    const int64_t ow0 = pos - r * g.Wo;
    const int64_t ow1 = std::min<int64_t>(l1 - r * g.Wo, g.Wo);
    const int64_t id = od * g.sd - g.pd + a * g.dd;
    const int64_t ih = oh * g.sh - g.ph + b * g.dh;
    const bool inside = id >= 0 && id < g.Di && ih >= 0 && ih < g.Hi;
    f(pos - l0, inside ? (id * g.Hi + ih) * g.Wi : int64_t(-1), ow0, ow1);
    pos += ow1 - ow0;
    if (++oh == g.Ho) oh = 0, ++od;
  }
}

// col (nc*K x (l1-l0), row-major) = im2col of image channels [c0, c0+nc) for window positions
// [l0, l1). im points at channel 0 of one (sample, group).
template <class T>
void im2col(const T* im, int64_t c0, int64_t nc, int64_t l0, int64_t l1, const Geom& g, T* col) {
  const int64_t lc = l1 - l0;
  if (lc <= 0) return;
  for (int64_t c = 0; c < nc; ++c) {
    const T* xc = im + (c0 + c) * g.Li;
    for (int64_t a = 0; a < g.kd; ++a)
      for (int64_t b = 0; b < g.kh; ++b)
        for (int64_t e = 0; e < g.kw; ++e) {
          T* dst = col + (((c * g.kd + a) * g.kh + b) * g.kw + e) * lc;
          const int64_t off = e * g.dw - g.pw;
          int64_t wlo, whi;
          valid_range(off, g.sw, g.Wi, g.Wo, &wlo, &whi);
          for_row_segments(g, a, b, l0, l1, [&](int64_t d0, int64_t xrow, int64_t ow0, int64_t ow1) {
            T* ds = dst + d0;  // ds[j] is window position (row, ow0 + j)
            if (xrow < 0) {
              for (int64_t j = 0; j < ow1 - ow0; ++j) ds[j] = T(0);
              return;
            }
            const int64_t lo = std::clamp(wlo, ow0, ow1), hi = std::clamp(whi, lo, ow1);
            for (int64_t j = 0; j < lo - ow0; ++j) ds[j] = T(0);
            T* dv = ds + (lo - ow0);
            const T* xr = xc + xrow + lo * g.sw + off;  // tap of position lo
            if (g.sw == 1) {
              for (int64_t j = 0; j < hi - lo; ++j) dv[j] = xr[j];
            } else {
              for (int64_t j = 0; j < hi - lo; ++j) dv[j] = xr[j * g.sw];
            }
            for (int64_t j = hi - ow0; j < ow1 - ow0; ++j) ds[j] = T(0);
          });
        }
  }
}

// The adjoint of im2col: image channels [c0, c0+nc) += scatter of col. Taps that fall in the
// padding are dropped.
template <class T>
void col2im_add(const T* col, int64_t c0, int64_t nc, int64_t l0, int64_t l1, const Geom& g, T* im) {
  const int64_t lc = l1 - l0;
  if (lc <= 0) return;
  for (int64_t c = 0; c < nc; ++c) {
    T* xc = im + (c0 + c) * g.Li;
    for (int64_t a = 0; a < g.kd; ++a)
      for (int64_t b = 0; b < g.kh; ++b)
        for (int64_t e = 0; e < g.kw; ++e) {
          const T* src = col + (((c * g.kd + a) * g.kh + b) * g.kw + e) * lc;
          const int64_t off = e * g.dw - g.pw;
          int64_t wlo, whi;
          valid_range(off, g.sw, g.Wi, g.Wo, &wlo, &whi);
          for_row_segments(g, a, b, l0, l1, [&](int64_t d0, int64_t xrow, int64_t ow0, int64_t ow1) {
            if (xrow < 0) return;
            const int64_t lo = std::clamp(wlo, ow0, ow1), hi = std::clamp(whi, lo, ow1);
            const T* sp = src + d0 + (lo - ow0);        // column of position lo
            T* xr = xc + xrow + lo * g.sw + off;        // its tap in the image
            if (g.sw == 1) {
              for (int64_t j = 0; j < hi - lo; ++j) xr[j] += sp[j];
            } else {
              for (int64_t j = 0; j < hi - lo; ++j) xr[j * g.sw] += sp[j];
            }
          });
        }
  }
}

template <class T>
using MatCM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class T>
using MapM = Eigen::Map<MatCM<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using CMapM = Eigen::Map<const MatCM<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// ---------------------------------------------------------------------------------------------
// Depthwise: one image channel per group (Cig == 1), direct loops.
// Column channel co reads image channel co / Cog.

// y[n, co] = bias[co] + sum_t w[co, t] * x[n, co / Cog, window(o) + t]
template <class T>
void correlate_depthwise(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  const int64_t items = g.N * g.Co;
  const bool par = double(items) * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t n = it / g.Co, co = it % g.Co;
    T* yp = y + it * g.Lo;
    const T* xp = x + (n * g.Ci + co / g.Cog) * g.Li;
    const T* wp = w + co * g.K;
    std::fill(yp, yp + g.Lo, bias ? bias[co] : T(0));
    for (int64_t a = 0; a < g.kd; ++a)
      for (int64_t b = 0; b < g.kh; ++b)
        for (int64_t e = 0; e < g.kw; ++e) {
          const T wv = wp[(a * g.kh + b) * g.kw + e];
          const int64_t off = e * g.dw - g.pw;
          int64_t lo, hi;
          valid_range(off, g.sw, g.Wi, g.Wo, &lo, &hi);
          if (hi <= lo) continue;
          for_row_segments(g, a, b, 0, g.Lo, [&](int64_t d0, int64_t xrow, int64_t, int64_t) {
            if (xrow < 0) return;
            T* yr = yp + d0;
            const T* xr = xp + xrow;
            if (g.sw == 1) {
              const T* xs = xr + lo + off;
              T* ys = yr + lo;
              for (int64_t j = 0; j < hi - lo; ++j) ys[j] += wv * xs[j];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * g.sw + off];
            }
          });
        }
  }
}

// x[n, c] = bias[c] + sum_{co of group c} sum_t w[co, t] * scatter(y[n, co])
template <class T>
void correlate_adjoint_depthwise(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  const int64_t items = g.N * g.Ci;  // one image plane each; Ci == G
  const bool par = double(items) * g.Cog * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t n = it / g.Ci, c = it % g.Ci;
    T* xp = x + it * g.Li;
    std::fill(xp, xp + g.Li, bias ? bias[c] : T(0));
    for (int64_t j = 0; j < g.Cog; ++j) {
      const int64_t co = c * g.Cog + j;
      const T* yp = y + (n * g.Co + co) * g.Lo;
      const T* wp = w + co * g.K;
      for (int64_t a = 0; a < g.kd; ++a)
        for (int64_t b = 0; b < g.kh; ++b)
          for (int64_t e = 0; e < g.kw; ++e) {
            const T wv = wp[(a * g.kh + b) * g.kw + e];
            const int64_t off = e * g.dw - g.pw;
            int64_t lo, hi;
            valid_range(off, g.sw, g.Wi, g.Wo, &lo, &hi);
            if (hi <= lo) continue;
            for_row_segments(g, a, b, 0, g.Lo, [&](int64_t d0, int64_t xrow, int64_t, int64_t) {
              if (xrow < 0) return;
              const T* yr = yp + d0;
              T* xr = xp + xrow;
              if (g.sw == 1) {
                T* xs = xr + lo + off;
                const T* ys = yr + lo;
                for (int64_t q = 0; q < hi - lo; ++q) xs[q] += wv * ys[q];
              } else {
                for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw + off] += wv * yr[ow];
              }
            });
          }
    }
  }
}

// dw[co, t] = sum_n sum_o y[n, co, o] * x[n, co / Cog, window(o) + t]; each row's dot product in
// T, the long sum over rows and samples in double.
template <class T>
void weight_grad_depthwise(const T* y, const T* x, T* dw, const Geom& g) {
  const int64_t items = g.Co * g.K;
  const bool par = double(items) * g.N * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t co = it / g.K, t = it % g.K;
    const int64_t a = t / (g.kh * g.kw), b = (t / g.kw) % g.kh, e = t % g.kw;
    const int64_t off = e * g.dw - g.pw;
    int64_t lo, hi;
    valid_range(off, g.sw, g.Wi, g.Wo, &lo, &hi);
    double acc = 0;
    for (int64_t n = 0; n < g.N && hi > lo; ++n) {
      const T* yp = y + (n * g.Co + co) * g.Lo;
      const T* xp = x + (n * g.Ci + co / g.Cog) * g.Li;
      for_row_segments(g, a, b, 0, g.Lo, [&](int64_t d0, int64_t xrow, int64_t, int64_t) {
        if (xrow < 0) return;
        const T* yr = yp + d0;
        const T* xr = xp + xrow;
        T s = 0;
        if (g.sw == 1) {
          const T* xs = xr + off;
#pragma omp simd reduction(+ : s)
          for (int64_t ow = lo; ow < hi; ++ow) s += yr[ow] * xs[ow];
        } else {
#pragma omp simd reduction(+ : s)
          for (int64_t ow = lo; ow < hi; ++ow) s += yr[ow] * xr[ow * g.sw + off];
        }
        acc += double(s);
      });
    }
    dw[it] = T(acc);
  }
}

// ---------------------------------------------------------------------------------------------
// The three pieces, general path (im2col / col2im + GEMM).

// y[n, g] = w[g] . im2col(x[n, g]) (+ bias), items (n, g, chunk of window positions).
template <class T>
void correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  if (g.N == 0 || g.Co == 0 || g.Lo == 0) return;
  if (g.depthwise) return correlate_depthwise(x, w, bias, y, g);
  const int64_t lc = chunk_len(g.CKg, g.Lo, sizeof(T));
  const int64_t n_chunks = (g.Lo + lc - 1) / lc;
  const int64_t items = g.N * g.G * n_chunks;
  const bool par = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    std::vector<T> col(g.unit ? 0 : g.CKg * lc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_chunks, ch = it % n_chunks;  // ng = n * G + group
      const int64_t grp = ng % g.G;
      const int64_t l0 = ch * lc, l1 = std::min(g.Lo, l0 + lc), len = l1 - l0;
      const T* xg = x + ng * g.Cig * g.Li;
      const T* cp = xg + l0;  // unit: the image is the column matrix
      int64_t ldc = g.Li;
      if (!g.unit) {
        im2col(xg, 0, g.Cig, l0, l1, g, col.data());
        cp = col.data();
        ldc = len;
      }
      MapM<T> yT(y + ng * g.Cog * g.Lo + l0, len, g.Cog, Eigen::OuterStride<>(g.Lo));
      if (g.CKg == 0) {
        for (int64_t co = 0; co < g.Cog; ++co) yT.col(co).setConstant(bias ? bias[grp * g.Cog + co] : T(0));
        continue;
      }
      CMapM<T> colT(cp, len, g.CKg, Eigen::OuterStride<>(ldc));
      CMapM<T> wT(w + grp * g.Cog * g.CKg, g.CKg, g.Cog, Eigen::OuterStride<>(g.CKg));
      if (bias) {
        for (int64_t co = 0; co < g.Cog; ++co) yT.col(co).setConstant(bias[grp * g.Cog + co]);
        yT.noalias() += colT * wT;
      } else {
        yT.noalias() = colT * wT;
      }
    }
  }
}

// x[n, g] = col2im(w[g]^T . y[n, g]) (+ bias), items (n, g, block of image channels).
template <class T>
void correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  if (g.N == 0 || g.Ci == 0 || g.Li == 0) return;
  if (g.depthwise) return correlate_adjoint_depthwise(y, w, bias, x, g);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_blocks = pieces_for(g.N * g.G, g.Cig, big ? max_threads() : 1);
  const int64_t cb = (g.Cig + n_blocks - 1) / n_blocks;
  const int64_t items = g.N * g.G * n_blocks;
  const int64_t lc = chunk_len(cb * g.K, g.Lo, sizeof(T));
  const bool par = big && items > 1;
#pragma omp parallel if (par)
  {
    std::vector<T> col(g.unit ? 0 : cb * g.K * lc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_blocks, blk = it % n_blocks;
      const int64_t grp = ng % g.G;
      const int64_t c0 = blk * cb, nc = std::min(g.Cig, c0 + cb) - c0;
      if (nc <= 0) continue;
      T* xg = x + ng * g.Cig * g.Li;
      const T* yg = y + ng * g.Cog * g.Lo;
      // rows (c0 .. c0+nc) x K of w[g]^T, as a (nc*K x Cog) column-major block
      CMapM<T> wsub(w + grp * g.Cog * g.CKg + c0 * g.K, nc * g.K, g.Cog, Eigen::OuterStride<>(g.CKg));
      if (g.unit) {
        MapM<T> xT(xg + c0 * g.Li, g.Li, nc, Eigen::OuterStride<>(g.Li));
        if (g.Cog == 0) {
          xT.setZero();
        } else {
          CMapM<T> yT(yg, g.Lo, g.Cog, Eigen::OuterStride<>(g.Lo));
          xT.noalias() = yT * wsub.transpose();
        }
      } else {
        std::fill(xg + c0 * g.Li, xg + (c0 + nc) * g.Li, T(0));
        if (g.Cog > 0) {
          for (int64_t l0 = 0; l0 < g.Lo; l0 += lc) {
            const int64_t l1 = std::min(g.Lo, l0 + lc), len = l1 - l0;
            MapM<T> colT(col.data(), len, nc * g.K, Eigen::OuterStride<>(len));
            CMapM<T> yT(yg + l0, len, g.Cog, Eigen::OuterStride<>(g.Lo));
            colT.noalias() = yT * wsub.transpose();
            col2im_add(col.data(), c0, nc, l0, l1, g, xg);
          }
        }
      }
      if (bias) {
        for (int64_t c = c0; c < c0 + nc; ++c) {
          const T b = bias[grp * g.Cig + c];
          T* xc = xg + c * g.Li;
          for (int64_t i = 0; i < g.Li; ++i) xc[i] += b;
        }
      }
    }
  }
}

// dw[g] = sum_n y[n, g] . im2col(x[n, g])^T, items (g, ci block, co block); each item sums
// samples, then chunks of window positions, in increasing order. The chunk length depends on
// the shape only, never on the thread count.
template <class T>
void weight_grad(const T* y, const T* x, T* dw, const Geom& g) {
  if (g.Co == 0 || g.CKg == 0) return;
  if (g.depthwise) return weight_grad_depthwise(y, x, dw, g);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int threads = big ? max_threads() : 1;
  const int64_t nb_ci = pieces_for(g.G, g.Cig, threads);
  const int64_t nb_co = pieces_for(g.G * nb_ci, g.Cog, threads);
  const int64_t cb = (g.Cig + nb_ci - 1) / nb_ci, ob = (g.Cog + nb_co - 1) / nb_co;
  const int64_t items = g.G * nb_ci * nb_co;
  const int64_t lc = g.unit ? std::max<int64_t>(g.Lo, 1) : chunk_len(g.CKg, g.Lo, sizeof(T));
  const bool par = big && items > 1;
#pragma omp parallel if (par)
  {
    std::vector<T> col(g.unit ? 0 : cb * g.K * lc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t grp = it / (nb_ci * nb_co);
      const int64_t bi = (it / nb_co) % nb_ci, bo = it % nb_co;
      const int64_t c0 = bi * cb, nc = std::min(g.Cig, c0 + cb) - c0;
      const int64_t o0 = bo * ob, no = std::min(g.Cog, o0 + ob) - o0;
      if (nc <= 0 || no <= 0) continue;
      // dw[g, o0:o0+no, c0:c0+nc, :] as a (nc*K x no) column-major block
      MapM<T> dwT(dw + (grp * g.Cog + o0) * g.CKg + c0 * g.K, nc * g.K, no, Eigen::OuterStride<>(g.CKg));
      dwT.setZero();
      for (int64_t n = 0; n < g.N; ++n) {
        const T* xg = x + (n * g.G + grp) * g.Cig * g.Li;
        const T* yg = y + ((n * g.G + grp) * g.Cog + o0) * g.Lo;
        for (int64_t l0 = 0; l0 < g.Lo; l0 += lc) {
          const int64_t l1 = std::min(g.Lo, l0 + lc), len = l1 - l0;
          const T* cp = xg + c0 * g.Li + l0;
          int64_t ldc = g.Li;
          if (!g.unit) {
            im2col(xg, c0, nc, l0, l1, g, col.data());
            cp = col.data();
            ldc = len;
          }
          CMapM<T> colT(cp, len, nc * g.K, Eigen::OuterStride<>(ldc));
          CMapM<T> yT(yg + l0, len, no, Eigen::OuterStride<>(g.Lo));
          dwT.noalias() += colT.transpose() * yT;
        }
      }
    }
  }
}

// db[c] = sum_n sum_o dy[n, c, o], in double.
template <class T>
void bias_grad(const T* dy, T* db, int64_t N, int64_t C, int64_t L) {
  const bool par = double(N) * C * L >= kParallelWork && C > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t c = 0; c < C; ++c) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T* p = dy + (n * C + c) * L;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < L; ++i) acc += double(p[i]);
    }
    db[c] = T(acc);
  }
}

}  // namespace

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

}  // namespace tg::kernels
