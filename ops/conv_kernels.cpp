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
//   correlate          y = w . im2col(x)           normal forward    | transposed grad_input
//   correlate_adjoint  x = col2im(w^T . y)         normal grad_input | transposed forward
//   weight_grad        dw = sum_n y . im2col(x)^T  normal: y = grad_output, x = input
//                                                  transposed: y = input, x = grad_output
//
// im2col(x) is the (CKg x Lo) matrix whose row (ci, t) holds x[ci, o * stride - pad + t * dil]
// for every window position o (zero outside the image); col2im is its adjoint (a scatter-add).
// The GEMMs are Eigen's, on column-major maps of our row-major buffers: a row-major (R x C)
// buffer is a column-major (C x R) matrix, so y^T (Lo x Cog) = im2col(x)^T (Lo x CKg) * w^T.
//
// How im2col stays cheap:
//   - the image block is first copied into a zero-padded box P (Dp, Hp, Wp) that holds exactly
//     what the windows cover, so no inner loop checks bounds;
//   - when the windows move by 1 in H and W ("flat" geometry), window positions are laid on a
//     grid as wide as P (Wq = Wp instead of Wo): then tap t of every position of a whole (oh, ow)
//     slice is P[q + offset(t)], and a row of the column matrix is one long memcpy. The extra
//     Wp - Wo positions per row are garbage: their outputs are dropped, and they are zeroed
//     wherever they would enter a sum, so non-finite values never leak;
//   - otherwise (strided), rows are copied one output row at a time.
// Column matrices are built in chunks of window positions (about kChunkBytes) so that they
// stay in the L2 cache between im2col and the GEMM.
//
// Parallel plan (OpenMP, no atomics): every piece is cut into items that each own the slice of
// the result they write, and the cut never changes the order of any sum, so results are
// bit-identical for any thread count:
//   correlate:          items (n, g, range of chunks)             -> owns y[n, g, range]
//   correlate_adjoint:  items (n, g, block of image channels)     -> owns x[n, g, block]
//   weight_grad:        items (slot of samples, g, block of ci, block of co) -> owns its slot's
//                       partial dw[g, co-block, ci-block]; slots are added in a fixed order
// Chunk lengths depend on the shape only. Inside our parallel regions Eigen's GEMM runs
// single-threaded (Eigen checks omp_get_num_threads()).
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
#include <cmath>
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
// GEMM's packing right away, so it should stay in L2 (1 MB per core here).
constexpr int64_t kChunkBytes = 512 * 1024;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kParallelWork = 1 << 17;
// Window positions the direct depthwise loops keep in registers at once.
constexpr int64_t kBlock = 64;
// Items that correlate_adjoint and weight_grad aim for when the batch alone gives too few. It is
// a constant, not the thread count: Eigen's GEMM sums an entry in an order that depends on
// where the entry falls in its blocking, so the cut into GEMMs must depend on the shape only for
// results to be identical for any thread count. 4 keeps 1, 2 or 4 threads evenly busy.
constexpr int kSplitTarget = 4;

// Per-thread scratch memory, kept from call to call: fresh pages on every call (allocation,
// zeroing, page faults) cost more than a small convolution. Buffers above kKeepBytes are not
// kept. Slot tells apart the buffers one thread uses at the same time. Contents are
// unspecified: every user writes before it reads.
constexpr int64_t kKeepBytes = int64_t(16) << 20;

template <class T, int Slot>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    if (n * int64_t(sizeof(T)) <= kKeepBytes) {
      std::vector<T>& kept = cache();
      if (int64_t(kept.size()) < n) kept.resize(n);
      p_ = kept.data();
    } else {
      own_.resize(n);
      p_ = own_.data();
    }
  }
  T* data() { return p_; }
  T& operator[](int64_t i) { return p_[i]; }

 private:
  static std::vector<T>& cache() {
    thread_local std::vector<T> kept;
    return kept;
  }
  std::vector<T> own_;
  T* p_ = nullptr;
};

struct Geom {
  int64_t N, G;
  int64_t Ci, Co, Cig, Cog;  // image / column-side channels, and per group
  int64_t Di, Hi, Wi, Li;    // image spatial sizes
  int64_t Do, Ho, Wo, Lo;    // window positions
  int64_t kd, kh, kw, K;
  int64_t sd, sh, sw, dd, dh, dw, pd, ph, pw;
  int64_t CKg;               // rows of one group's column matrix
  int64_t Dp, Hp, Wp, Lp;    // padded box: the part of the padded image the windows cover
  int64_t slack;             // zeros after the last box: flat reads and depthwise blocks overrun
  bool flat;                 // windows move by 1 in H and W: grid rows are as wide as the box
  int64_t Wq, Lq;            // grid of window positions (Do, Ho, Wq); Wq = Wp if flat, else Wo
  bool unit;                 // 1x1x1, stride 1, no padding: the column matrix is the image
  bool depthwise;            // one image channel per group: direct loops
};

