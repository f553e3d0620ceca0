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
//
// Boxes and grids. Image channels are first copied into zero-padded boxes that hold exactly what
// the windows cover, split into phases by the stride (padded position z lives in phase z % s at
// z / s). Tap t of window o then reads box[o + offset(t)] (per dim, inside one phase): every
// convolution becomes a stride-1 problem, no inner loop checks bounds, and rows of windows read
// contiguous memory. When the extra width is small, window positions are laid on a "flat" grid
// as wide as a box row, so that a tap of a whole slice of windows is one contiguous run; the few
// garbage positions per row are dropped, or kept out of every sum (see zero_garbage and the
// non-finite fallbacks), so Inf and NaN propagate exactly as the definition says: only taps
// inside the image contribute (see "Non-finite weights and column values").
//
// How each piece runs:
//   correlate          flat grid: direct correlation (direct_blocks): a block of output channels
//                      x positions is summed in registers over (ci, t) straight from the box,
//                      no column matrix. Otherwise im2col + Eigen GEMM.
//   correlate_adjoint  one direct correlation per phase of the image: image position
//                      i = m * s + phase - pad gathers the taps with (t * dil) % s == phase,
//                      each from y[m - (t * dil) / s], i.e. y correlated with part of the flipped,
//                      transposed kernel. Non-finite weights (the correlation would meet 0 * Inf
//                      in y's padding) and narrow grids take GEMM + col2im instead.
//   weight_grad        flat grids: direct (weight_grad_direct), tiles of column channels x
//                      (image channel, tap) rows summed in registers straight from the boxes,
//                      with column channels in the vector lanes (two vectors of them or more
//                      per group) or positions in them (fewer). Otherwise im2col + Eigen GEMM, the
//                      positions in the GEMM's depth.
// The GEMMs use column-major maps of our row-major buffers: a row-major (R x C) buffer is a
// column-major (C x R) matrix, so y^T (Lo x Cog) = im2col(x)^T (Lo x CKg) * w^T. Column matrices
// are built in chunks of positions (about kChunkBytes) that stay in L2 until the GEMM packs them.
// Special cases: "unit" convolutions (1x1x1, stride 1, no padding) use the image itself as the
// column matrix; depthwise ones (one image channel per group) use direct loops where no flat
// grid exists and for the weight gradient, where a GEMM would have a depth of only K.
//
// Parallel plan (OpenMP, no atomics): every piece is cut into items that each own the slice of
// the result they write, and the cut never changes the order of any sum, so results are
// bit-identical for any thread count:
//   correlate, correlate_adjoint: items (n, g, range of blocks or chunks) -> own y / x there
//   GEMM adjoint:       items (n, g, block of image channels)              -> own x[n, g, block]
//   weight_grad direct: tiles (g, co block, block of rows) of one step        -> own dw there
//   weight_grad GEMM:   items (slot of samples, g, block of ci, block of co) -> own their slot's
//                       partial dw[g, co-block, ci-block]; slots are added in a fixed order
// Every cut that reaches a GEMM depends on the shape only. Inside our parallel regions Eigen's
// GEMM runs single-threaded (Eigen checks omp_get_num_threads()).
#include "conv_kernels.h"

#include <Eigen/Core>
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"  // see Lanes

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
// Below this many multiply-adds a parallel region costs more than it saves. Also below Eigen's
// own threshold for threading one GEMM (1e5): every GEMM big enough for Eigen to go parallel
// is called inside one of our active regions, where Eigen stays single-threaded, so no result
// depends on the thread count.
constexpr double kParallelWork = 1 << 16;
// Room the depthwise weight gradient keeps after a grid slice of y (reads run past it by less
// than one vector), and the kernel taps it sums in one pass.
constexpr int64_t kBlock = 64;
constexpr int kDwTaps = 3;
// The most elements any flat loop reads past the end of a slice (a direct block or a dot
// block): boxes keep that much zeroed room after their last channel.
constexpr int64_t kOverrun = 128;
// Items that correlate_adjoint's GEMM path and weight_grad aim for when the batch alone gives
// too few. A constant, not the thread count: Eigen's GEMM sums an entry in an order that
// depends on where the entry falls in its blocking, so the cut into GEMMs must depend on the
// shape only for results to be identical for any thread count. 4 keeps 1, 2 or 4 threads busy.
constexpr int kSplitTarget = 4;

// Per-thread scratch memory, kept from call to call: fresh pages on every call (allocation,
// zeroing, page faults) cost more than a small convolution. Buffers above kKeepBytes are not
// kept. Slot tells apart the buffers one thread uses at the same time (per type). Contents are
// unspecified: every user writes before it reads.
constexpr int64_t kKeepBytes = int64_t(16) << 20;

template <class T, int Slot>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    n += kPad;  // room to start at a 64-byte boundary: vector loads of aligned rows stay in one line
    if (n * int64_t(sizeof(T)) <= kKeepBytes) {
      std::vector<T>& kept = cache();
      if (int64_t(kept.size()) < n) kept.resize(n);
      p_ = align(kept.data());
    } else {
      own_.resize(n);
      p_ = align(own_.data());
    }
  }
  T* data() { return p_; }
  T& operator[](int64_t i) { return p_[i]; }

 private:
  static constexpr int64_t kPad = (64 + sizeof(T) - 1) / sizeof(T);
  static T* align(T* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return p + ((64 - a % 64) % 64) / sizeof(T);
  }
  static std::vector<T>& cache() {
    thread_local std::vector<T> kept;
    return kept;
  }
  std::vector<T> own_;
  T* p_ = nullptr;
};

// A zero-padded, phase-split copy of image channels: the "box". Padded position z (image
// position z - pd) of a dim with stride s is stored in phase z % s at index z / s. Window o's
// tap at padded offset u (= t * dilation) then reads phase u % s at index o + u / s: inside a
// phase every stride is 1, so rows of windows read contiguous memory and no loop checks
// bounds. With stride 1 a box is just the padded image.
struct Box {
  int64_t D, H, W;     // padded extents (what the windows cover)
  int64_t pd, ph, pw;  // padded position of image position 0 (negative: the image is cropped)
  int64_t sd, sh, sw;  // phases per dim (the strides)
  int64_t Db, Hb, Wb;  // extents of one phase
  int64_t Sph, L;      // elements of one phase, of one channel (all phases)
  int64_t slack;       // zeros after the last channel: flat reads run past the last rows
};

Box make_box(int64_t D, int64_t H, int64_t W, int64_t pd, int64_t ph, int64_t pw, int64_t sd,
             int64_t sh, int64_t sw) {
  Box b{};
  b.D = D, b.H = H, b.W = W, b.pd = pd, b.ph = ph, b.pw = pw, b.sd = sd, b.sh = sh, b.sw = sw;
  b.Db = (D + sd - 1) / sd;
  b.Hb = (H + sh - 1) / sh;
  b.Wb = (W + sw - 1) / sw;
  b.Sph = b.Db * b.Hb * b.Wb;
  b.L = sd * sh * sw * b.Sph;
  b.slack = b.Wb + kOverrun;
  return b;
}

// Index inside one channel's box of padded position (ud, uh, uw).
int64_t box_index(const Box& b, int64_t ud, int64_t uh, int64_t uw) {
  const int64_t phase = ((ud % b.sd) * b.sh + uh % b.sh) * b.sw + uw % b.sw;
  return phase * b.Sph + ((ud / b.sd) * b.Hb + uh / b.sh) * b.Wb + uw / b.sw;
}

// Where image rows and columns go in a box: row (iz, iy) starts at zrow[iz] + yrow[iy] (or
// is outside when either is -1); columns [ix0, ix1) are inside, and those of phase f (of the
// W split) start at image column first[f] and box index colbase[f], one box column apart.
struct BoxRows {
  std::vector<int64_t> zrow, yrow, first, colbase;
  int64_t ix0, ix1;
};

BoxRows box_rows(const Box& b, int64_t Di, int64_t Hi, int64_t Wi) {
  BoxRows r;
  r.zrow.resize(Di);
  r.yrow.resize(Hi);
  for (int64_t iz = 0; iz < Di; ++iz) {
    const int64_t z = iz + b.pd;
    r.zrow[iz] = z < 0 || z >= b.D ? -1 : (z % b.sd) * b.sh * b.sw * b.Sph + (z / b.sd) * b.Hb * b.Wb;
  }
  for (int64_t iy = 0; iy < Hi; ++iy) {
    const int64_t yy = iy + b.ph;
    r.yrow[iy] = yy < 0 || yy >= b.H ? -1 : (yy % b.sh) * b.sw * b.Sph + (yy / b.sh) * b.Wb;
  }
  r.ix0 = std::clamp<int64_t>(-b.pw, 0, Wi);
  r.ix1 = std::clamp<int64_t>(b.W - b.pw, r.ix0, Wi);
  for (int64_t f = 0; f < b.sw; ++f) {  // image columns ix with (ix + pw) % sw == f
    const int64_t first = r.ix0 + ((f - (r.ix0 + b.pw)) % b.sw + b.sw) % b.sw;
    r.first.push_back(first);
    r.colbase.push_back(f * b.Sph + (first + b.pw) / b.sw);
  }
  return r;
}

// even[k] = src[2k] for 2k < n, odd[k] = src[2k + 1] for 2k + 1 < n: an image row split into the
// two phases of a stride-2 box. Rows are short (14 columns per phase at 28 x 28), so with
// AVX-512 the whole row goes in masked vectors instead of a scalar loop; nothing outside the
// n elements is read or written.
template <class T>
void split_even_odd(const T* src, int64_t n, T* even, T* odd) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    auto mask = [](int64_t m) { return __mmask16(m >= 16 ? 0xFFFF : (1u << m) - 1); };
    for (; i < n; i += 32) {
      const int64_t left = n - i;
      const __m512 a = _mm512_maskz_loadu_ps(mask(left), src + i);
      const __m512 b = _mm512_maskz_loadu_ps(mask(std::max<int64_t>(left - 16, 0)), src + i + 16);
      _mm512_mask_storeu_ps(even + i / 2, mask((left + 1) / 2), _mm512_permutex2var_ps(a, ie, b));
      _mm512_mask_storeu_ps(odd + i / 2, mask(left / 2), _mm512_permutex2var_ps(a, io, b));
    }
    return;
  }
#endif
  for (; i + 1 < n; i += 2) {
    even[i / 2] = src[i];
    odd[i / 2] = src[i + 1];
  }
  if (i < n) even[i / 2] = src[i];
}

