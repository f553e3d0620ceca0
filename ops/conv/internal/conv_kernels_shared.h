// What the convolution kernels share (see conv_kernels.cpp for the overview and which file
// holds what): constants, per-thread scratch, boxes, the geometry (Geom), grids and their
// im2col / col2im, the GEMM wrapper, Lanes, the non-finite helpers, and the declarations of
// the three pieces. Only the conv_kernels*.cpp files include this (it needs Eigen); like
// everything under an internal/ folder, it is not installed.
#pragma once

#include "../conv_kernels.h"
#include "../../internal/isa_dispatch.h"

#include "../../../framework/checked_math.h"

#include <Eigen/Core>
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <type_traits>
#include <vector>

namespace tg::kernels::TG_ISA_NS::conv_detail {

// Target size of one chunk of the column matrix: it is written by im2col and read back by the
// GEMM's packing right away, so it should stay in L2 (1 MB per core here).
inline constexpr int64_t kChunkBytes = 512 * 1024;
// Below this many multiply-adds a parallel region costs more than it saves. Also below Eigen's
// own threshold for threading one GEMM (1e5): every GEMM big enough for Eigen to go parallel
// is called inside one of our active regions, where Eigen stays single-threaded, so no result
// depends on the thread count.
inline constexpr double kParallelWork = 1 << 16;
// The most elements any flat loop reads past the end of a slice (a direct block or a dot
// block): boxes keep that much zeroed room after their last channel.
inline constexpr int64_t kOverrun = 128;
// Items that correlate_adjoint's GEMM path and weight_grad aim for when the batch alone gives
// too few. A constant, not the thread count: Eigen's GEMM sums an entry in an order that
// depends on where the entry falls in its blocking, so the cut into GEMMs must depend on the
// shape only for results to be identical for any thread count. 4 keeps 1, 2 or 4 threads busy.
inline constexpr int kSplitTarget = 4;

// Per-thread scratch memory, kept from call to call: fresh pages on every call (allocation,
// zeroing, page faults) cost more than a small convolution. Buffers above kKeepBytes are not
// kept. Slot tells apart the buffers one thread uses at the same time (per type). Contents are
// unspecified: every user writes before it reads.
inline constexpr int64_t kKeepBytes = int64_t(16) << 20;

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

inline Box make_box(int64_t D, int64_t H, int64_t W, int64_t pd, int64_t ph, int64_t pw, int64_t sd,
             int64_t sh, int64_t sw) {
  Box b{};
  b.D = D, b.H = H, b.W = W, b.pd = pd, b.ph = ph, b.pw = pw, b.sd = sd, b.sh = sh, b.sw = sw;
  // Checked: the phases multiply the strides, and a stride that reaches here large (the
  // windows still overlap the image) gives a box too large to index; an Error, not a wrap.
  const char* op = "convolution";
  const char* what = "the elements of the padded image buffer (stride and padding too large)";
  b.Db = D / sd + (D % sd != 0);  // ceil without D + sd - 1, which could overflow
  b.Hb = H / sh + (H % sh != 0);
  b.Wb = W / sw + (W % sw != 0);
  b.Sph = checked_mul(checked_mul(b.Db, b.Hb, op, what), b.Wb, op, what);
  b.L = checked_mul(checked_mul(checked_mul(sd, sh, op, what), sw, op, what), b.Sph, op, what);
  b.slack = b.Wb + kOverrun;
  return b;
}

// Index inside one channel's box of padded position (ud, uh, uw).
inline int64_t box_index(const Box& b, int64_t ud, int64_t uh, int64_t uw) {
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

inline BoxRows box_rows(const Box& b, int64_t Di, int64_t Hi, int64_t Wi) {
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

// dst[i] = src[i] for i < n (not overlapping). Rows of a few dozen bytes are copied inline, 32
// bytes a step and the last 32 overlapping: through a memcpy call each, the 14-column rows of
// the stride-2 input gradient's padded y cost ~3% of it (perf).
template <class T>
inline void copy_row(T* dst, const T* src, int64_t n) {
  constexpr int64_t k = int64_t(32 / sizeof(T));
  if (n > 16 * k) {
    std::memcpy(dst, src, sizeof(T) * n);
    return;
  }
  if (n < k) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    return;
  }
  int64_t i = 0;
  for (; i + k <= n; i += k) std::memcpy(dst + i, src + i, 32);
  if (i < n) std::memcpy(dst + n - k, src + n - k, 32);
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
          copy_row(row + a, im + ((c * Di + iz) * Hi + iy) * Wi + ix0, n);
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

inline Geom make_geom(const ConvParams& p) {
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
  // A stride with a single window position, or a dilation with a single tap, changes nothing:
  // make it 1, so that a valid stride of 2^62 (one output) does not give a box of 2^62 phases.
  g.sd = g.Do == 1 ? 1 : p.stride[0], g.sh = g.Ho == 1 ? 1 : p.stride[1], g.sw = g.Wo == 1 ? 1 : p.stride[2];
  g.dd = g.kd == 1 ? 1 : p.dilation[0], g.dh = g.kh == 1 ? 1 : p.dilation[1], g.dw = g.kw == 1 ? 1 : p.dilation[2];
  g.pd = p.pad_before[0], g.ph = p.pad_before[1], g.pw = p.pad_before[2];
  g.CKg = g.Cig * g.K;
  auto extent = [](int64_t o, int64_t s, int64_t k, int64_t d) {
    const char* what = "the padded extent covered by the windows";
    return o > 0 ? checked_add(checked_add(checked_mul(o - 1, s, "convolution", what),
                                           checked_mul(k - 1, d, "convolution", what), "convolution", what),
                               1, "convolution", what)
                 : 0;
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

inline int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Smallest number of pieces (<= inner) to cut an inner dim into so that outer * pieces items
// share out evenly over `threads` (a multiple of it, or so many that the remainder is small).
inline int64_t pieces_for(int64_t outer, int64_t inner, int threads) {
  if (threads <= 1 || inner <= 1) return 1;
  for (int64_t s = 1; s <= inner; ++s) {
    if ((outer * s) % threads == 0 || outer * s >= 8 * threads) return s;
  }
  return inner;
}

// Length of a chunk of grid positions for a column matrix of `rows` rows, balanced so that all
// chunks of [0, L) have about the same length. Depends on the shape only. target: the bytes a
// chunk aims at (kChunkBytes unless the caller's GEMM prefers wider chunks).
inline int64_t chunk_len(int64_t rows, int64_t L, int64_t elem_bytes, int64_t target = kChunkBytes) {
  if (L <= 0) return 1;
  const int64_t want = std::max<int64_t>(target / (elem_bytes * std::max<int64_t>(rows, 1)), 192);
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

// The vector registers of the instruction set this copy is compiled for: their width in bytes
// and how many there are. The register tilings (direct_q, the weight gradient's tiles) size
// their sums from these, so that each copy keeps its sums in registers: 64-byte vectors on the
// AVX2 or baseline path would be pairs or quads of registers, and tiles sized for AVX-512's 32
// registers would spill on the 16 of the others.
#if defined(__AVX512F__)
inline constexpr int kVecBytes = 64, kVecRegs = 32;
#elif defined(__AVX__)
inline constexpr int kVecBytes = 32, kVecRegs = 16;
#else
inline constexpr int kVecBytes = 16, kVecRegs = 16;
#endif
// Registers of sums in a register tile: three quarters of them (the rest hold loads and
// broadcasts).
inline constexpr int kAccRegs = kVecRegs * 3 / 4;

// One vector register of T (GCC/Clang vector extension, kVecBytes): the compiler keeps a small
// array of these in registers where it would spill (or vectorise the wrong way) an array of
// plain T. (GCC notes at every call that such a vector passed by value has another ABI than on
// a baseline build; irrelevant for these internal, inlined helpers, hence -Wpsabi off here and
// in the files that use Lanes.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <class T>
struct Lanes {
  typedef T vec __attribute__((vector_size(kVecBytes)));
  static constexpr int n = int(kVecBytes / sizeof(T));
  static vec load(const T* p) {
    vec v;
    std::memcpy(&v, p, sizeof v);  // unaligned
    return v;
  }
  // x in every lane (a broadcast; `vec{} + x` would have to add 0 + x first, for x = -0)
  static vec splat(T x) {
    const vec v = {x};
    return splat_lane0(v, std::make_integer_sequence<int, n>{});
  }
  // dst rows j < rows: column j of the n x n block whose row i is src[i * ld_src, + n), i < n.
  // log2(n) stages, each swapping off-diagonal blocks of d x d between row pairs (j, j + d).
  static void transpose(const T* src, int64_t ld_src, T* dst, int64_t ld_dst, int rows = n) {
    vec r[n];
#pragma GCC unroll 16
    for (int j = 0; j < n; ++j) r[j] = load(src + j * ld_src);
    transpose(r);
    for (int j = 0; j < rows; ++j) std::memcpy(dst + j * ld_dst, &r[j], sizeof(vec));
  }
  // The same n x n transpose on registers: lane k of r[j] trades places with lane j of r[k].
  static void transpose(vec (&r)[n]) { transpose_stages(r, std::make_integer_sequence<int, n>{}); }
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

 private:
  // The shuffles take their lane indices as constants (__builtin_shufflevector, which GCC and
  // clang both have), spelled out by pack expansion over the lanes K.
  template <int... K>
  static vec splat_lane0(vec v, std::integer_sequence<int, K...>) {
    return __builtin_shufflevector(v, v, (K * 0)...);
  }
  // Stage d of transpose: lane k of row j takes, where bit d of k is set, lane k - d of row
  // j + d; row j + d takes, where it is clear, lane k + d of row j.
  template <int D, int... K>
  static void transpose_stage(vec* r, std::integer_sequence<int, K...>) {
#pragma GCC unroll 16
    for (int j = 0; j < n; ++j) {
      if (j & D) continue;
      const vec a = r[j], c = r[j + D];
      r[j] = __builtin_shufflevector(a, c, ((K & D) ? n + K - D : K)...);
      r[j + D] = __builtin_shufflevector(a, c, ((K & D) ? n + K : K + D)...);
    }
  }
  template <int... K>
  static void transpose_stages(vec* r, std::integer_sequence<int, K...> lanes) {
    transpose_stage<1>(r, lanes);
    if constexpr (n >= 4) transpose_stage<2>(r, lanes);
    if constexpr (n >= 8) transpose_stage<4>(r, lanes);
    if constexpr (n >= 16) transpose_stage<8>(r, lanes);
  }
};
#pragma GCC diagnostic pop

// ---------------------------------------------------------------------------------------------
// Non-finite weights and column values. The fast paths multiply whole rows of windows,
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

// ---------------------------------------------------------------------------------------------
// The three pieces (see the overview in conv_kernels.cpp), each defined in its own file and
// instantiated there for float and double.

// y[n, g] = w[g] . im2col(x[n, g]) (+ bias); conv_kernels_correlate.cpp.
template <class T>
void correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g);

// x[n, g] = col2im(w[g]^T . y[n, g]) (+ bias); conv_kernels_adjoint.cpp.
template <class T>
void correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g);

// dw[g] = sum_n y[n, g] . im2col(x[n, g])^T; conv_kernels_weight_grad.cpp. exact: the slow path that
// keeps non-finite values out of the sums where the definition has no product.
template <class T>
void weight_grad(const T* y, const T* x, T* dw, const Geom& g, bool exact = false);

// The Winograd path of correlate and correlate_adjoint for 3x3 kernels of stride 1 (float32
// only); conv_kernels_winograd.cpp. They return false, having maybe written part of the result,
// where the path does not apply (see set_conv_winograd in conv_kernels.h; any other type) or an
// input is not finite or too large for it: the caller then runs its own kernels, which overwrite
// the whole result.
template <class T>
bool winograd_correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g);
template <class T>
bool winograd_correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g);

// db[c] = sum_n sum_o dy[n, c, o], in double; conv_kernels_weight_grad.cpp. R = T, or float for
// 16-bit dy (the reduced kernels' float32 results).
template <class T, class R = T>
void bias_grad(const T* dy, R* db, int64_t N, int64_t C, int64_t L);

}  // namespace tg::kernels::TG_ISA_NS::conv_detail