// Fills the derived fields of g from N, G, channels, sizes, kernel, stride, dilation, pad.
void finish_geom(Geom& g) {
  g.Cig = g.Ci / g.G;
  g.Cog = g.Co / g.G;
  g.Li = g.Di * g.Hi * g.Wi;
  g.Lo = g.Do * g.Ho * g.Wo;
  g.K = g.kd * g.kh * g.kw;
  g.CKg = g.Cig * g.K;
  auto extent = [](int64_t o, int64_t s, int64_t k, int64_t d) {
    return o > 0 ? (o - 1) * s + (k - 1) * d + 1 : 0;
  };
  g.Dp = extent(g.Do, g.sd, g.kd, g.dd);
  g.Hp = extent(g.Ho, g.sh, g.kh, g.dh);
  g.Wp = extent(g.Wo, g.sw, g.kw, g.dw);
  g.Lp = g.Dp * g.Hp * g.Wp;
  g.slack = (g.kw - 1) * g.dw + kBlock;
  g.unit = g.K == 1 && g.sd == 1 && g.sh == 1 && g.sw == 1 && g.pd == 0 && g.ph == 0 &&
           g.pw == 0 && g.Di == g.Do && g.Hi == g.Ho && g.Wi == g.Wo;
  g.depthwise = g.Cig == 1 && g.Cog <= 4 && !g.unit;
  // the garbage columns cost GEMM work: go flat only while they are at most a quarter of a row
  g.flat = !g.unit && g.sh == 1 && g.sw == 1 && (g.Wp - g.Wo) * 4 <= g.Wo;
  g.Wq = g.flat ? g.Wp : g.Wo;
  g.Lq = g.Do * g.Ho * g.Wq;
}

Geom make_geom(const ConvParams& p) {
  Geom g{};
  const auto& isz = p.transposed ? p.out : p.in;
  const auto& osz = p.transposed ? p.in : p.out;
  g.N = p.N;
  g.G = p.groups > 0 ? p.groups : 1;
  g.Ci = p.transposed ? p.C_out : p.C_in;
  g.Co = p.transposed ? p.C_in : p.C_out;
  g.Di = isz[0], g.Hi = isz[1], g.Wi = isz[2];
  g.Do = osz[0], g.Ho = osz[1], g.Wo = osz[2];
  g.kd = p.kernel[0], g.kh = p.kernel[1], g.kw = p.kernel[2];
  g.sd = p.stride[0], g.sh = p.stride[1], g.sw = p.stride[2];
  g.dd = p.dilation[0], g.dh = p.dilation[1], g.dw = p.dilation[2];
  g.pd = p.pad_before[0], g.ph = p.pad_before[1], g.pw = p.pad_before[2];
  finish_geom(g);
  return g;
}

// With stride 1, x = col2im(w^T . y) is itself a correlation of y with the flipped, transposed
// kernel: x[ci, i] = sum_{co, t} w[co, ci, K-1-t] * y[co, i - (dil*(k-1) - pad) + t*dil].
// Running it as one avoids col2im's read-modify-write passes. Usable while that padding is
// >= 0, and worth it unless it would make a GEMM with very few columns (few image channels).
bool adjoint_as_correlation(const Geom& g) {
  return !g.unit && !g.depthwise && g.sd == 1 && g.sh == 1 && g.sw == 1 &&
         g.pd <= g.dd * (g.kd - 1) && g.ph <= g.dh * (g.kh - 1) && g.pw <= g.dw * (g.kw - 1) &&
         (g.Cig >= 16 || g.Cig >= g.Cog);
}

template <class T>
bool all_finite(const T* v, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(v[i]);
  return ok;
}

Geom adjoint_geom(const Geom& g) {
  Geom a{};
  a.N = g.N, a.G = g.G;
  a.Ci = g.Co, a.Co = g.Ci;  // the image is now y, the columns x
  a.Di = g.Do, a.Hi = g.Ho, a.Wi = g.Wo;
  a.Do = g.Di, a.Ho = g.Hi, a.Wo = g.Wi;
  a.kd = g.kd, a.kh = g.kh, a.kw = g.kw;
  a.sd = a.sh = a.sw = 1;
  a.dd = g.dd, a.dh = g.dh, a.dw = g.dw;
  a.pd = g.dd * (g.kd - 1) - g.pd;
  a.ph = g.dh * (g.kh - 1) - g.ph;
  a.pw = g.dw * (g.kw - 1) - g.pw;
  finish_geom(a);
  return a;
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

// Length of a chunk of grid positions for a column matrix of `rows` rows, balanced so that all
// chunks of [0, L) have about the same length. Depends on the shape only.
int64_t chunk_len(int64_t rows, int64_t L, int64_t elem_bytes) {
  if (L <= 0) return 1;
  const int64_t want = std::max<int64_t>(kChunkBytes / (elem_bytes * std::max<int64_t>(rows, 1)), 192);
  const int64_t n_chunks = (L + want - 1) / want;
  return (L + n_chunks - 1) / n_chunks;
}

// Calls f(offset, od, oh, u0, u1) for each grid row (od, oh) that meets the grid range [q0, q1):
// [u0, u1) are the row's columns inside the range, offset is where column u0 sits from q0.
template <class F>
inline void for_grid_rows(const Geom& g, int64_t q0, int64_t q1, F&& f) {
  if (q1 <= q0) return;  // also keeps Wq == 0 or Ho == 0 away from the divisions
  int64_t r = q0 / g.Wq;
  int64_t od = r / g.Ho, oh = r % g.Ho;
  for (int64_t q = q0; q < q1; ++r) {
    const int64_t u0 = q - r * g.Wq, u1 = std::min<int64_t>(g.Wq, q1 - r * g.Wq);
    f(q - q0, od, oh, u0, u1);
    q += u1 - u0;
    if (++oh == g.Ho) oh = 0, ++od;
  }
}

// P = nc image channels, each placed at (pd, ph, pw) in a zero box (Dp, Hp, Wp); image parts no
// window reaches are left out. P holds nc * Lp + slack elements.
template <class T>
void pad_image(const T* im, int64_t nc, const Geom& g, T* P) {
  const int64_t a = std::min(g.pw, g.Wp), b = std::max(a, std::min(g.pw + g.Wi, g.Wp));
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t z = 0; z < g.Dp; ++z)
      for (int64_t yy = 0; yy < g.Hp; ++yy) {
        T* row = P + ((c * g.Dp + z) * g.Hp + yy) * g.Wp;
        const int64_t iz = z - g.pd, iy = yy - g.ph;
        if (iz < 0 || iz >= g.Di || iy < 0 || iy >= g.Hi) {
          std::fill(row, row + g.Wp, T(0));
          continue;
        }
        std::fill(row, row + a, T(0));
        if (b > a) std::memcpy(row + a, im + ((c * g.Di + iz) * g.Hi + iy) * g.Wi, sizeof(T) * (b - a));
        std::fill(row + b, row + g.Wp, T(0));
      }
  std::fill(P + nc * g.Lp, P + nc * g.Lp + g.slack, T(0));
}