// P = nc image channels (Di, Hi, Wi) in boxes b (nc * L elements; see pad_image for the slack).
// rows: box_rows(b, Di, Hi, Wi) if the caller has it (Geom keeps its image box's), else null.
template <class T>
void pad_channels(const T* im, int64_t nc, int64_t Di, int64_t Hi, int64_t Wi, const Box& b, T* P,
                  const BoxRows* rows = nullptr) {
  const int64_t ix0 = std::clamp<int64_t>(-b.pw, 0, Wi), ix1 = std::clamp<int64_t>(b.W - b.pw, ix0, Wi);
  if (b.sd == 1 && b.sh == 1 && b.sw == 1) {  // one phase: each box row written once
    const int64_t a = ix0 + b.pw, n = ix1 - ix0;  // the image part of a row
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t z = 0; z < b.D; ++z)
        for (int64_t yy = 0; yy < b.H; ++yy) {
          T* row = P + c * b.L + (z * b.H + yy) * b.W;
          const int64_t iz = z - b.pd, iy = yy - b.ph;
          if (iz < 0 || iz >= Di || iy < 0 || iy >= Hi || n <= 0) {
            std::fill(row, row + b.W, T(0));
            continue;
          }
          std::fill(row, row + a, T(0));
          std::memcpy(row + a, im + ((c * Di + iz) * Hi + iy) * Wi + ix0, sizeof(T) * n);
          std::fill(row + a + n, row + b.W, T(0));
        }
    return;
  }
  std::fill(P, P + nc * b.L, T(0));
  const BoxRows computed = rows ? BoxRows{} : box_rows(b, Di, Hi, Wi);
  const BoxRows& r = rows ? *rows : computed;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t iz = 0; iz < Di; ++iz)
      for (int64_t iy = 0; iy < Hi; ++iy) {
        if (r.zrow[iz] < 0 || r.yrow[iy] < 0) continue;
        const T* src = im + ((c * Di + iz) * Hi + iy) * Wi;
        T* row = P + c * b.L + r.zrow[iz] + r.yrow[iy];
        if (b.sw == 2 && r.ix1 > r.ix0) {  // column ix0 starts phase f0, ix0 + 1 the other
          const int64_t f0 = r.first[0] == r.ix0 ? 0 : 1;
          split_even_odd(src + r.ix0, r.ix1 - r.ix0, row + r.colbase[f0], row + r.colbase[1 - f0]);
          continue;
        }
        for (int64_t f = 0; f < b.sw; ++f) {
          if (r.first[f] >= r.ix1) continue;
          T* d = row + r.colbase[f];
          const T* sp = src + r.first[f];
          const int64_t n = (r.ix1 - r.first[f] + b.sw - 1) / b.sw;
          if (b.sw == 1) {
            std::memcpy(d, sp, sizeof(T) * n);
          } else {
            for (int64_t k = 0; k < n; ++k) d[k] = sp[k * b.sw];
          }
        }
      }
}

// pad_channels, then the slack zeros that flat reads past the last channel meet.
template <class T>
void pad_image(const T* im, int64_t nc, int64_t Di, int64_t Hi, int64_t Wi, const Box& b, T* P,
               const BoxRows* rows = nullptr) {
  pad_channels(im, nc, Di, Hi, Wi, b, P, rows);
  std::fill(P + nc * b.L, P + nc * b.L + b.slack, T(0));
}

// The adjoint of pad_image: x channels = the image part of the boxes P (0 where no window
// reaches).
template <class T>
void crop_image(const T* P, int64_t nc, int64_t Di, int64_t Hi, int64_t Wi, const Box& b, T* x) {
  const BoxRows r = box_rows(b, Di, Hi, Wi);
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t iz = 0; iz < Di; ++iz)
      for (int64_t iy = 0; iy < Hi; ++iy) {
        T* xr = x + ((c * Di + iz) * Hi + iy) * Wi;
        if (r.zrow[iz] < 0 || r.yrow[iy] < 0) {
          std::fill(xr, xr + Wi, T(0));
          continue;
        }
        std::fill(xr, xr + r.ix0, T(0));
        std::fill(xr + r.ix1, xr + Wi, T(0));
        const T* row = P + c * b.L + r.zrow[iz] + r.yrow[iy];
        for (int64_t f = 0; f < b.sw; ++f) {
          if (r.first[f] >= r.ix1) continue;
          const T* sp = row + r.colbase[f];
          T* d = xr + r.first[f];
          const int64_t n = (r.ix1 - r.first[f] + b.sw - 1) / b.sw;
          if (b.sw == 1) {
            std::memcpy(d, sp, sizeof(T) * n);
          } else if (b.sw == 2) {
            for (int64_t k = 0; k < n; ++k) d[2 * k] = sp[k];
          } else {
            for (int64_t k = 0; k < n; ++k) d[k * b.sw] = sp[k];
          }
        }
      }
}

struct Geom {
  int64_t N, G;
  int64_t Ci, Co, Cig, Cog;  // image / column-side channels, and per group
  int64_t Di, Hi, Wi, Li;    // image spatial sizes
  int64_t Do, Ho, Wo, Lo;    // window positions
  int64_t kd, kh, kw, K;
  int64_t sd, sh, sw, dd, dh, dw, pd, ph, pw;
  int64_t CKg;                // rows of one group's column matrix
  Box box;                    // boxes of image channels, covering every window
  BoxRows box_rows;           // where image rows go in a box (box_rows(box, Di, Hi, Wi))
  std::vector<int64_t> off;   // box index of tap t for window position 0
  int64_t slice;              // box index step from window slice od to od + 1 (Hb * Wb)
  // Grid of window positions: Do slices of Ho rows of Wg. Flat (Wg = Wb, the box row): tap t
  // of every position q of a slice is then box[od * slice + q + off[t]], one contiguous run;
  // the Wb - Wo extra positions per row are garbage, dropped or zeroed wherever they would
  // enter a sum. Otherwise (when the garbage would exceed a quarter of a row) Wg = Wo.
  bool flat;
  int64_t Wg, S, Lg;          // grid row, slice (Ho * Wg) and total (Do * S)
  bool unit;                  // 1x1x1, stride 1, no padding: the image is the column matrix
  bool depthwise;             // one image channel per group: direct loops
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
  auto extent = [](int64_t o, int64_t s, int64_t k, int64_t d) {
    return o > 0 ? (o - 1) * s + (k - 1) * d + 1 : 0;
  };
  g.box = make_box(extent(g.Do, g.sd, g.kd, g.dd), extent(g.Ho, g.sh, g.kh, g.dh),
                   extent(g.Wo, g.sw, g.kw, g.dw), g.pd, g.ph, g.pw, g.sd, g.sh, g.sw);
  g.box_rows = box_rows(g.box, g.Di, g.Hi, g.Wi);
  g.off.resize(g.K);
  for (int64_t a = 0, t = 0; a < g.kd; ++a)
    for (int64_t b = 0; b < g.kh; ++b)
      for (int64_t e = 0; e < g.kw; ++e, ++t) g.off[t] = box_index(g.box, a * g.dd, b * g.dh, e * g.dw);
  g.slice = g.box.Hb * g.box.Wb;
  g.unit = g.K == 1 && g.sd == 1 && g.sh == 1 && g.sw == 1 && g.pd == 0 && g.ph == 0 &&
           g.pw == 0 && g.Di == g.Do && g.Hi == g.Ho && g.Wi == g.Wo;
  g.depthwise = g.Cig == 1 && g.Cog <= 4 && !g.unit;
  g.flat = !g.unit && (g.box.Wb - g.Wo) * 4 <= g.Wo;
  g.Wg = g.flat ? g.box.Wb : g.Wo;
  g.S = g.Ho * g.Wg;
  g.Lg = g.Do * g.S;
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

// Length of a chunk of grid positions for a column matrix of `rows` rows, balanced so that all
// chunks of [0, L) have about the same length. Depends on the shape only.
int64_t chunk_len(int64_t rows, int64_t L, int64_t elem_bytes) {
  if (L <= 0) return 1;
  const int64_t want = std::max<int64_t>(kChunkBytes / (elem_bytes * std::max<int64_t>(rows, 1)), 192);
  const int64_t n_chunks = (L + want - 1) / want;
  return (L + n_chunks - 1) / n_chunks;
}

// Runs before the parallel part of a kernel (it picks the path): on all cores when n is large.
template <class T>
bool all_finite(const T* v, int64_t n) {
  int ok = 1;
  if (n < kParallelWork || omp_in_parallel()) {  // (an `if` clause would still open a region)
    for (int64_t i = 0; i < n; ++i) ok &= int(std::isfinite(v[i]));
    return ok != 0;
  }
#pragma omp parallel for schedule(static) reduction(& : ok)
  for (int64_t i = 0; i < n; ++i) ok &= int(std::isfinite(v[i]));
  return ok != 0;
}

// Calls f(offset, od, oh, u0, u1) for each grid row (od, oh) that meets the grid range [q0, q1):
// [u0, u1) are the row's columns inside the range, offset is where column u0 sits from q0.
template <class F>
inline void for_grid_rows(const Geom& g, int64_t q0, int64_t q1, F&& f) {
  if (q1 <= q0) return;  // also keeps Wg == 0 or Ho == 0 away from the divisions
  int64_t r = q0 / g.Wg;
  int64_t od = r / g.Ho, oh = r % g.Ho;
  for (int64_t q = q0; q < q1; ++r) {
    const int64_t u0 = q - r * g.Wg, u1 = std::min<int64_t>(g.Wg, q1 - r * g.Wg);
    f(q - q0, od, oh, u0, u1);
    q += u1 - u0;
    if (++oh == g.Ho) oh = 0, ++od;
  }
}

// Calls f(offset, box_index, n) for the contiguous runs of grid range [q0, q1) of tap t:
// offset from q0, index in a channel's box, length. Flat: one run per slice; else one per row.
template <class F>
inline void for_tap_runs(const Geom& g, int64_t t, int64_t q0, int64_t q1, F&& f) {
  if (g.flat) {
    for (int64_t od = q0 / g.S; od * g.S < q1; ++od) {
      const int64_t s0 = std::max(q0, od * g.S), s1 = std::min(q1, od * g.S + g.S);
      f(s0 - q0, od * g.slice + (s0 - od * g.S) + g.off[t], s1 - s0);
    }
  } else {
    for_grid_rows(g, q0, q1, [&](int64_t off, int64_t od, int64_t oh, int64_t u0, int64_t u1) {
      f(off, od * g.slice + oh * g.box.Wb + u0 + g.off[t], u1 - u0);
    });
  }
}

// col (nc*K x (q1-q0), row-major) = im2col of boxes P for grid positions [q0, q1).
template <class T>
void im2col(const T* P, int64_t nc, int64_t q0, int64_t q1, const Geom& g, T* col) {
  const int64_t lc = q1 - q0;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t t = 0; t < g.K; ++t) {
      T* dst = col + (c * g.K + t) * lc;
      const T* Pc = P + c * g.box.L;
      for_tap_runs(g, t, q0, q1, [&](int64_t o, int64_t i, int64_t n) {
        std::memcpy(dst + o, Pc + i, sizeof(T) * n);
      });
    }
}