// The adjoint of pad_image: x channels = the image part of the boxes gP (0 where no window
// reaches).
template <class T>
void crop_image(const T* gP, int64_t nc, const Geom& g, T* x) {
  const int64_t n = std::clamp<int64_t>(g.Wp - g.pw, 0, g.Wi);
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t iz = 0; iz < g.Di; ++iz)
      for (int64_t iy = 0; iy < g.Hi; ++iy) {
        T* xr = x + ((c * g.Di + iz) * g.Hi + iy) * g.Wi;
        const int64_t z = iz + g.pd, yy = iy + g.ph;
        const bool covered = z < g.Dp && yy < g.Hp;
        if (covered && n > 0) std::memcpy(xr, gP + ((c * g.Dp + z) * g.Hp + yy) * g.Wp + g.pw, sizeof(T) * n);
        std::fill(xr + (covered ? n : 0), xr + g.Wi, T(0));
      }
}

// col (nc*K x (q1-q0), row-major) = im2col of boxes P for grid positions [q0, q1).
template <class T>
void im2col(const T* P, int64_t nc, int64_t q0, int64_t q1, const Geom& g, T* col) {
  const int64_t lc = q1 - q0, HWp = g.Hp * g.Wp;
  if (lc <= 0) return;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t a = 0; a < g.kd; ++a)
      for (int64_t b = 0; b < g.kh; ++b)
        for (int64_t e = 0; e < g.kw; ++e) {
          T* dst = col + (((c * g.kd + a) * g.kh + b) * g.kw + e) * lc;
          const T* Pt = P + c * g.Lp + a * g.dd * HWp + b * g.dh * g.Wp + e * g.dw;  // tap (a,b,e)
          if (g.flat) {  // a whole (oh, ow) slice of the grid is one contiguous run of P
            const int64_t S = g.Ho * g.Wp;
            for (int64_t od = q0 / S; od * S < q1; ++od) {
              const int64_t s0 = std::max(q0, od * S), s1 = std::min(q1, od * S + S);
              std::memcpy(dst + (s0 - q0), Pt + od * g.sd * HWp + (s0 - od * S), sizeof(T) * (s1 - s0));
            }
          } else {
            for_grid_rows(g, q0, q1, [&](int64_t off, int64_t od, int64_t oh, int64_t u0, int64_t u1) {
              const T* src = Pt + (od * g.sd * g.Hp + oh * g.sh) * g.Wp + u0 * g.sw;
              T* d = dst + off;
              if (g.sw == 1) {
                for (int64_t j = 0; j < u1 - u0; ++j) d[j] = src[j];
              } else {
                for (int64_t j = 0; j < u1 - u0; ++j) d[j] = src[j * g.sw];
              }
            });
          }
        }
}

// The adjoint of im2col: boxes gP += scatter of col. With a flat grid the garbage columns of
// col must be zero (zero_garbage).
template <class T>
void col2im_add(const T* col, int64_t nc, int64_t q0, int64_t q1, const Geom& g, T* gP) {
  const int64_t lc = q1 - q0, HWp = g.Hp * g.Wp;
  if (lc <= 0) return;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t a = 0; a < g.kd; ++a)
      for (int64_t b = 0; b < g.kh; ++b)
        for (int64_t e = 0; e < g.kw; ++e) {
          const T* src = col + (((c * g.kd + a) * g.kh + b) * g.kw + e) * lc;
          T* Pt = gP + c * g.Lp + a * g.dd * HWp + b * g.dh * g.Wp + e * g.dw;
          if (g.flat) {
            const int64_t S = g.Ho * g.Wp;
            for (int64_t od = q0 / S; od * S < q1; ++od) {
              const int64_t s0 = std::max(q0, od * S), s1 = std::min(q1, od * S + S);
              T* d = Pt + od * g.sd * HWp + (s0 - od * S);
              const T* s = src + (s0 - q0);
              for (int64_t j = 0; j < s1 - s0; ++j) d[j] += s[j];
            }
          } else {
            for_grid_rows(g, q0, q1, [&](int64_t off, int64_t od, int64_t oh, int64_t u0, int64_t u1) {
              T* d = Pt + (od * g.sd * g.Hp + oh * g.sh) * g.Wp + u0 * g.sw;
              const T* s = src + off;
              if (g.sw == 1) {
                for (int64_t j = 0; j < u1 - u0; ++j) d[j] += s[j];
              } else {
                for (int64_t j = 0; j < u1 - u0; ++j) d[j * g.sw] += s[j];
              }
            });
          }
        }
}

// Zeroes the garbage columns (ow >= Wo) of the `rows` rows of a chunk [q0, q1) of a flat grid,
// so that they add exact zeros to sums even where the image or weight holds Inf or NaN.
template <class T>
void zero_garbage(T* col, int64_t rows, int64_t q0, int64_t q1, const Geom& g) {
  if (!g.flat || g.Wq == g.Wo) return;
  const int64_t lc = q1 - q0;
  for_grid_rows(g, q0, q1, [&](int64_t off, int64_t, int64_t, int64_t u0, int64_t u1) {
    const int64_t v0 = std::max(u0, g.Wo);
    for (int64_t r = 0; r < rows && v0 < u1; ++r) {
      std::fill(col + r * lc + off + (v0 - u0), col + r * lc + off + (u1 - u0), T(0));
    }
  });
}

// ext (column j = ext + j*lc) = channels j < n of y (Lo apart) laid on the grid range [q0, q1),
// zero at garbage positions.
template <class T>
void grid_from_rows(const T* y, int64_t n, int64_t q0, int64_t q1, const Geom& g, T* ext) {
  const int64_t lc = q1 - q0;
  for (int64_t j = 0; j < n; ++j) {
    const T* yc = y + j * g.Lo;
    T* d = ext + j * lc;
    for_grid_rows(g, q0, q1, [&](int64_t off, int64_t od, int64_t oh, int64_t u0, int64_t u1) {
      const T* s = yc + (od * g.Ho + oh) * g.Wo;
      const int64_t v1 = std::max(u0, std::min(u1, g.Wo));
      for (int64_t u = u0; u < v1; ++u) d[off + u - u0] = s[u];
      for (int64_t u = v1; u < u1; ++u) d[off + u - u0] = T(0);
    });
  }
}

template <class T>
using MatCM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class T>
using MapM = Eigen::Map<MatCM<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using CMapM = Eigen::Map<const MatCM<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// ---------------------------------------------------------------------------------------------
// Depthwise: one image channel per group (Cig == 1), direct loops on the padded box.
// Column channel co reads image channel co / Cog.

// y[n, co] = bias[co] + sum_t w[co, t] * x[n, co / Cog, window(o) + t]
template <class T>
void correlate_depthwise(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  const int64_t items = g.N * g.Co, HWp = g.Hp * g.Wp, S = g.Ho * g.Wp;
  const bool par = double(items) * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    Scratch<T, 0> P(g.Lp + g.slack);
    Scratch<T, 1> ext(g.flat ? S + kBlock : 0);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / g.Co, co = it % g.Co;
      const T* wp = w + co * g.K;
      const T b0 = bias ? bias[co] : T(0);
      T* yp = y + it * g.Lo;
      pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g, P.data());
      for (int64_t od = 0; od < g.Do; ++od) {
        const T* Pz = P.data() + od * g.sd * HWp;
        if (g.flat) {
          // every tap of a block of kBlock grid positions is a contiguous run of P: the block
          // stays in registers across the K taps
          for (int64_t q = 0; q < S; q += kBlock) {
            T acc[kBlock];
            for (int64_t j = 0; j < kBlock; ++j) acc[j] = b0;
            const T* wt = wp;
            for (int64_t a = 0; a < g.kd; ++a)
              for (int64_t b = 0; b < g.kh; ++b)
                for (int64_t e = 0; e < g.kw; ++e) {
                  const T wv = *wt++;
                  const T* src = Pz + a * g.dd * HWp + b * g.dh * g.Wp + e * g.dw + q;
                  for (int64_t j = 0; j < kBlock; ++j) acc[j] += wv * src[j];
                }
            for (int64_t j = 0; j < kBlock; ++j) ext[q + j] = acc[j];
          }
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            std::memcpy(yp + (od * g.Ho + oh) * g.Wo, ext.data() + oh * g.Wp, sizeof(T) * g.Wo);
          }
        } else {
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            T* yr = yp + (od * g.Ho + oh) * g.Wo;
            std::fill(yr, yr + g.Wo, b0);
            const T* wt = wp;
            for (int64_t a = 0; a < g.kd; ++a)
              for (int64_t b = 0; b < g.kh; ++b)
                for (int64_t e = 0; e < g.kw; ++e) {
                  const T wv = *wt++;
                  const T* src = Pz + a * g.dd * HWp + (oh * g.sh + b * g.dh) * g.Wp + e * g.dw;
                  for (int64_t ow = 0; ow < g.Wo; ++ow) yr[ow] += wv * src[ow * g.sw];
                }
          }
        }
      }
    }
  }
}