// The adjoint of im2col: boxes gP += scatter of col. On a flat grid the garbage columns of col
// must be zero (zero_garbage).
template <class T>
void col2im_add(const T* col, int64_t nc, int64_t q0, int64_t q1, const Geom& g, T* gP) {
  const int64_t lc = q1 - q0;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t t = 0; t < g.K; ++t) {
      const T* src = col + (c * g.K + t) * lc;
      T* Pc = gP + c * g.box.L;
      for_tap_runs(g, t, q0, q1, [&](int64_t o, int64_t i, int64_t n) {
        T* d = Pc + i;
        const T* s = src + o;
        for (int64_t j = 0; j < n; ++j) d[j] += s[j];
      });
    }
}

// Zeroes the garbage columns (ow >= Wo) of the `rows` rows of a chunk [q0, q1) of a flat grid,
// so that they add exact zeros to sums even where the image or weight holds Inf or NaN.
template <class T>
void zero_garbage(T* col, int64_t rows, int64_t q0, int64_t q1, const Geom& g) {
  if (g.Wg == g.Wo) return;
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

// dst = lhs * rhs, or dst += lhs * rhs. Eigen turns products with rows + cols + depth < 20 into
// coefficient-wise sums whose order follows the memory alignment of the data, so results could
// change from run to run with the buffers' addresses; those small products run as plain loops.
template <class Dst, class Lhs, class Rhs>
void gemm(Dst& dst, const Lhs& lhs, const Rhs& rhs, bool accumulate) {
  using T = typename Dst::Scalar;
  if (lhs.cols() + dst.rows() + dst.cols() < 20) {
    for (Eigen::Index j = 0; j < dst.cols(); ++j)
      for (Eigen::Index i = 0; i < dst.rows(); ++i) {
        T s = 0;
        for (Eigen::Index k = 0; k < lhs.cols(); ++k) s += lhs(i, k) * rhs(k, j);
        dst(i, j) = accumulate ? dst(i, j) + s : s;
      }
    return;
  }
  if (accumulate) {
    dst.noalias() += lhs * rhs;
  } else {
    dst.noalias() = lhs * rhs;
  }
}

// One 64-byte vector of T (GCC/Clang vector extension): the compiler keeps a small array of
// these in registers where it would spill (or vectorise the wrong way) an array of plain T.
// (Without AVX-512, GCC notes at every call that such a vector passed by value has another
// ABI; irrelevant for these internal, inlined helpers, hence -Wpsabi off for this file.)
template <class T>
struct Lanes {
  typedef T vec __attribute__((vector_size(64)));
  static constexpr int n = int(64 / sizeof(T));
  static vec load(const T* p) {
    vec v;
    std::memcpy(&v, p, sizeof v);  // unaligned
    return v;
  }
  // x in every lane (a broadcast; `vec{} + x` would have to add 0 + x first, for x = -0)
  static vec splat(T x) {
    typedef std::conditional_t<sizeof(T) == 4, int32_t, int64_t> I;
    typedef I mask __attribute__((vector_size(64)));
    const vec v = {x};
    return __builtin_shuffle(v, mask{});
  }
  // dst rows j < rows: column j of the n x n block whose row i is src[i * ld_src, + n), i < n.
  // log2(n) stages, each swapping off-diagonal blocks of d x d between row pairs (j, j + d).
  static void transpose(const T* src, int64_t ld_src, T* dst, int64_t ld_dst, int rows = n) {
    typedef std::conditional_t<sizeof(T) == 4, int32_t, int64_t> I;
    typedef I mask __attribute__((vector_size(64)));
    vec r[n];
#pragma GCC unroll 16
    for (int j = 0; j < n; ++j) r[j] = load(src + j * ld_src);
#pragma GCC unroll 4
    for (int d = 1; d < n; d *= 2) {
      mask lo, hi;  // lane k of row j, of row j + d
#pragma GCC unroll 16
      for (int k = 0; k < n; ++k) {
        lo[k] = (k & d) ? n + k - d : k;
        hi[k] = (k & d) ? n + k : k + d;
      }
#pragma GCC unroll 16
      for (int j = 0; j < n; ++j) {
        if (j & d) continue;
        const vec a = r[j], c = r[j + d];
        r[j] = __builtin_shuffle(a, c, lo);
        r[j + d] = __builtin_shuffle(a, c, hi);
      }
    }
    for (int j = 0; j < rows; ++j) std::memcpy(dst + j * ld_dst, &r[j], sizeof(vec));
  }
  // The sum of the lanes by a fixed tree (halves, then quarters, ...): the same order always.
  static T sum(vec v) {
    T a[n];
    std::memcpy(a, &v, sizeof v);
#pragma GCC unroll 8
    for (int h = n / 2; h >= 1; h /= 2)
#pragma GCC unroll 16
      for (int j = 0; j < h; ++j) a[j] += a[j + h];
    return a[0];
  }
};

// ---------------------------------------------------------------------------------------------
// Direct correlation: out[o, position] = bias[o] + sum_{c, t} wr[o, c, t] * in[c, position + off[t]]
// over a flat grid, without any column matrix. A block of OB output channels x QB positions
// (two vector registers wide) is summed in registers over (c, t), each step broadcasting OB
// weights laid out as wr[ob][c][t][OB]. This keeps the FMA units busier than im2col + GEMM,
// which copies every input K times and then packs it again.

struct DirectPlan {
  int64_t n_in, in_cstride, in_slice;  // input channels, their box stride, one grid slice
  const int64_t* off;                  // tap offsets into an input channel's box
  int64_t n_taps;
  int64_t slices, rows, width, cols;   // grid: slices x rows x width, columns >= cols are garbage
  int64_t out_cstride, out_slice, out_row, out_col;  // where grid position (s, r, c) goes
};

// Positions per direct block: OB x this many vector registers of sums, 24 of the 32 (the rest
// hold loads and broadcasts; at most kOverrun positions). With one or two output channels a
// longer run instead, streamed through L1.
template <class T, int OB>
constexpr int64_t direct_q() {
  return OB <= 2 ? 512 / OB : (24 / OB) * int64_t(64 / sizeof(T));
}

int64_t direct_blocks_per_slice(const DirectPlan& pl, int64_t QB) {
  return (pl.rows * pl.width + QB - 1) / QB;
}

// Writes a block's sums acc[o][j] (positions q + j, j < QBt, of slice sl) to their valid places,
// row by row; o < n_o.
template <class T, int OB, int QBt>
void store_block(const T (&acc)[OB][QBt], int64_t n_o, const DirectPlan& pl, int64_t sl, int64_t q, T* out) {
  T* oc = out + sl * pl.out_slice;
  int64_t r = q / pl.width, col = q % pl.width;
  for (int64_t j = 0; j < QBt && r < pl.rows; ++r, col = 0) {
    const int64_t run = std::min<int64_t>(QBt - j, pl.width - col);
    const int64_t nv = std::clamp<int64_t>(pl.cols - col, 0, run);
    for (int64_t o = 0; o < n_o; ++o) {
      T* orow = oc + o * pl.out_cstride + r * pl.out_row + col * pl.out_col;
      if (pl.out_col == 1) {
        for (int64_t v = 0; v < nv; ++v) orow[v] = acc[o][j + v];
      } else {
        for (int64_t v = 0; v < nv; ++v) orow[v * pl.out_col] = acc[o][j + v];
      }
    }
    j += run;
  }
}

// One block of OB output channels x QBt positions (OB > 2), summed in registers over (c, t):
// out = bias + sum wr[c][t][o] * in_q[c, off[t] + j].
template <class T, int OB, int QBt>
void direct_block(const T* in_q, const T* wt, const T* bias, int64_t n_o, const DirectPlan& pl, int64_t sl,
                  int64_t q, T* out) {
  T acc[OB][QBt];
  for (int o = 0; o < OB; ++o) {
    const T b0 = bias && o < n_o ? bias[o] : T(0);
    for (int j = 0; j < QBt; ++j) acc[o][j] = b0;
  }
  for (int64_t c = 0; c < pl.n_in; ++c) {
    const T* ic = in_q + c * pl.in_cstride;
    for (int64_t t = 0; t < pl.n_taps; ++t, wt += OB) {
      const T* src = ic + pl.off[t];
      for (int o = 0; o < OB; ++o)
        for (int j = 0; j < QBt; ++j) acc[o][j] += wt[o] * src[j];
    }
  }
  store_block<T, OB, QBt>(acc, n_o, pl, sl, q, out);
}

// Blocks [blk0, blk1) (slice-major, QB positions each) of all n_out output channels. `in` must
// hold QB + the largest offset readable elements past the last slice. The last block of a
// slice computes only the whole vectors that reach into the slice (a 14 x 15 grid is 4 blocks
// of 48 positions, then 18, which take 2 vectors, not 3).
template <class T, int OB>
void direct_blocks(const T* in, const T* wr, int64_t n_out, const T* bias, T* out,
                   const DirectPlan& pl, int64_t blk0, int64_t blk1) {
  constexpr int QB = int(direct_q<T, OB>());
  const int64_t n_qb = direct_blocks_per_slice(pl, QB), n_ob = (n_out + OB - 1) / OB;
  const int64_t wstep = pl.n_in * pl.n_taps * OB;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t sl = blk / n_qb, q = (blk % n_qb) * QB;
    const T* in_q = in + sl * pl.in_slice + q;
    const int64_t len = std::min<int64_t>(QB, pl.rows * pl.width - q);  // positions in the slice
    for (int64_t ob = 0; ob < n_ob; ++ob) {
      const int64_t o0 = ob * OB, n_o = std::min<int64_t>(OB, n_out - o0);
      const T* wt = wr + ob * wstep;
      const T* b = bias ? bias + o0 : nullptr;
      T* oc = out + o0 * pl.out_cstride;
      if constexpr (OB <= 2) {
        // A block this thin holds few sums: the run (which stops at the slice's end, rounded up
        // to whole vectors) goes in sub-blocks of U vectors, each summed in registers over (c, t).
        using L = Lanes<T>;
        constexpr int U = 4;
        const int64_t len_v = (len + L::n - 1) / L::n * L::n;
        T acc[OB][QB];
        T b0[OB];
        for (int o = 0; o < OB; ++o) b0[o] = b && o < n_o ? b[o] : T(0);
        auto run = [&](auto u_tag, int64_t j0) {
          constexpr int NU = decltype(u_tag)::value;
          typename L::vec a[OB][NU];
          for (int o = 0; o < OB; ++o)
            for (int u = 0; u < NU; ++u) a[o][u] = typename L::vec{} + b0[o];
          const T* w_ct = wt;
          for (int64_t c = 0; c < pl.n_in; ++c) {
            const T* ic = in_q + c * pl.in_cstride + j0;
            for (int64_t t = 0; t < pl.n_taps; ++t, w_ct += OB) {
              const T* src = ic + pl.off[t];
#pragma GCC unroll 8
              for (int u = 0; u < NU; ++u) {
                const typename L::vec xv = L::load(src + u * L::n);
#pragma GCC unroll 4
                for (int o = 0; o < OB; ++o) a[o][u] += w_ct[o] * xv;
              }
            }
          }
          for (int o = 0; o < OB; ++o)
            for (int u = 0; u < NU; ++u) std::memcpy(&acc[o][j0 + u * L::n], &a[o][u], sizeof(a[o][u]));
        };
        int64_t j0 = 0;
        for (; j0 + U * L::n <= len_v; j0 += U * L::n) run(std::integral_constant<int, U>{}, j0);
        for (; j0 < len_v; j0 += L::n) run(std::integral_constant<int, 1>{}, j0);
        store_block<T, OB, QB>(acc, n_o, pl, sl, q, oc);
      } else {
        constexpr int V = Lanes<T>::n;
        if (QB > V && len <= V) {
          direct_block<T, OB, V>(in_q, wt, b, n_o, pl, sl, q, oc);
        } else if (QB > 2 * V && len <= 2 * V) {
          direct_block<T, OB, std::min(QB, 2 * V)>(in_q, wt, b, n_o, pl, sl, q, oc);
        } else {
          direct_block<T, OB, QB>(in_q, wt, b, n_o, pl, sl, q, oc);
        }
      }
    }
  }
}

// Output channels per register block: the fewest padded channels, then the most per block.
int pick_ob(int64_t n_out) {
  if (n_out % 12 == 0 || (n_out > 8 && (n_out + 11) / 12 * 12 < (n_out + 7) / 8 * 8)) return 12;
  if (n_out > 4) return 8;
  return n_out > 2 ? 4 : int(std::max<int64_t>(n_out, 1));
}

// wr[ob][c][t][o] = weight(ob * OB + o, c, t), zero past n_out.
template <class T, class F>
std::vector<T> repack(int64_t n_out, int64_t n_in, int64_t n_taps, int OB, F&& weight) {
  const int64_t n_ob = (n_out + OB - 1) / OB;
  std::vector<T> wr(n_ob * n_in * n_taps * OB, T(0));
  auto one_output = [&](int64_t o) {
    for (int64_t c = 0; c < n_in; ++c)
      for (int64_t t = 0; t < n_taps; ++t) wr[(((o / OB) * n_in + c) * n_taps + t) * OB + o % OB] = weight(o, c, t);
  };
  if (n_out * n_in * n_taps < kParallelWork || omp_in_parallel()) {  // (an `if` clause would still open a region)
    for (int64_t o = 0; o < n_out; ++o) one_output(o);
    return wr;
  }
#pragma omp parallel for schedule(static)  // before the kernel's parallel region: a large weight on all cores
  for (int64_t o = 0; o < n_out; ++o) one_output(o);
  return wr;
}

// y[n, g] = w[g] . x[n, g] directly, flat grids only; items (n, g, range of blocks).
template <class T, int OB>
void correlate_direct(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  constexpr int64_t QB = direct_q<T, OB>();
  std::vector<std::vector<T>> wr(g.G);
  for (int64_t grp = 0; grp < g.G; ++grp) {
    const T* wg = w + grp * g.Cog * g.CKg;
    wr[grp] = repack<T>(g.Cog, g.Cig, g.K, OB, [&](int64_t o, int64_t c, int64_t t) {
      return wg[(o * g.Cig + c) * g.K + t];
    });
  }
  const DirectPlan pl{g.Cig, g.box.L, g.slice, g.off.data(), g.K, g.Do, g.Ho, g.Wg, g.Wo,
                      g.Lo, g.Ho * g.Wo, g.Wo, 1};
  const int64_t blocks = g.Do * direct_blocks_per_slice(pl, QB);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_parts = pieces_for(g.N * g.G, blocks, big ? max_threads() : 1);
  const int64_t per_part = (blocks + n_parts - 1) / n_parts;
  const int64_t items = g.N * g.G * n_parts;
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> P(g.Cig * g.box.L + g.box.slack);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_parts, part = it % n_parts;  // ng = n * G + group
      const int64_t grp = ng % g.G;
      pad_image(x + ng * g.Cig * g.Li, g.Cig, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
      direct_blocks<T, OB>(P.data(), wr[grp].data(), g.Cog, bias ? bias + grp * g.Cog : nullptr,
                           y + ng * g.Cog * g.Lo, pl, part * per_part,
                           std::min(blocks, (part + 1) * per_part));
    }
  }
}

// The adjoint as direct correlations, one per phase of the image. Image position
// i = m * s + phase - pad (per dim) gathers the taps t with (t * dil) % s == phase, each from
// y[m - (t * dil) / s]: a stride-1 correlation of y with that part of the kernel, flipped and
// transposed. y is laid in a padded box Y (no phases) shared by all phases.
struct AdjointPhases {
  bool ok = false;           // every phase's grid is flat enough
  Box ybox;
  struct Phase {
    std::vector<int64_t> taps, off;  // kernel taps of the phase and their offsets into ybox
    int64_t first[3], count[3];      // grid origin m and extent per dim
  };
  std::vector<Phase> phases;
};

AdjointPhases adjoint_phases(const Geom& g) {
  AdjointPhases ap;
  const int64_t s[3] = {g.sd, g.sh, g.sw}, k[3] = {g.kd, g.kh, g.kw}, dil[3] = {g.dd, g.dh, g.dw};
  const int64_t pad[3] = {g.pd, g.ph, g.pw}, in[3] = {g.Di, g.Hi, g.Wi}, out[3] = {g.Do, g.Ho, g.Wo};
  int64_t R[3], origin[3], extent[3];
  std::vector<int64_t> lo[3], cnt[3];
  for (int d = 0; d < 3; ++d) {
    R[d] = (k[d] - 1) * dil[d] / s[d];  // largest shift
    origin[d] = INT64_MAX;
    int64_t top = -1;
    for (int64_t ph = 0; ph < s[d]; ++ph) {
      const int64_t m_lo = std::max<int64_t>(0, (pad[d] - ph + s[d] - 1) / s[d]);
      const int64_t last = in[d] - 1 + pad[d] - ph;  // largest m * s
      const int64_t m_hi = last >= 0 ? last / s[d] : -1;
      lo[d].push_back(m_lo);
      cnt[d].push_back(std::max<int64_t>(0, m_hi - m_lo + 1));
      if (m_hi >= m_lo) origin[d] = std::min(origin[d], m_lo), top = std::max(top, m_hi);
    }
    if (top < 0) return ap;  // no image positions: nothing to compute here
    extent[d] = std::max(top - origin[d] + R[d] + 1, out[d] - origin[d] + R[d]);
  }
  ap.ybox = make_box(extent[0], extent[1], extent[2], R[0] - origin[0], R[1] - origin[1],
                     R[2] - origin[2], 1, 1, 1);
  const int64_t Wy = ap.ybox.Wb;
  ap.ok = true;
  for (int64_t pd_ = 0; pd_ < s[0]; ++pd_)
    for (int64_t ph_ = 0; ph_ < s[1]; ++ph_)
      for (int64_t pw_ = 0; pw_ < s[2]; ++pw_) {
        AdjointPhases::Phase P;
        const int64_t phs[3] = {pd_, ph_, pw_};
        for (int d = 0; d < 3; ++d) P.first[d] = lo[d][phs[d]], P.count[d] = cnt[d][phs[d]];
        if (P.count[2] > 0 && (Wy - P.count[2]) * 4 > P.count[2]) ap.ok = false;
        for (int64_t a = 0, t = 0; a < g.kd; ++a)
          for (int64_t b = 0; b < g.kh; ++b)
            for (int64_t e = 0; e < g.kw; ++e, ++t) {
              const int64_t u[3] = {a * g.dd, b * g.dh, e * g.dw};
              bool mine = true;
              int64_t o3[3];
              for (int d = 0; d < 3; ++d) {
                mine = mine && u[d] % s[d] == phs[d];
                o3[d] = P.first[d] - origin[d] + R[d] - u[d] / s[d];
              }
              if (!mine) continue;
              P.taps.push_back(t);
              P.off.push_back((o3[0] * ap.ybox.Hb + o3[1]) * Wy + o3[2]);
            }
        ap.phases.push_back(std::move(P));
      }
  return ap;
}

template <class T, int OB>
void correlate_adjoint_direct(const T* y, const T* w, const T* bias, T* x, const Geom& g,
                              const AdjointPhases& ap) {
  constexpr int64_t QB = direct_q<T, OB>();
  const Box& yb = ap.ybox;
  const int64_t n_ph = int64_t(ap.phases.size());
  // per phase: its plan, where its outputs start in x, and its weights per group
  std::vector<DirectPlan> plans(n_ph);
  std::vector<int64_t> out0(n_ph), first_blk(n_ph + 1, 0);
  std::vector<std::vector<T>> wr(n_ph * g.G);
  for (int64_t f = 0; f < n_ph; ++f) {
    const auto& P = ap.phases[f];
    const int64_t pd_ = f / (g.sh * g.sw), ph_ = (f / g.sw) % g.sh, pw_ = f % g.sw;
    plans[f] = DirectPlan{g.Cog, yb.L, yb.Hb * yb.Wb, P.off.data(), int64_t(P.taps.size()),
                          P.count[0], P.count[1], yb.Wb, P.count[2],
                          g.Li, g.sd * g.Hi * g.Wi, g.sh * g.Wi, g.sw};
    out0[f] = ((P.first[0] * g.sd + pd_ - g.pd) * g.Hi + (P.first[1] * g.sh + ph_ - g.ph)) * g.Wi +
              (P.first[2] * g.sw + pw_ - g.pw);
    const int64_t blocks = P.count[0] > 0 && P.count[1] > 0 && P.count[2] > 0
                               ? P.count[0] * direct_blocks_per_slice(plans[f], QB) : 0;
    first_blk[f + 1] = first_blk[f] + blocks;
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const T* wg = w + grp * g.Cog * g.CKg;
      wr[f * g.G + grp] = repack<T>(g.Cig, g.Cog, int64_t(P.taps.size()), OB,
                                    [&](int64_t ci, int64_t co, int64_t tt) {
                                      return wg[(co * g.Cig + ci) * g.K + P.taps[tt]];
                                    });
    }
  }
  const int64_t blocks = first_blk[n_ph];
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_parts = pieces_for(g.N * g.G, blocks, big ? max_threads() : 1);
  const int64_t per_part = (blocks + n_parts - 1) / n_parts;
  const int64_t items = g.N * g.G * n_parts;