// x[n, c] = bias[c] + sum over the Cog column channels co of c: scatter of w[co, t] * y[n, co]
template <class T>
void correlate_adjoint_depthwise(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  const int64_t items = g.N * g.Ci, HWp = g.Hp * g.Wp;  // Ci == G
  // margin in front of a grid slice, so that the gather below reads zeros before it
  const int64_t M = (g.kh - 1) * g.dh * g.Wp + (g.kw - 1) * g.dw;
  const bool par = double(items) * g.Cog * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    const int64_t Ysize = g.flat ? M + HWp + kBlock : 0;
    Scratch<T, 0> gP(g.Lp + g.slack);
    Scratch<T, 1> Y(Ysize);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / g.Ci, c = it % g.Ci;
      std::fill(gP.data(), gP.data() + g.Lp + g.slack, T(0));
      for (int64_t j = 0; j < g.Cog; ++j) {
        const int64_t co = c * g.Cog + j;
        const T* yp = y + (n * g.Co + co) * g.Lo;
        const T* wp = w + co * g.K;
        // gather form needs y laid on the flat grid with zero margins; a non-finite weight
        // would turn those zeros into NaN, so such channels take the scatter form
        bool finite = true;
        for (int64_t t = 0; t < g.K; ++t) finite = finite && std::isfinite(wp[t]);
        for (int64_t od = 0; od < g.Do; ++od) {
          if (g.flat && finite) {
            // gP slice z = od*sd + a*dd gathers sum_{b,e} w[a,b,e] * y[p - (b*dh*Wp + e*dw)]
            std::fill(Y.data(), Y.data() + Ysize, T(0));
            for (int64_t oh = 0; oh < g.Ho; ++oh) {
              std::memcpy(Y.data() + M + oh * g.Wp, yp + (od * g.Ho + oh) * g.Wo, sizeof(T) * g.Wo);
            }
            for (int64_t a = 0; a < g.kd; ++a) {
              T* Pz = gP.data() + (od * g.sd + a * g.dd) * HWp;
              for (int64_t p = 0; p < HWp; p += kBlock) {
                T acc[kBlock] = {};
                const T* wt = wp + a * g.kh * g.kw;
                for (int64_t b = 0; b < g.kh; ++b)
                  for (int64_t e = 0; e < g.kw; ++e) {
                    const T wv = *wt++;
                    const T* src = Y.data() + M + p - (b * g.dh * g.Wp + e * g.dw);
                    for (int64_t q = 0; q < kBlock; ++q) acc[q] += wv * src[q];
                  }
                const int64_t len = std::min(kBlock, HWp - p);  // never spill into the next slice
                for (int64_t q = 0; q < len; ++q) Pz[p + q] += acc[q];
              }
            }
          } else {
            for (int64_t oh = 0; oh < g.Ho; ++oh) {
              const T* yr = yp + (od * g.Ho + oh) * g.Wo;
              const T* wt = wp;
              for (int64_t a = 0; a < g.kd; ++a)
                for (int64_t b = 0; b < g.kh; ++b)
                  for (int64_t e = 0; e < g.kw; ++e) {
                    const T wv = *wt++;
                    T* dst = gP.data() + (od * g.sd + a * g.dd) * HWp + (oh * g.sh + b * g.dh) * g.Wp + e * g.dw;
                    for (int64_t ow = 0; ow < g.Wo; ++ow) dst[ow * g.sw] += wv * yr[ow];
                  }
            }
          }
        }
      }
      T* xp = x + it * g.Li;
      crop_image(gP.data(), 1, g, xp);
      if (bias) {
        for (int64_t i = 0; i < g.Li; ++i) xp[i] += bias[c];
      }
    }
  }
}

// sum_o y[o] * P[tap(t) + window(o)] over the valid window positions, row by row (exact for any
// values), each row in T and the rows in double.
template <class T>
double depthwise_tap_dot(const T* yp, const T* P, int64_t t, const Geom& g) {
  const int64_t a = t / (g.kh * g.kw), b = (t / g.kw) % g.kh, e = t % g.kw;
  const T* Pt = P + a * g.dd * g.Hp * g.Wp + b * g.dh * g.Wp + e * g.dw;
  double acc = 0;
  for (int64_t od = 0; od < g.Do; ++od)
    for (int64_t oh = 0; oh < g.Ho; ++oh) {
      const T* yr = yp + (od * g.Ho + oh) * g.Wo;
      const T* src = Pt + (od * g.sd * g.Hp + oh * g.sh) * g.Wp;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t ow = 0; ow < g.Wo; ++ow) s += yr[ow] * src[ow * g.sw];
      acc += double(s);
    }
  return acc;
}