#pragma omp parallel if (big && items > 1)
  {
    Scratch<T, 0> Y(g.Cog * yb.L + yb.slack);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_parts, part = it % n_parts;
      const int64_t grp = ng % g.G;
      pad_image(y + ng * g.Cog * g.Lo, g.Cog, g.Do, g.Ho, g.Wo, yb, Y.data());
      const int64_t b0 = part * per_part, b1 = std::min(blocks, b0 + per_part);
      for (int64_t f = 0; f < n_ph; ++f) {
        const int64_t lo = std::max(b0, first_blk[f]), hi = std::min(b1, first_blk[f + 1]);
        if (lo >= hi) continue;
        direct_blocks<T, OB>(Y.data(), wr[f * g.G + grp].data(), g.Cig,
                             bias ? bias + grp * g.Cig : nullptr,
                             x + ng * g.Cig * g.Li + out0[f], plans[f], lo - first_blk[f],
                             hi - first_blk[f]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Depthwise: one image channel per group (Cig == 1), direct loops on boxes of single planes.
// Column channel co reads image channel co / Cog.

// y[n, co] = bias[co] + sum_t w[co, t] * x[n, co / Cog, window(o) + t], row by row: the
// geometries too narrow for a flat grid (the others run correlate_direct, which handles one
// input channel per group just as well).
template <class T>
void correlate_depthwise(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  const int64_t items = g.N * g.Co;
  const bool par = double(items) * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    Scratch<T, 0> P(g.box.L + g.box.slack);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / g.Co, co = it % g.Co;
      const T* wp = w + co * g.K;
      const T b0 = bias ? bias[co] : T(0);
      T* yp = y + it * g.Lo;
      pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
      for (int64_t od = 0; od < g.Do; ++od)
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          T* yr = yp + (od * g.Ho + oh) * g.Wo;
          const T* Pr = P.data() + od * g.slice + oh * g.box.Wb;
          std::fill(yr, yr + g.Wo, b0);
          for (int64_t t = 0; t < g.K; ++t) {
            const T wv = wp[t];
            const T* src = Pr + g.off[t];
            for (int64_t ow = 0; ow < g.Wo; ++ow) yr[ow] += wv * src[ow];
          }
        }
    }
  }
}

// x[n, c] = bias[c] + sum over the Cog column channels co of c: scatter of w[co, t] * y[n, co],
// row by row over the valid positions only, so exact for any weights (non-finite weights or
// narrow geometries; the others run correlate_adjoint_direct).
template <class T>
void correlate_adjoint_depthwise(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  const int64_t items = g.N * g.Ci;  // one image plane each; Ci == G
  const bool par = double(items) * g.Cog * g.K * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    Scratch<T, 0> gP(g.box.L + g.box.slack);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / g.Ci, c = it % g.Ci;
      std::fill(gP.data(), gP.data() + g.box.L + g.box.slack, T(0));
      for (int64_t j = 0; j < g.Cog; ++j) {
        const int64_t co = c * g.Cog + j;
        const T* yp = y + (n * g.Co + co) * g.Lo;
        const T* wp = w + co * g.K;
        for (int64_t od = 0; od < g.Do; ++od)
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            const T* yr = yp + (od * g.Ho + oh) * g.Wo;
            T* Pr = gP.data() + od * g.slice + oh * g.box.Wb;
            for (int64_t t = 0; t < g.K; ++t) {
              const T wv = wp[t];
              T* dst = Pr + g.off[t];
              for (int64_t ow = 0; ow < g.Wo; ++ow) dst[ow] += wv * yr[ow];
            }
          }
      }
      T* xp = x + it * g.Li;
      crop_image(gP.data(), 1, g.Di, g.Hi, g.Wi, g.box, xp);
      if (bias) {
        for (int64_t i = 0; i < g.Li; ++i) xp[i] += bias[c];
      }
    }
  }
}

// Sums with a fixed order whatever the alignment of the data (an `omp simd` reduction may peel
// iterations to align them, which changes the order with the buffers' addresses): kLanes
// running sums, added up in order at the end.
constexpr int64_t kLanes = 16;

template <class T>
T lane_dot(const T* a, const T* b, int64_t n) {
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  for (int64_t j = 0; i + j < n; ++j) lanes[j] += a[i + j] * b[i + j];
  T s = 0;
  for (int64_t j = 0; j < kLanes; ++j) s += lanes[j];
  return s;
}

// sum_o y[o] * P[window(o) + tap t] over the valid window positions, row by row (exact for any
// values), each row in T and the rows in double.
template <class T>
double depthwise_tap_dot(const T* yp, const T* P, int64_t t, const Geom& g) {
  double acc = 0;
  for (int64_t od = 0; od < g.Do; ++od)
    for (int64_t oh = 0; oh < g.Ho; ++oh) {
      const T* yr = yp + (od * g.Ho + oh) * g.Wo;
      const T* src = P + od * g.slice + oh * g.box.Wb + g.off[t];
      acc += double(lane_dot(yr, src, g.Wo));
    }
  return acc;
}

// dw[co, t] = sum_n sum_o y[n, co, o] * x[n, co / Cog, window(o) + t]; items own a column
// channel and sum the samples in order; partial sums in T, long sums in double.
template <class T>
void weight_grad_depthwise(const T* y, const T* x, T* dw, const Geom& g) {
  const int64_t items = g.Co;
  const bool par = double(items) * g.K * g.N * g.Lo >= kParallelWork && items > 1;
#pragma omp parallel if (par)
  {
    const int64_t Ysize = g.flat ? g.S + kBlock : 0;
    Scratch<T, 0> P(g.box.L + g.box.slack);
    Scratch<T, 1> Y(Ysize);
    Scratch<double, 2> acc(g.K);  // slot 2: with T = double, slots 0 and 1 are taken above
#pragma omp for schedule(static)
    for (int64_t co = 0; co < items; ++co) {
      std::fill(acc.data(), acc.data() + g.K, 0.0);
      for (int64_t n = 0; n < g.N; ++n) {
        const T* yp = y + (n * g.Co + co) * g.Lo;
        pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
        if (!g.flat) {
          for (int64_t t = 0; t < g.K; ++t) acc[t] += depthwise_tap_dot(yp, P.data(), t, g);
          continue;
        }
        // flat: long dots over each slice, y zero at the garbage positions, kDwTaps taps per
        // pass so that each y vector loaded serves several taps; lanes added by a fixed tree
        using L = Lanes<T>;
        const int64_t Sv = (g.S + L::n - 1) / L::n * L::n;
        for (int64_t od = 0; od < g.Do; ++od) {
          std::fill(Y.data(), Y.data() + Ysize, T(0));
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            std::memcpy(Y.data() + oh * g.Wg, yp + (od * g.Ho + oh) * g.Wo, sizeof(T) * g.Wo);
          }
          for (int64_t t0 = 0; t0 < g.K; t0 += kDwTaps) {
            const T* src[kDwTaps];  // taps past K repeat the last one (discarded)
            for (int k = 0; k < kDwTaps; ++k) src[k] = P.data() + od * g.slice + g.off[std::min(t0 + k, g.K - 1)];
            typename L::vec a[kDwTaps] = {};
            for (int64_t q = 0; q < Sv; q += L::n) {
              const typename L::vec yv = L::load(Y.data() + q);
#pragma GCC unroll 4
              for (int k = 0; k < kDwTaps; ++k) a[k] += yv * L::load(src[k] + q);
            }
            for (int64_t k = 0; k < std::min<int64_t>(kDwTaps, g.K - t0); ++k) acc[t0 + k] += double(L::sum(a[k]));
          }
        }
      }
      for (int64_t t = 0; t < g.K; ++t) {
        if (g.flat && std::isnan(acc[t])) {
          // a garbage position met an Inf or NaN of x (0 * Inf): redo this tap exactly
          acc[t] = 0;
          for (int64_t n = 0; n < g.N; ++n) {
            pad_image(x + (n * g.Ci + co / g.Cog) * g.Li, 1, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
            acc[t] += depthwise_tap_dot(y + (n * g.Co + co) * g.Lo, P.data(), t, g);
          }
        }
        dw[co * g.K + t] = T(acc[t]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Non-finite weights and column values. The paths above multiply whole rows of windows,
// padding included, by each weight (the boxes' zeros, im2col's zeros): a finite value times 0
// adds nothing, but Inf or NaN times 0 adds NaN, where the definition sums only the taps inside
// the image (as PyTorch's oneDNN path does; its slow im2col path gives NaN there). So correlate
// takes non-finite weights out (as zeros) and adds their products at the valid taps afterwards;
// weight_grad does the same with non-finite column values. The adjoint needs neither: col2im
// and the adjoint's direct path (finite weights only) add nothing for the padding.

// Calls f(o, i) for each window position o (flat in Lo) whose tap t reads inside the image, at
// image position i (flat in Li).
template <class F>
void for_valid_windows(const Geom& g, int64_t t, F&& f) {
  const int64_t a = t / (g.kh * g.kw), b = (t / g.kw) % g.kh, e = t % g.kw;
  for (int64_t od = 0; od < g.Do; ++od) {
    const int64_t iz = od * g.sd - g.pd + a * g.dd;
    if (iz < 0 || iz >= g.Di) continue;
    for (int64_t oh = 0; oh < g.Ho; ++oh) {
      const int64_t iy = oh * g.sh - g.ph + b * g.dh;
      if (iy < 0 || iy >= g.Hi) continue;
      for (int64_t ow = 0; ow < g.Wo; ++ow) {
        const int64_t ix = ow * g.sw - g.pw + e * g.dw;
        if (ix >= 0 && ix < g.Wi) f((od * g.Ho + oh) * g.Wo + ow, (iz * g.Hi + iy) * g.Wi + ix);
      }
    }
  }
}

// A copy of v[0, n) with the non-finite values replaced by zeros.
template <class T>
std::vector<T> finite_part(const T* v, int64_t n) {
  std::vector<T> f(v, v + n);
  for (T& e : f) e = std::isfinite(e) ? e : T(0);
  return f;
}

// y[n, co, o] += w[co, c, t] * x[n, ci, window(o) + t] for the non-finite weights, at the valid
// taps only.
template <class T>
void add_nonfinite_weight_taps(const T* x, const T* w, T* y, const Geom& g) {
  for (int64_t co = 0; co < g.Co; ++co)
    for (int64_t c = 0; c < g.Cig; ++c)
      for (int64_t t = 0; t < g.K; ++t) {
        const T wv = w[(co * g.Cig + c) * g.K + t];
        if (std::isfinite(wv)) continue;
        const int64_t ci = co / g.Cog * g.Cig + c;
        for (int64_t n = 0; n < g.N; ++n) {
          T* yn = y + (n * g.Co + co) * g.Lo;
          const T* xn = x + (n * g.Ci + ci) * g.Li;
          for_valid_windows(g, t, [&](int64_t o, int64_t i) { yn[o] += wv * xn[i]; });
        }
      }
}

// dw[co, c, t] += y[n, co, o] * x[n, ci, window(o) + t] for the non-finite column values y, at
// the valid taps only.
template <class T>
void add_nonfinite_column_taps(const T* y, const T* x, T* dw, const Geom& g) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t co = 0; co < g.Co; ++co) {
      const T* yn = y + (n * g.Co + co) * g.Lo;
      if (all_finite(yn, g.Lo)) continue;
      for (int64_t c = 0; c < g.Cig; ++c) {
        const T* xn = x + (n * g.Ci + co / g.Cog * g.Cig + c) * g.Li;
        for (int64_t t = 0; t < g.K; ++t) {
          T& d = dw[(co * g.Cig + c) * g.K + t];
          for_valid_windows(g, t, [&](int64_t o, int64_t i) {
            if (!std::isfinite(yn[o])) d += yn[o] * xn[i];
          });
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// The three pieces.

// y[n, g] = w[g] . im2col(x[n, g]) (+ bias). Flat grids run directly; the others (and unit
// convolutions) as im2col + GEMM, items (n, g, range of chunks).
template <class T>
void correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  if (g.N == 0 || g.Co == 0 || g.Lo == 0) return;
  if (!g.unit && !all_finite(w, g.Co * g.CKg)) {  // see "Non-finite weights" above
    const std::vector<T> finite_w = finite_part(w, g.Co * g.CKg);
    correlate(x, finite_w.data(), bias, y, g);
    add_nonfinite_weight_taps(x, w, y, g);
    return;
  }
  if (g.flat) {
    switch (pick_ob(g.Cog)) {
      case 12: return correlate_direct<T, 12>(x, w, bias, y, g);
      case 8: return correlate_direct<T, 8>(x, w, bias, y, g);
      case 4: return correlate_direct<T, 4>(x, w, bias, y, g);
      case 2: return correlate_direct<T, 2>(x, w, bias, y, g);
      default: return correlate_direct<T, 1>(x, w, bias, y, g);
    }
  }
  if (g.depthwise) return correlate_depthwise(x, w, bias, y, g);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  int64_t lc = chunk_len(g.CKg, g.Lo, sizeof(T));  // not flat: the grid is the output
  if (big && g.N * g.G < kSplitTarget) {  // few samples: cut positions finer (by shape only)
    lc = std::min(lc, std::max<int64_t>(192, (g.Lo + kSplitTarget - 1) / kSplitTarget));
  }
  const int64_t n_chunks = (g.Lo + lc - 1) / lc;
  const int64_t n_parts = pieces_for(g.N * g.G, n_chunks, big ? max_threads() : 1);
  const int64_t per_part = (n_chunks + n_parts - 1) / n_parts;
  const int64_t items = g.N * g.G * n_parts;
#pragma omp parallel if (big)  // even with one item: keeps Eigen's GEMM single-threaded
  {
    Scratch<T, 0> P(g.unit ? 0 : g.Cig * g.box.L + g.box.slack);
    Scratch<T, 1> col(g.unit ? 0 : g.CKg * lc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t ng = it / n_parts, part = it % n_parts;  // ng = n * G + group
      const int64_t grp = ng % g.G;
      const T* xg = x + ng * g.Cig * g.Li;
      T* yg = y + ng * g.Cog * g.Lo;
      CMapM<T> wT(w + grp * g.Cog * g.CKg, g.CKg, g.Cog, Eigen::OuterStride<>(g.CKg));
      if (!g.unit) pad_image(xg, g.Cig, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
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
          gemm(yT, colT, wT, true);
        } else {
          gemm(yT, colT, wT, false);
        }
      }
    }
  }
}

// x[n, g] = col2im(w[g]^T . y[n, g]) (+ bias). Runs as direct correlations per image phase
// when their grids are flat enough and the weights finite (the correlations read y's zero
// padding, and 0 * Inf = NaN where col2im adds nothing); otherwise as GEMM + col2im, items
// (n, g, block of image channels).
template <class T>
void correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  if (g.N == 0 || g.Ci == 0 || g.Li == 0) return;
  if (!g.unit && all_finite(w, g.Co * g.CKg)) {
    const AdjointPhases ap = adjoint_phases(g);
    if (ap.ok) {
      switch (pick_ob(g.Cig)) {
        case 12: return correlate_adjoint_direct<T, 12>(y, w, bias, x, g, ap);
        case 8: return correlate_adjoint_direct<T, 8>(y, w, bias, x, g, ap);
        case 4: return correlate_adjoint_direct<T, 4>(y, w, bias, x, g, ap);
        case 2: return correlate_adjoint_direct<T, 2>(y, w, bias, x, g, ap);
        default: return correlate_adjoint_direct<T, 1>(y, w, bias, x, g, ap);
      }
    }
  }
  if (g.depthwise) return correlate_adjoint_depthwise(y, w, bias, x, g);
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t n_blocks = pieces_for(g.N * g.G, g.Cig, big ? kSplitTarget : 1);
  const int64_t cb = (g.Cig + n_blocks - 1) / n_blocks;
  const int64_t items = g.N * g.G * n_blocks;
  // chunks from the whole group's rows, not from cb: col2im's order of sums must not depend
  // on the thread count
  const int64_t lc = chunk_len(g.CKg, g.Lg, sizeof(T));
#pragma omp parallel if (big)  // even with one item: keeps Eigen's GEMM single-threaded
  {
    Scratch<T, 0> gP(g.unit ? 0 : cb * g.box.L + g.box.slack);
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
        gemm(xT, yT, wsub.transpose(), false);
      } else {
        std::fill(gP.data(), gP.data() + nc * g.box.L + g.box.slack, T(0));
        for (int64_t q0 = 0; q0 < g.Lg; q0 += lc) {
          const int64_t q1 = std::min(g.Lg, q0 + lc), len = q1 - q0;
          const T* yp = yg + q0;
          int64_t ldy = g.Lo;
          if (g.flat) {
            grid_from_rows(yg, g.Cog, q0, q1, g, ext.data());
            yp = ext.data();
            ldy = len;
          }
          CMapM<T> yT(yp, len, g.Cog, Eigen::OuterStride<>(ldy));
          MapM<T> colT(col.data(), len, nc * g.K, Eigen::OuterStride<>(len));
          gemm(colT, yT, wsub.transpose(), false);
          zero_garbage(col.data(), nc * g.K, q0, q1, g);
          col2im_add(col.data(), nc, q0, q1, g, gP.data());
        }
        crop_image(gP.data(), nc, g.Di, g.Hi, g.Wi, g.box, xg + c0 * g.Li);
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

// ---------------------------------------------------------------------------------------------
// Direct weight gradients on a flat grid, without a column matrix:
//   dw[co, r] = sum_n sum_q Y[n, co, q] * P[n, ci, q + off[t]]      rows r = (ci, t)
// with Y = y laid on the grid (zero at the garbage positions, so they add exact zeros while x
// is finite) and P = x's boxes. Each x value is read once per tile straight from a box, where
// im2col + GEMM would copy it K times and pack it again. Two register tilings:
//   weight_grad_outer  column channels in the lanes: each step of a tile is an outer product of
//                      NV vectors of y by R broadcast x values, no lanes to add up afterwards.
//                      Wherever a group has at least two vectors of column channels.
//   weight_grad_dot    positions in the lanes: a tile of column channels x rows sums dot
//                      products over the positions, then adds up its lanes. Few column
//                      channels (conv3d's 16), long grid slices.
// Both go through the samples ns at a time (a "pass": each element of dw is summed in T over a
// pass, then the passes in double) and through the image channels cb at a time (a "step"): all
// threads lay the pass's y on the grid once and the step's image channels in boxes once, then
// share out the step's tiles. An element is summed in the same order whatever the threads, so
// the result does not depend on the thread count.

// P[k * L] = box of the step's image channel k = (i * G + grp) * nc + c (sample n0 + i, group
// grp, channel c0 + c), then the slack zeros. Call inside a parallel region: ends on a barrier.
// The boxes are shared out by (group, channel), so that a thread whose tiles hold a range of
// rows (weight_grad_outer) mostly reads boxes it wrote itself.
template <class T>
void pad_step(const T* x, const Geom& g, int64_t n0, int64_t nn, int64_t c0, int64_t nc, T* P) {
  const int64_t boxes = nn * g.G * nc;
#pragma omp for schedule(static)
  for (int64_t j = 0; j < boxes; ++j) {  // j = (grp * nc + c) * nn + i
    const int64_t i = j % nn, grp = j / (nc * nn), c = (j / nn) % nc;
    const int64_t k = (i * g.G + grp) * nc + c;
    pad_channels(x + (((n0 + i) * g.G + grp) * g.Cig + c0 + c) * g.Li, 1, g.Di, g.Hi, g.Wi, g.box, P + k * g.box.L, &g.box_rows);
    if (k == boxes - 1) std::fill(P + boxes * g.box.L, P + boxes * g.box.L + g.box.slack, T(0));
  }
}

// Image channels per step (of every group): as many as fit in `budget` bytes, in whole tiles
// of R rows where that is possible.
int64_t step_channels(const Geom& g, int64_t ns, int64_t elem_bytes, int64_t budget, int64_t R) {
  int64_t cb = std::clamp<int64_t>(budget / std::max<int64_t>(ns * g.G * g.box.L * elem_bytes, 1), 1, g.Cig);
  const int64_t whole = R / std::gcd<int64_t>(g.K, R);
  if (cb > whole) cb -= cb % whole;
  return cb;
}

constexpr int64_t kDotBoxBytes = 384 * 1024;  // a step's boxes stay in L2 (1 MB) with Y

// ---- weight_grad_dot: positions in the lanes
constexpr int kDotO = 4, kDotR = 6;  // 24 accumulators + 4 y rows + 1 x row: 29 of 32 registers

// out[o * ld_out + r] += sum over `samples` x `slices` runs of yrow[o][q] * xrow[r][q], q < len;
// runs are y_sample / x_sample and y_slice / x_slice apart; len is a multiple of V.
template <class T>
void dot_tile(const T* const* yrow, const T* const* xrow, int64_t samples, int64_t y_sample, int64_t x_sample,
              int64_t slices, int64_t y_slice, int64_t x_slice, int64_t len, double* out, int64_t ld_out) {
  using L = Lanes<T>;
  typename L::vec acc[kDotO][kDotR] = {};
  for (int64_t i = 0; i < samples; ++i)
    for (int64_t sl = 0; sl < slices; ++sl) {
      const T* yp[kDotO];
      const T* xp[kDotR];
      for (int o = 0; o < kDotO; ++o) yp[o] = yrow[o] + i * y_sample + sl * y_slice;
      for (int r = 0; r < kDotR; ++r) xp[r] = xrow[r] + i * x_sample + sl * x_slice;
      for (int64_t q = 0; q < len; q += L::n) {
        typename L::vec yv[kDotO];
#pragma GCC unroll 8
        for (int o = 0; o < kDotO; ++o) yv[o] = L::load(yp[o] + q);
#pragma GCC unroll 8
        for (int r = 0; r < kDotR; ++r) {
          typename L::vec xv = L::load(xp[r] + q);
#if defined(__AVX512F__)
          __asm__("" : "+v"(xv));  // one load used 4 times, not 4 loads folded into the FMAs
#endif
#pragma GCC unroll 8
          for (int o = 0; o < kDotO; ++o) acc[o][r] += yv[o] * xv;
        }
      }
    }
  for (int o = 0; o < kDotO; ++o)
    for (int r = 0; r < kDotR; ++r) out[o * ld_out + r] += double(L::sum(acc[o][r]));
}

// Y[i, co] = the pass's y rows on the grid, each slice padded to whole vectors (Sp). Tiles: items
// (group, block of ob column channels) x rows, each item's y block small enough to stay in L2.
template <class T>
void weight_grad_dot(const T* y, const T* x, T* dw, const Geom& g) {
  constexpr int64_t V = Lanes<T>::n, sz = sizeof(T);
  constexpr int64_t kBudget = 384 * 1024;    // bytes for an item's y rows
  const int64_t Sp = (g.S + V - 1) / V * V;  // one slice of the grid, padded to whole vectors
  const int64_t ldY = g.Do * Sp;             // one column channel on the padded grid
  const int64_t ns = std::clamp<int64_t>((2048 + ldY - 1) / ldY, 1, std::max<int64_t>(g.N, 1));
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int threads = big ? max_threads() : 1;
  const int64_t o_tiles = (g.Cog + kDotO - 1) / kDotO;
  int64_t nb = std::max(pieces_for(g.G, o_tiles, threads),
                        std::min(o_tiles, (ns * g.Cog * ldY * sz + kBudget - 1) / kBudget));
  if (g.G * nb < 8 * threads) nb = std::min(o_tiles, (g.G * nb + threads - 1) / threads * threads / g.G);
  const int64_t ob = (o_tiles + nb - 1) / nb * kDotO;  // column channels per block
  nb = (g.Cog + ob - 1) / ob;
  const int64_t cb = step_channels(g, ns, sz, kDotBoxBytes, kDotR);
  const int64_t items = g.G * nb;
  Scratch<T, 4> Y(ns * g.Co * ldY);                        // Y[i, co]: ldY each
  Scratch<T, 5> P(ns * g.G * cb * g.box.L + g.box.slack);  // P[i, grp, c]: box.L each
  Scratch<double, 6> acc(g.Co * g.CKg);
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) acc[i] = 0.0;
    for (int64_t n0 = 0; n0 < g.N; n0 += ns) {
      const int64_t nn = std::min(g.N - n0, ns);
#pragma omp for schedule(static)
      for (int64_t k = 0; k < nn * g.Co; ++k) {  // k = i * Co + co: zero but for the grid's rows
        T* yk = Y.data() + k * ldY;
        const T* yc = y + (n0 * g.Co + k) * g.Lo;
        std::fill(yk, yk + ldY, T(0));
        for (int64_t od = 0; od < g.Do; ++od)
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            std::memcpy(yk + od * Sp + oh * g.Wg, yc + (od * g.Ho + oh) * g.Wo, sizeof(T) * g.Wo);
          }
      }
      for (int64_t c0 = 0; c0 < g.Cig; c0 += cb) {
        const int64_t nc = std::min(g.Cig, c0 + cb) - c0, rows = nc * g.K;
        pad_step(x, g, n0, nn, c0, nc, P.data());
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; ++it) {
          const int64_t grp = it / nb, o0 = (it % nb) * ob, no = std::min(g.Cog, o0 + ob) - o0;
          for (int64_t r0 = 0; r0 < rows; r0 += kDotR) {
            // rows past the step's end and channels past `no` repeat a valid one (discarded)
            const T* xrow[kDotR];
            for (int r = 0; r < kDotR; ++r) {
              const int64_t rr = std::min(r0 + r, rows - 1);
              xrow[r] = P.data() + (grp * nc + rr / g.K) * g.box.L + g.off[rr % g.K];
            }
            for (int64_t oo = 0; oo < no; oo += kDotO) {
              const T* yrow[kDotO];
              for (int o = 0; o < kDotO; ++o) yrow[o] = Y.data() + (grp * g.Cog + o0 + std::min(oo + o, no - 1)) * ldY;
              double out[kDotO * kDotR] = {};
              dot_tile(yrow, xrow, nn, g.Co * ldY, g.G * nc * g.box.L, g.Do, Sp, g.slice, Sp, out, kDotR);
              for (int64_t o = 0; o < std::min<int64_t>(kDotO, no - oo); ++o)
                for (int64_t r = 0; r < std::min<int64_t>(kDotR, rows - r0); ++r) {
                  acc[(grp * g.Cog + o0 + oo + o) * g.CKg + c0 * g.K + r0 + r] += out[o * kDotR + r];
                }
            }
          }
        }  // the barrier here keeps P until every item is done with it
      }
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) dw[i] = T(acc[i]);
  }
}

// ---- weight_grad_outer: column channels in the lanes

// A tile: R rows x NV vectors of column channels, R * NV = 24 sums in registers (+ NV y vectors
// + 1 broadcast of the 32), and R row pointers that stay in registers too.
// sums[r][v] += sum over positions q in [q0, q1) of y[q * ld_y + v * lanes] * xrow[r][q].
template <class T, int NV, int R>
void outer_tile(const T* y, int64_t ld_y, const T* const* xrow, int64_t q0, int64_t q1,
                typename Lanes<T>::vec (&sums)[R][NV]) {
  using L = Lanes<T>;
  typename L::vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = sums[r][v];
  const T* xp[R];
  for (int r = 0; r < R; ++r) xp[r] = xrow[r];
  const T* yp = y + q0 * ld_y;
  for (int64_t q = q0; q < q1; ++q, yp += ld_y) {
    typename L::vec yv[NV];
    for (int v = 0; v < NV; ++v) yv[v] = L::load(yp + v * L::n);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const typename L::vec xv = L::splat(xp[r][q]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += yv[v] * xv;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) sums[r][v] = acc[r][v];
}

// Boxes of a step of weight_grad_outer: fewer steps (barriers) measured faster than boxes that
// stay in L2, as each x value is read by only Cog / CW tiles.
constexpr int64_t kOuterBoxBytes = 1024 * 1024, kOuterYBytes = 1024 * 1024;

// Y[i, grp, ct, q, c] = the pass's y transposed onto the grid, column channel co = ct * CW + c
// of group grp (channels past Cog are zeros): each tile of column channels has its own
// contiguous (positions x CW) block. Each thread takes an even share of the step's tiles (group,
// NV vectors of column channels, R rows) and sums them run by run: a run of a tile's Y block
// (32 KB, contiguous, so it maps evenly onto L1's sets) stays in L1 while the thread's tiles
// take it in turn, their sums parked in memory in between.
template <class T, int NV, int R = 24 / NV>
void weight_grad_outer(const T* y, const T* x, T* dw, const Geom& g) {
  using L = Lanes<T>;
  using Sums = typename L::vec[R][NV];
  constexpr int64_t CW = NV * L::n, sz = sizeof(T);  // column channels per tile
  const int64_t c_tiles = (g.Cog + CW - 1) / CW;
  // positions per run: a thread's tiles take every column tile of a group, 32 KB of Y in all
  const int64_t run = std::max<int64_t>(32 * 1024 / (CW * sz * c_tiles), 16);
  const int64_t ldY = g.G * c_tiles * g.Lg * CW;  // one sample of Y
  // samples per pass: 4096 grid positions (fewer passes, fewer barriers), as far as the pass's
  // Y fits in kOuterYBytes
  const int64_t ns = std::clamp<int64_t>(std::min((4096 + g.Lg - 1) / std::max<int64_t>(g.Lg, 1),
                                                  kOuterYBytes / std::max<int64_t>(ldY * sz, 1)),
                                         1, std::max<int64_t>(g.N, 1));
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t cb = step_channels(g, ns, sz, kOuterBoxBytes, R);
  const int64_t max_tiles = g.G * c_tiles * ((cb * g.K + R - 1) / R);
  Scratch<T, 4> Y(ns * ldY);
  Scratch<T, 5> P(ns * g.G * cb * g.box.L + g.box.slack);  // P[i, grp, c]: box.L each
  Scratch<double, 6> acc(g.Co * g.CKg);
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) acc[i] = 0.0;
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    std::vector<Sums> sums((max_tiles + threads - 1) / threads);
    std::vector<int64_t> xoff(R * sums.size());  // each tile's rows: offsets into a sample's boxes
    for (int64_t n0 = 0; n0 < g.N; n0 += ns) {
      const int64_t nn = std::min(g.N - n0, ns);
#pragma omp for schedule(static)
      for (int64_t k = 0; k < nn * g.Do * g.Ho; ++k) {  // k = (i * Do + od) * Ho + oh: one grid row
        const int64_t i = k / (g.Do * g.Ho), odh = k % (g.Do * g.Ho);
        const int64_t q_row = (odh / g.Ho) * g.S + (odh % g.Ho) * g.Wg;  // the row's first grid position
        for (int64_t gt = 0; gt < g.G * c_tiles; ++gt) {
          T* yk = Y.data() + i * ldY + (gt * g.Lg + q_row) * CW;
          std::fill(yk, yk + g.Wg * CW, T(0));
        }
        for (int64_t grp = 0; grp < g.G; ++grp) {  // (Cog x Wo, Lo apart) -> (Wo x CW, CW apart) per tile
          const T* src = y + ((n0 + i) * g.G + grp) * g.Cog * g.Lo + odh * g.Wo;
          for (int64_t c0 = 0; c0 < g.Cog; c0 += L::n)
            for (int64_t w0 = 0; w0 < g.Wo; w0 += L::n) {
              const int64_t nc = std::min<int64_t>(L::n, g.Cog - c0), nw = std::min<int64_t>(L::n, g.Wo - w0);
              // writes L::n channels: past Cog they are zeros
              T* dst = Y.data() + i * ldY + ((grp * c_tiles + c0 / CW) * g.Lg + q_row + w0) * CW + c0 % CW;
              if (nc == L::n && nw == L::n) {
                L::transpose(src + c0 * g.Lo + w0, g.Lo, dst, CW);
                continue;
              }
              T block[L::n * L::n] = {};  // an edge block, zero-padded
              for (int64_t c = 0; c < nc; ++c) std::memcpy(block + c * L::n, src + (c0 + c) * g.Lo + w0, sizeof(T) * nw);
              L::transpose(block, L::n, dst, CW, int(nw));
            }
        }
      }
      for (int64_t c0 = 0; c0 < g.Cig; c0 += cb) {
        const int64_t nc = std::min(g.Cig, c0 + cb) - c0, rows = nc * g.K;
        pad_step(x, g, n0, nn, c0, nc, P.data());
        // this thread's tiles [t0, t1) of the step, tile = (grp * r_tiles + rt) * c_tiles + ct: a
        // thread holds a range of rows, whose boxes it mostly padded itself (see pad_step)
        const int64_t r_tiles = (rows + R - 1) / R, tiles = g.G * c_tiles * r_tiles;
        const int64_t t0 = tiles * me / threads, t1 = tiles * (me + 1) / threads;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t grp = t / (c_tiles * r_tiles), r0 = (t / c_tiles) % r_tiles * R;
          for (int r = 0; r < R; ++r) {  // rows past the step's end repeat a valid one (discarded)
            const int64_t rr = std::min(r0 + r, rows - 1);
            xoff[(t - t0) * R + r] = (grp * nc + rr / g.K) * g.box.L + g.off[rr % g.K];
          }
        }
        std::memset(static_cast<void*>(sums.data()), 0, sizeof(Sums) * (t1 - t0));
        for (int64_t i = 0; i < nn; ++i)
          for (int64_t od = 0; od < g.Do; ++od)
            for (int64_t q0 = 0; q0 < g.S; q0 += run) {
              const T* Pq = P.data() + i * g.G * nc * g.box.L + od * g.slice;
              for (int64_t t = t0; t < t1; ++t) {
                const int64_t gt = t / (c_tiles * r_tiles) * c_tiles + t % c_tiles;  // grp * c_tiles + ct
                const T* Yq = Y.data() + i * ldY + (gt * g.Lg + od * g.S) * CW;
                const T* xrow[R];
                for (int r = 0; r < R; ++r) xrow[r] = Pq + xoff[(t - t0) * R + r];
                outer_tile<T, NV, R>(Yq, CW, xrow, q0, std::min(g.S, q0 + run), sums[t - t0]);
              }
            }
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t grp = t / (c_tiles * r_tiles), o0 = t % c_tiles * CW;
          const int64_t r0 = (t / c_tiles) % r_tiles * R;
          T lanes[CW];
          for (int64_t r = 0; r < std::min<int64_t>(R, rows - r0); ++r) {
            std::memcpy(lanes, sums[t - t0][r], sizeof lanes);
            for (int64_t o = 0; o < std::min(CW, g.Cog - o0); ++o)
              acc[(grp * g.Cog + o0 + o) * g.CKg + c0 * g.K + r0 + r] += double(lanes[o]);
          }
        }
#pragma omp barrier  // P is overwritten by the next step
      }
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) dw[i] = T(acc[i]);
  }
}