// dw[co, t] = sum_n sum_o y[n, co, o] * x[n, co / Cog, window(o) + t]; items own a column channel
// and sum the samples in order; partial sums in T, long sums in double.
template <class T>
void weight_grad_depthwise(const T* y, const T* x, T* dw, const Geom& g) {
  const int64_t items = g.Co, HWp = g.Hp * g.Wp, S = g.Ho * g.Wp;
  const bool par = double(items) * g.K * g.N * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    const int64_t Ysize = g.flat ? S + kBlock : 0;
    Scratch<T, 0> P(g.Lp + g.slack);
    Scratch<T, 1> Y(Ysize);
    Scratch<double, 2> acc(g.K);  // slot 2: with T = double, slots 0 and 1 are taken above
#pragma omp for schedule(static)
    for (int64_t co = 0; co < items; ++co) {
      std::fill(acc.data(), acc.data() + g.K, 0.0);
      for (int64_t n = 0; n < g.N; ++n) {
        const T* yp = y + (n * g.Co + co) * g.Lo;
        pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g, P.data());
        if (!g.flat) {
          for (int64_t t = 0; t < g.K; ++t) acc[t] += depthwise_tap_dot(yp, P.data(), t, g);
          continue;
        }
        // flat: one long dot per tap over the grid, y zero at the garbage positions
        for (int64_t od = 0; od < g.Do; ++od) {
          std::fill(Y.data(), Y.data() + Ysize, T(0));
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            std::memcpy(Y.data() + oh * g.Wp, yp + (od * g.Ho + oh) * g.Wo, sizeof(T) * g.Wo);
          }
          const T* Pz = P.data() + od * g.sd * HWp;
          int64_t t = 0;
          for (int64_t a = 0; a < g.kd; ++a)
            for (int64_t b = 0; b < g.kh; ++b)
              for (int64_t e = 0; e < g.kw; ++e, ++t) {
                const T* src = Pz + a * g.dd * HWp + b * g.dh * g.Wp + e * g.dw;
                T s[kBlock] = {};
                for (int64_t q = 0; q < S; q += kBlock)
                  for (int64_t j = 0; j < kBlock; ++j) s[j] += Y[q + j] * src[q + j];
                double d = 0;
                for (int64_t j = 0; j < kBlock; ++j) d += double(s[j]);
                acc[t] += d;
              }
        }
      }
      for (int64_t t = 0; t < g.K; ++t) {
        if (g.flat && std::isnan(acc[t])) {
          // a garbage position met an Inf or NaN of x (0 * Inf): redo this tap exactly
          acc[t] = 0;
          for (int64_t n = 0; n < g.N; ++n) {
            pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g, P.data());
            acc[t] += depthwise_tap_dot(y + (n * g.Co + co) * g.Lo, P.data(), t, g);
          }
        }
        dw[co * g.K + t] = T(acc[t]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The three pieces, general path (im2col / col2im + GEMM).

// Direct correlation on a flat grid (windows move by 1 in H and W): tap t of grid position q is
// P[q + offset(t)], so no column matrix is needed at all. A block of OB output channels x QB
// grid positions (two vector registers wide) is summed in registers over (ci, t), each step
// broadcasting OB weights repacked as [ci][t][OB]. This keeps the FMA units busier than
// im2col + GEMM, which copies every input K times and packs it again.
template <class T, int OB>
void correlate_direct(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  constexpr int QB = 128 / sizeof(T);
  const int64_t HWp = g.Hp * g.Wp, S = g.Ho * g.Wp;
  const int64_t n_ob = (g.Cog + OB - 1) / OB;
  // wr[grp][ob][ci][t][o] = w[grp*Cog + ob*OB + o][ci][t], zero past Cog
  std::vector<T> wr(g.G * n_ob * g.CKg * OB, T(0));
  for (int64_t grp = 0; grp < g.G; ++grp)
    for (int64_t co = 0; co < g.Cog; ++co)
      for (int64_t k = 0; k < g.CKg; ++k) {
        wr[((grp * n_ob + co / OB) * g.CKg + k) * OB + co % OB] = w[(grp * g.Cog + co) * g.CKg + k];
      }
  std::vector<int64_t> off(g.K);
  for (int64_t a = 0, t = 0; a < g.kd; ++a)
    for (int64_t b = 0; b < g.kh; ++b)
      for (int64_t e = 0; e < g.kw; ++e, ++t) off[t] = a * g.dd * HWp + b * g.dh * g.Wp + e * g.dw;
  const int64_t n_qb = (S + QB - 1) / QB;  // blocks per od slice
  const int64_t blocks = g.Do * n_qb;
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_parts = pieces_for(g.N * g.G, blocks, big ? max_threads() : 1);
  const int64_t per_part = (blocks + n_parts - 1) / n_parts;
  const int64_t items = g.N * g.G * n_parts;
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> P(g.Cig * g.Lp + g.slack);  // slack covers the last block's overrun
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_parts, part = it % n_parts;  // ng = n * G + group
      const int64_t grp = ng % g.G;
      pad_image(x + ng * g.Cig * g.Li, g.Cig, g, P.data());
      const int64_t blk1 = std::min(blocks, (part + 1) * per_part);
      for (int64_t blk = part * per_part; blk < blk1; ++blk) {
        const int64_t od = blk / n_qb, q = (blk % n_qb) * QB;
        const T* Pq = P.data() + od * g.sd * HWp + q;
        for (int64_t ob = 0; ob < n_ob; ++ob) {
          const int64_t co0 = grp * g.Cog + ob * OB, n_co = std::min<int64_t>(OB, g.Cog - ob * OB);
          T acc[OB][QB];
          for (int o = 0; o < OB; ++o) {
            const T b0 = bias && o < n_co ? bias[co0 + o] : T(0);
            for (int j = 0; j < QB; ++j) acc[o][j] = b0;
          }
          const T* wt = wr.data() + (grp * n_ob + ob) * g.CKg * OB;
          for (int64_t ci = 0; ci < g.Cig; ++ci) {
            const T* Pc = Pq + ci * g.Lp;
            for (int64_t t = 0; t < g.K; ++t, wt += OB) {
              const T* src = Pc + off[t];
              for (int o = 0; o < OB; ++o)
                for (int j = 0; j < QB; ++j) acc[o][j] += wt[o] * src[j];
            }
          }
          // the block's valid positions, row by row, into y
          T* yc = y + (ng / g.G * g.Co + co0) * g.Lo + od * g.Ho * g.Wo;
          int64_t oh = q / g.Wp, ow = q % g.Wp;
          for (int64_t j = 0; j < QB && oh < g.Ho; ++oh, ow = 0) {
            const int64_t run = std::min<int64_t>(QB - j, g.Wp - ow);
            const int64_t nv = std::clamp<int64_t>(g.Wo - ow, 0, run);
            for (int64_t o = 0; o < n_co; ++o) {
              T* yr = yc + o * g.Lo + oh * g.Wo + ow;
              for (int64_t v = 0; v < nv; ++v) yr[v] = acc[o][j + v];
            }
            j += run;
          }
        }
      }
    }
  }
}

// y[n, g] = w[g] . im2col(x[n, g]) (+ bias); items (n, g, range of chunks).
template <class T>
void correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  if (g.N == 0 || g.Co == 0 || g.Lo == 0) return;
  if (g.depthwise) return correlate_depthwise(x, w, bias, y, g);
  if (g.flat) {  // output channels per register block: the fewest padded channels, then the most
    if (g.Cog % 12 == 0 || (g.Cog > 8 && (g.Cog + 11) / 12 * 12 < (g.Cog + 7) / 8 * 8)) {
      return correlate_direct<T, 12>(x, w, bias, y, g);
    }
    if (g.Cog > 4) return correlate_direct<T, 8>(x, w, bias, y, g);
    return correlate_direct<T, 4>(x, w, bias, y, g);
  }
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t lc = chunk_len(g.CKg, g.Lo, sizeof(T));  // not flat: the grid is the output
  const int64_t n_chunks = (g.Lo + lc - 1) / lc;
  const int64_t n_parts = pieces_for(g.N * g.G, n_chunks, big ? max_threads() : 1);
  const int64_t per_part = (n_chunks + n_parts - 1) / n_parts;
  const int64_t items = g.N * g.G * n_parts;
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> P(g.unit ? 0 : g.Cig * g.Lp + g.slack);
    Scratch<T, 1> col(g.unit ? 0 : g.CKg * lc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_parts, part = it % n_parts;  // ng = n * G + group
      const int64_t grp = ng % g.G;
      const T* xg = x + ng * g.Cig * g.Li;
      T* yg = y + ng * g.Cog * g.Lo;
      CMapM<T> wT(w + grp * g.Cog * g.CKg, g.CKg, g.Cog, Eigen::OuterStride<>(g.CKg));
      if (!g.unit) pad_image(xg, g.Cig, g, P.data());
      const int64_t ch1 = std::min(n_chunks, (part + 1) * per_part);
      for (int64_t ch = part * per_part; ch < ch1; ++ch) {
        const int64_t q0 = ch * lc, q1 = std::min(g.Lo, q0 + lc), len = q1 - q0;
        const T* cp = xg + q0;  // unit: the image is the column matrix
        int64_t ldc = g.Li;
        if (!g.unit) {
          im2col(P.data(), g.Cig, q0, q1, g, col.data());
          cp = col.data();
          ldc = len;
        }
        CMapM<T> colT(cp, len, g.CKg, Eigen::OuterStride<>(ldc));
        MapM<T> yT(yg + q0, len, g.Cog, Eigen::OuterStride<>(g.Lo));
        if (bias) {
          for (int64_t co = 0; co < g.Cog; ++co) yT.col(co).setConstant(bias[grp * g.Cog + co]);
          yT.noalias() += colT * wT;
        } else {
          yT.noalias() = colT * wT;
        }
      }
    }
  }
}