// Which direct weight gradient, if any (see above): the outer tiling wherever a group has more
// than one vector of column channels and slices hold >= kOuterMinSlice grid positions (it beat
// the dot tiling on long slices too once Y was laid out per column tile); the dot tiling for
// fewer column channels on slices of >= kDotMinSlice; im2col + GEMM otherwise.
constexpr int64_t kDotMinSlice = 512, kOuterMinSlice = 64;

// Returns false where neither applies.
template <class T>
bool weight_grad_direct(const T* y, const T* x, T* dw, const Geom& g) {
  if (!g.flat) return false;
  if (g.S >= kOuterMinSlice && g.Cog > 2 * Lanes<T>::n) {
    weight_grad_outer<T, 4>(y, x, dw, g);
  } else if (g.S >= kOuterMinSlice && g.Cog > Lanes<T>::n) {
    weight_grad_outer<T, 2>(y, x, dw, g);
  } else if (g.S >= kDotMinSlice) {
    weight_grad_dot(y, x, dw, g);
  } else {
    return false;
  }
  return true;
}

// dw[g] = sum_n y[n, g] . im2col(x[n, g])^T. Items (slot, g, ci block, co block): a slot is a
// fixed range of samples whose partial sum goes to its own buffer (slot 0 straight into dw), so
// every sample's x and y are read once; the slots are then added in order. Slots and blocks
// depend on the shape only, and each item sums its samples, then chunks, in increasing order.
template <class T>
void weight_grad(const T* y, const T* x, T* dw, const Geom& g, bool exact = false) {
  if (g.Co == 0 || g.CKg == 0) return;
  // A non-finite dw may come from non-finite values meeting zeros where the definition has no
  // product: x's at garbage grid positions (meeting y's zeros), y's at the padding (see
  // "Non-finite weights and column values" above). The rare case is redone exactly.
  const bool redo_if_nonfinite = !exact && !g.unit;
  if (exact && !g.unit && !all_finite(y, g.N * g.Co * g.Lo)) {
    const std::vector<T> finite_y = finite_part(y, g.N * g.Co * g.Lo);
    weight_grad(finite_y.data(), x, dw, g, true);
    add_nonfinite_column_taps(y, x, dw, g);
    return;
  }
  if (g.depthwise) {
    weight_grad_depthwise(y, x, dw, g);  // exact at garbage positions itself
    if (redo_if_nonfinite && !all_finite(dw, g.Co * g.CKg)) weight_grad(y, x, dw, g, true);
    return;
  }
  if (!exact && weight_grad_direct(y, x, dw, g)) {
    if (!all_finite(dw, g.Co * g.CKg)) weight_grad(y, x, dw, g, true);
    return;
  }
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t wsize = g.Co * g.CKg;
  int64_t n_slots = big ? std::clamp<int64_t>(g.N, 1, kSplitTarget) : 1;
  if ((n_slots - 1) * wsize > (int64_t(1) << 23)) n_slots = 1;  // huge weights: no copies
  const int target = big ? kSplitTarget : 1;
  const int64_t nb_ci = pieces_for(n_slots * g.G, g.Cig, target);
  const int64_t nb_co = pieces_for(n_slots * g.G * nb_ci, g.Cog, target);
  const int64_t cb = (g.Cig + nb_ci - 1) / nb_ci, ob = (g.Cog + nb_co - 1) / nb_co;
  const int64_t items = n_slots * g.G * nb_ci * nb_co;
  const int64_t L = g.unit ? g.Lo : g.Lg;
  const int64_t lc = g.unit ? std::max<int64_t>(g.Lo, 1) : chunk_len(g.CKg, L, sizeof(T));
  std::vector<T> partial((n_slots - 1) * wsize);
  // Both GEMM operands run along the positions; Eigen packs its left operand across that
  // stride slowly, so the operand with fewer rows goes on the left: dw^T += col^T . y when
  // there are fewer weight rows than output channels, else dw += y^T . col into a buffer.
  const bool y_left = ob < cb * g.K;
#pragma omp parallel if (big)  // even with one item: keeps Eigen's GEMM single-threaded
  {
    Scratch<T, 0> P(g.unit ? 0 : cb * g.box.L + g.box.slack);
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
        if (!g.unit) pad_image(xg, nc, g.Di, g.Hi, g.Wi, g.box, P.data(), &g.box_rows);
        for (int64_t q0 = 0; q0 < L; q0 += lc) {
          const int64_t q1 = std::min(L, q0 + lc), len = q1 - q0;
          const T* cp = xg + q0;
          int64_t ldc = g.Li;
          if (!g.unit) {
            im2col(P.data(), nc, q0, q1, g, col.data());
            if (exact && g.flat) zero_garbage(col.data(), nc * g.K, q0, q1, g);
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
            gemm(dwY, yT.transpose(), colT, true);
          } else {
            gemm(dwT, colT.transpose(), yT, true);
          }
        }
      }
      if (y_left) {  // dwT = dwY^T, in tiles that stay in L1
        constexpr int64_t tile = 32;
        for (int64_t k0 = 0; k0 < nc * g.K; k0 += tile)
          for (int64_t o1 = 0; o1 < no; o1 += tile) {
            const int64_t k1 = std::min(nc * g.K, k0 + tile), o2 = std::min(no, o1 + tile);
            for (int64_t o = o1; o < o2; ++o)
              for (int64_t k = k0; k < k1; ++k) dwT(k, o) = dwY(o, k);
          }
      }
    }
    if (n_slots > 1) {  // dw = ((slot 0 + slot 1) + slot 2) + ..., in blocks
      constexpr int64_t blk = 4096;
#pragma omp for schedule(static)
      for (int64_t i0 = 0; i0 < wsize; i0 += blk) {
        const int64_t i1 = std::min(wsize, i0 + blk);
        for (int64_t s = 1; s < n_slots; ++s) {
          const T* ps = partial.data() + (s - 1) * wsize;
          for (int64_t i = i0; i < i1; ++i) dw[i] += ps[i];
        }
      }
    }
  }
  if (redo_if_nonfinite && !all_finite(dw, wsize)) weight_grad(y, x, dw, g, true);
}

// db[c] = sum_n sum_o dy[n, c, o], in double.
template <class T>
void bias_grad(const T* dy, T* db, int64_t N, int64_t C, int64_t L) {
  const bool par = double(N) * C * L >= kParallelWork && C > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t c = 0; c < C; ++c) {
    double lanes[kLanes] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* p = dy + (n * C + c) * L;
      int64_t i = 0;
      for (; i + kLanes <= L; i += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) lanes[j] += double(p[i + j]);
      for (int64_t j = 0; i + j < L; ++j) lanes[j] += double(p[i + j]);
    }
    double acc = 0;
    for (int64_t j = 0; j < kLanes; ++j) acc += lanes[j];
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