// x[n, g] = col2im(w[g]^T . y[n, g]) (+ bias); items (n, g, block of image channels).
template <class T>
void correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  if (g.N == 0 || g.Ci == 0 || g.Li == 0) return;
  if (g.depthwise) return correlate_adjoint_depthwise(y, w, bias, x, g);
  // The correlation form reads y's zero padding, and 0 * Inf = NaN where col2im adds nothing:
  // weights with an Inf or NaN keep to col2im, like PyTorch.
  if (adjoint_as_correlation(g) && all_finite(w, g.Co * g.CKg)) {
    // w2[g][ci][co][t] = w[g][co][ci][K-1-t]
    std::vector<T> w2(g.G * g.Cig * g.Cog * g.K);
    for (int64_t grp = 0; grp < g.G; ++grp)
      for (int64_t ci = 0; ci < g.Cig; ++ci)
        for (int64_t co = 0; co < g.Cog; ++co) {
          const T* src = w + ((grp * g.Cog + co) * g.Cig + ci) * g.K;
          T* dst = w2.data() + ((grp * g.Cig + ci) * g.Cog + co) * g.K;
          for (int64_t t = 0; t < g.K; ++t) dst[t] = src[g.K - 1 - t];
        }
    return correlate(y, w2.data(), bias, x, adjoint_geom(g));
  }
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_blocks = pieces_for(g.N * g.G, g.Cig, big ? kSplitTarget : 1);
  const int64_t cb = (g.Cig + n_blocks - 1) / n_blocks;
  const int64_t items = g.N * g.G * n_blocks;
  // chunks from the whole group's rows, not from cb: col2im's order of sums must not depend
  // on the thread count
  const int64_t lc = chunk_len(g.CKg, g.Lq, sizeof(T));
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> gP(g.unit ? 0 : cb * g.Lp + g.slack);
    Scratch<T, 1> col(g.unit ? 0 : cb * g.K * lc);
    Scratch<T, 2> ext(g.flat ? g.Cog * lc : 0);
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
        CMapM<T> yT(yg, g.Lo, g.Cog, Eigen::OuterStride<>(g.Lo));
        xT.noalias() = yT * wsub.transpose();
      } else {
        std::fill(gP.data(), gP.data() + nc * g.Lp + g.slack, T(0));
        for (int64_t q0 = 0; q0 < g.Lq; q0 += lc) {
          const int64_t q1 = std::min(g.Lq, q0 + lc), len = q1 - q0;
          const T* yp = yg + q0;
          int64_t ldy = g.Lo;
          if (g.flat) {
            grid_from_rows(yg, g.Cog, q0, q1, g, ext.data());
            yp = ext.data();
            ldy = len;
          }
          CMapM<T> yT(yp, len, g.Cog, Eigen::OuterStride<>(ldy));
          MapM<T> colT(col.data(), len, nc * g.K, Eigen::OuterStride<>(len));
          colT.noalias() = yT * wsub.transpose();
          zero_garbage(col.data(), nc * g.K, q0, q1, g);
          col2im_add(col.data(), nc, q0, q1, g, gP.data());
        }
        crop_image(gP.data(), nc, g, xg + c0 * g.Li);
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

// dw[g] = sum_n y[n, g] . im2col(x[n, g])^T. Items (slot, g, ci block, co block): a slot is a
// fixed range of samples whose partial sum goes to its own buffer (slot 0 straight into dw), so
// every sample's x and y are read once; the slots are then added in order. Slots and blocks
// depend on the shape only, and each item sums its samples, then chunks, in increasing order.
template <class T>
void weight_grad(const T* y, const T* x, T* dw, const Geom& g) {
  if (g.Co == 0 || g.CKg == 0) return;
  if (g.depthwise) return weight_grad_depthwise(y, x, dw, g);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t wsize = g.Co * g.CKg;
  int64_t n_slots = big ? std::clamp<int64_t>(g.N, 1, kSplitTarget) : 1;
  if ((n_slots - 1) * wsize > (int64_t(1) << 23)) n_slots = 1;  // huge weights: no copies
  const int target = big ? kSplitTarget : 1;
  const int64_t nb_ci = pieces_for(n_slots * g.G, g.Cig, target);
  const int64_t nb_co = pieces_for(n_slots * g.G * nb_ci, g.Cog, target);
  const int64_t cb = (g.Cig + nb_ci - 1) / nb_ci, ob = (g.Cog + nb_co - 1) / nb_co;
  const int64_t items = n_slots * g.G * nb_ci * nb_co;
  const int64_t L = g.unit ? g.Lo : g.Lq;
  const int64_t lc = g.unit ? std::max<int64_t>(g.Lo, 1) : chunk_len(g.CKg, L, sizeof(T));
  std::vector<T> partial((n_slots - 1) * wsize);
  // Both GEMM operands run along the positions; Eigen packs its left operand across that
  // stride slowly, so the operand with fewer rows goes on the left: dw^T += col^T . y when
  // there are fewer weight rows than output channels, else dw += y^T . col into a buffer.
  const bool y_left = ob < cb * g.K;
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> P(g.unit ? 0 : cb * g.Lp + g.slack);
    Scratch<T, 1> col(g.unit ? 0 : cb * g.K * lc);
    Scratch<T, 2> ext(g.flat ? ob * lc : 0);
    Scratch<T, 3> acc(y_left ? ob * cb * g.K : 0);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t slot = it / (g.G * nb_ci * nb_co);
      const int64_t grp = (it / (nb_ci * nb_co)) % g.G;
      const int64_t bi = (it / nb_co) % nb_ci, bo = it % nb_co;
      const int64_t c0 = bi * cb, nc = std::min(g.Cig, c0 + cb) - c0;
      const int64_t o0 = bo * ob, no = std::min(g.Cog, o0 + ob) - o0;
      if (nc <= 0 || no <= 0) continue;
      T* dst = slot == 0 ? dw : partial.data() + (slot - 1) * wsize;
      // dst[g, o0:o0+no, c0:c0+nc, :] as a (nc*K x no) column-major block
      MapM<T> dwT(dst + (grp * g.Cog + o0) * g.CKg + c0 * g.K, nc * g.K, no, Eigen::OuterStride<>(g.CKg));
      MapM<T> dwY(acc.data(), no, y_left ? nc * g.K : 0, Eigen::OuterStride<>(no));
      if (y_left) {
        dwY.setZero();
      } else {
        dwT.setZero();
      }
      for (int64_t n = slot * g.N / n_slots; n < (slot + 1) * g.N / n_slots; ++n) {
        const T* xg = x + ((n * g.G + grp) * g.Cig + c0) * g.Li;
        const T* yg = y + ((n * g.G + grp) * g.Cog + o0) * g.Lo;
        if (!g.unit) pad_image(xg, nc, g, P.data());
        for (int64_t q0 = 0; q0 < L; q0 += lc) {
          const int64_t q1 = std::min(L, q0 + lc), len = q1 - q0;
          const T* cp = xg + q0;
          int64_t ldc = g.Li;
          if (!g.unit) {
            im2col(P.data(), nc, q0, q1, g, col.data());
            zero_garbage(col.data(), nc * g.K, q0, q1, g);
            cp = col.data();
            ldc = len;
          }
          const T* yp = yg + q0;
          int64_t ldy = g.Lo;
          if (g.flat) {
            grid_from_rows(yg, no, q0, q1, g, ext.data());
            yp = ext.data();
            ldy = len;
          }
          CMapM<T> colT(cp, len, nc * g.K, Eigen::OuterStride<>(ldc));
          CMapM<T> yT(yp, len, no, Eigen::OuterStride<>(ldy));
          if (y_left) {
            dwY.noalias() += yT.transpose() * colT;
          } else {
            dwT.noalias() += colT.transpose() * yT;
          }
        }
      }
      if (y_left) dwT = dwY.transpose();
    }
    if (n_slots > 1) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < wsize; ++i) {
        T v = dw[i];
        for (int64_t s = 1; s < n_slots; ++s) v += partial[(s - 1) * wsize + i];
        dw[i] = v;
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
