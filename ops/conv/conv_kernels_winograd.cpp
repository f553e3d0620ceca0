// Winograd F(4x4, 3x3): the float32 3x3 correlations of stride 1 (the forward of a 3x3
// convolution and its input gradient) with 36 products per 4x4 block of outputs instead of 144.
//
// For one input channel c and one output channel o, a 6x6 tile d of the image gives the 4x4
// block of outputs it covers (Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2015):
//
//   y = A^T [ U ⊙ V ] A,   U = G w G^T (6x6, per (o, c)),   V = B^T d B (6x6, per tile and c)
//
// and the sum over input channels moves inside: y[o] = A^T [ sum_c U[o, c] ⊙ V[c] ] A. For each
// of the 36 positions xi of the 6x6 transformed tile this sum is a matrix product
// M[xi] (outputs x tiles) = U[xi] (outputs x inputs) . V[xi] (inputs x tiles), which is where
// the time goes; the transforms are additions and small multiples.
//
//   B^T = [ 4  0 -5  0  1  0 ]    G = [  1/4     0     0  ]    A^T = [ 1  1  1  1  1  0 ]
//         [ 0 -4 -4  1  1  0 ]        [ -1/6  -1/6  -1/6  ]          [ 0  1 -1  2 -2  0 ]
//         [ 0  4 -4 -1  1  0 ]        [ -1/6   1/6  -1/6  ]          [ 0  1  1  4  4  0 ]
//         [ 0 -2 -1  2  1  0 ]        [ 1/24  1/12   1/6  ]          [ 0  1 -1  8 -8  1 ]
//         [ 0  2 -1 -2  1  0 ]        [ 1/24 -1/12   1/6  ]
//         [ 0  4  0 -5  0  1 ]        [   0     0     1   ]
//
// Rounding: the result is not the direct sum's bits. The transforms scale values by up to
// ~10 on the way in and ~8 on the way out, so the error is a few times the direct sum's (tests:
// within 2e-5 relative to the sum of |products| against float64, ConvWinograd.*). U is computed
// in double and rounded once.
//
// Non-finite and huge values: a tile mixes its 36 inputs, so one Inf or NaN would spread over
// the whole 4x4 block (and Inf - Inf gives NaN where the definition has Inf). The path
// therefore refuses, and the caller runs the direct kernels, when any weight or input value is
// not finite or larger than kLimit in magnitude (so the transforms cannot overflow either). The
// inputs are checked on the fly, as the tiles are transformed; then the whole output is
// recomputed by the caller.
//
// 3-D: a kx3x3 kernel (stride 1) is the sum over its k slices e of 3x3 correlations, output
// slice z reading image slice z - front + e; the products run over (e, c) together.
//
// Layout of the work: items (group, block of tile rows, run of output slices, part of the output
// channels), each owned by one thread; the blocks are cut finer, and slices and channels cut at
// all, only as the thread count needs, but every output is summed by one item in the same order
// whatever the cut, so results are bit-identical for any thread count.
#include "conv_kernels.h"
#include "internal/conv_kernels_shared.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // see Lanes

namespace tg::kernels::TG_ISA_NS::conv_detail {

namespace {

using L = Lanes<float>;
using vec = L::vec;
constexpr int kLanes = L::n;

// Largest |value| the path accepts: products stay below 1e24, and 36 of them times the
// transforms' factors times millions of channels stay far below float32's 3.4e38.
constexpr float kLimit = 1e12f;
const uint32_t kLimitBits = [] {  // kLimit's bits: a larger magnitude, Inf or NaN has larger ones
  uint32_t bits;
  std::memcpy(&bits, &kLimit, sizeof bits);
  return bits;
}();

// Tile geometry of one correlation: image (channels Cx per group, Dx x Hx x Wx) -> output (Cy per
// group, Dy x Hy x Wy), y[o, z, i, j] = bias[o] + sum_{c, e, a, b} w[o, c, e, a, b]
// x[c, z - front + e, i - top + a, j - left + b], e < KD (1 in 2-D). A 3-D convolution is a sum
// over the KD kernel slices of 2-D ones: its products run over (e, c), Cd = KD * Cx of them.
struct Problem {
  int64_t N, G, Cx, Cy, Dx, Hx, Wx, Dy, Hy, Wy, front, top, left, KD, Cd;
  int64_t Th, Tw;        // tile rows and columns: ceil(Hy / 4), ceil(Wy / 4)
  int64_t rows_per_item; // tile rows per work item (from the shape only), out of the N x Th
                         // tile rows of the batch: an item may cover the end of one sample
                         // and the start of the next, so small planes still fill vectors
  int64_t n_blocks;      // blocks of rows_per_item tile rows per group
};

constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A block of tile rows meets at most this many samples (its segments, see run).
constexpr int kMaxSegments = 8;

// Tile rows per item, out of the batch's `total` rows (Th per sample): blocks of at most about
// 192 tiles (fewer with many input channels, so that one position's transformed inputs,
// Cx x tiles, stay near 48 KB: L1), at most kMaxSegments samples, whose lengths, rounded up to
// whole vectors, waste the least.
int64_t choose_rows_per_item(int64_t total, int64_t Th, int64_t Tw, int64_t Cx) {
  const int64_t target = std::clamp<int64_t>(12288 / Cx, 2 * kLanes, 192);
  const int64_t k_max = std::min(std::max<int64_t>(1, target / Tw), (kMaxSegments - 1) * Th + 1);
  int64_t best_k = 1, best_cost = INT64_MAX;
  for (int64_t k = 1; k <= std::min(k_max, total); ++k) {
    const int64_t full = total / k, rest = total % k;
    const int64_t cost = full * round_up(k * Tw, kLanes) + (rest ? round_up(rest * Tw, kLanes) : 0)
                         + (full + (rest ? 1 : 0)) * 8 * kLanes;  // a little per item
    if (cost <= best_cost) best_cost = cost, best_k = k;
  }
  return best_k;
}

// G, the weights' transform (6x3).
constexpr double kG[6][3] = {{1.0 / 4, 0, 0},          {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                             {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};

// Output channels per register tile and vectors of tiles: OB x NV sums in registers.
constexpr int kNV = 3;
constexpr int kOB = kAccRegs / kNV;  // 8 with AVX-512's 32 registers, 4 with 16

// U, packed for the products: Up[((xi * n_ob + ob) * Cd + e * Cx + c) * kOB + o'] =
// U[xi][ob*kOB + o'][e, c] (zero for outputs past Cy), one group after another; computed in
// double and rounded once, the kOB outputs of a block side by side in the lanes of a vector of
// doubles; blocks of outputs split between threads. wf(grp, o, c, e, a, b) gives the weight.
template <class WF>
std::unique_ptr<float[]> transform_weights(const Problem& pb, WF&& wf) {
  typedef double dvec __attribute__((vector_size(kOB * sizeof(double))));
  typedef float fvec __attribute__((vector_size(kOB * sizeof(float))));
  const int64_t n_ob = (pb.Cy + kOB - 1) / kOB;
  const int64_t per_group = 36 * n_ob * pb.Cd * kOB;
  std::unique_ptr<float[]> Up(new float[size_t(pb.G * per_group)]);  // every value is written below
  const bool big = double(pb.G) * n_ob * pb.Cd * kOB * 36 >= kParallelWork;
#pragma omp parallel for schedule(static) if (big && pb.G * n_ob > 1)
  for (int64_t gob = 0; gob < pb.G * n_ob; ++gob)
    for (int64_t ec = 0; ec < pb.Cd; ++ec) {
      const int64_t grp = gob / n_ob, ob = gob % n_ob;
      const int64_t e = ec / pb.Cx, c = ec % pb.Cx, n_o = std::min<int64_t>(kOB, pb.Cy - ob * kOB);
      dvec w[3][3] = {}, gw[6][3];
      for (int64_t o1 = 0; o1 < n_o; ++o1)
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) w[a][b][o1] = wf(grp, ob * kOB + o1, c, e, a, b);
      for (int i = 0; i < 6; ++i)
        for (int b = 0; b < 3; ++b) gw[i][b] = kG[i][0] * w[0][b] + kG[i][1] * w[1][b] + kG[i][2] * w[2][b];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          const dvec u = gw[i][0] * kG[j][0] + gw[i][1] * kG[j][1] + gw[i][2] * kG[j][2];
          const fvec f = __builtin_convertvector(u, fvec);
          std::memcpy(&Up[size_t(grp * per_group + (((i * 6 + j) * n_ob + ob) * pb.Cd + ec) * kOB)], &f, sizeof f);
        }
    }
  return Up;
}

// Lane shuffles (constant indices, spelled out by pack expansion over the lanes K):
//   zip(a, b, h):  a[h], b[h], a[h + 1], b[h + 1], ...  (h = 0: the low halves, n / 2: the high)
//   unzip(a, b, p): a[p], a[p + 2], ..., b[p], b[p + 2], ...  (p = 0: the even lanes, 1: the odd)
template <int... K>
inline vec zip_lanes(vec a, vec b, std::integer_sequence<int, K...>, std::integral_constant<int, 0>) {
  return __builtin_shufflevector(a, b, ((K % 2) * kLanes + K / 2)...);
}
template <int... K>
inline vec zip_lanes(vec a, vec b, std::integer_sequence<int, K...>, std::integral_constant<int, 1>) {
  return __builtin_shufflevector(a, b, ((K % 2) * kLanes + K / 2 + kLanes / 2)...);
}
template <int... K>
inline vec unzip_lanes(vec a, vec b, std::integer_sequence<int, K...>, std::integral_constant<int, 0>) {
  return __builtin_shufflevector(a, b, (2 * K)...);
}
template <int... K>
inline vec unzip_lanes(vec a, vec b, std::integer_sequence<int, K...>, std::integral_constant<int, 1>) {
  return __builtin_shufflevector(a, b, (2 * K + 1)...);
}
using LaneSeq = std::make_integer_sequence<int, kLanes>;
inline vec zip_lo(vec a, vec b) { return zip_lanes(a, b, LaneSeq{}, std::integral_constant<int, 0>{}); }
inline vec zip_hi(vec a, vec b) { return zip_lanes(a, b, LaneSeq{}, std::integral_constant<int, 1>{}); }
inline vec even_lanes(vec a, vec b) { return unzip_lanes(a, b, LaneSeq{}, std::integral_constant<int, 0>{}); }
inline vec odd_lanes(vec a, vec b) { return unzip_lanes(a, b, LaneSeq{}, std::integral_constant<int, 1>{}); }

// p[k][t] = src[4 t + k] for t < n (a multiple of kLanes), k < 4: the four phases of a row.
inline void split_phases(const float* src, int64_t n, float* p0, float* p1, float* p2, float* p3) {
  for (int64_t t = 0; t < n; t += kLanes) {
    const float* s = src + 4 * t;
    const vec v0 = L::load(s), v1 = L::load(s + kLanes), v2 = L::load(s + 2 * kLanes), v3 = L::load(s + 3 * kLanes);
    const vec e01 = even_lanes(v0, v1), o01 = odd_lanes(v0, v1), e23 = even_lanes(v2, v3), o23 = odd_lanes(v2, v3);
    const vec q0 = even_lanes(e01, e23), q1 = even_lanes(o01, o23), q2 = odd_lanes(e01, e23), q3 = odd_lanes(o01, o23);
    std::memcpy(p0 + t, &q0, sizeof(vec));
    std::memcpy(p1 + t, &q1, sizeof(vec));
    std::memcpy(p2 + t, &q2, sizeof(vec));
    std::memcpy(p3 + t, &q3, sizeof(vec));
  }
}

// dst[4 l + j] = y[j][l], l < kLanes: four phases of a row woven back together.
inline void weave_phases(const vec* y, float* dst) {
  const vec ac_lo = zip_lo(y[0], y[2]), ac_hi = zip_hi(y[0], y[2]);
  const vec bd_lo = zip_lo(y[1], y[3]), bd_hi = zip_hi(y[1], y[3]);
  const vec r[4] = {zip_lo(ac_lo, bd_lo), zip_hi(ac_lo, bd_lo), zip_lo(ac_hi, bd_hi), zip_hi(ac_hi, bd_hi)};
  std::memcpy(dst, r, sizeof r);
}

// t = B^T d for six vectors d[0..5] (d[k * stride]).
inline void input_rows(const vec* d, int stride, vec* t) {
  const vec d0 = d[0], d1 = d[stride], d2 = d[2 * stride], d3 = d[3 * stride], d4 = d[4 * stride],
            d5 = d[5 * stride];
  const vec four = L::splat(4.0f), five = L::splat(5.0f), two = L::splat(2.0f);
  t[0] = four * d0 - five * d2 + d4;
  t[1] = (d3 + d4) - four * (d1 + d2);
  t[2] = (d4 - d3) + four * (d1 - d2);
  t[3] = (d4 - d2) + two * (d3 - d1);
  t[4] = (d4 - d2) - two * (d3 - d1);
  t[5] = four * d1 - five * d3 + d5;
}

// s = A^T m for six vectors m[0..5] (m[k * stride]).
inline void output_rows(const vec* m, int stride, vec* s) {
  const vec a = m[stride] + m[2 * stride], b = m[stride] - m[2 * stride];
  const vec c = m[3 * stride] + m[4 * stride], d = m[3 * stride] - m[4 * stride];
  s[0] = m[0] + a + c;
  s[1] = b + L::splat(2.0f) * d;
  s[2] = a + L::splat(4.0f) * c;
  s[3] = b + L::splat(8.0f) * d + m[5 * stride];
}

// Length R of a row's column phase for Tw tiles: a tile row's vectors read the phases from t0 (a
// multiple of kLanes below Tw) and from t0 + 1, so up to index round_up(Tw, kLanes), which may be
// R: the next phase's first value, seen only by lanes of tiles past Tw. (The reads from t0 + 1
// are of phases 0 and 1, so they never pass the last row's phases; the scratch keeps kLanes
// spare all the same.)
constexpr int64_t phase_len(int64_t Tw) { return round_up(Tw + 1, kLanes); }

// Rows [y0, y0 + n_rows) of a plane (H x W), padded with zeros to 4 R columns (column q holds
// the plane's column q - left; rows outside the plane are zeros), then split into their four
// column phases: ph[(k * 4 + j) * R + t] = padded row k, column 4 t + j. Two passes over
// scratch (pad: n_rows x 4 R), so that no load meets a store still in flight (a vector load
// across recent smaller stores stalls): the second checks the values, whole vectors at a time,
// and splits. Returns false when a value is out of range (see kLimit).
bool pad_and_split(const float* plane, int64_t H, int64_t W, int64_t y0, int64_t n_rows, int64_t left,
                   int64_t R, float* pad, float* ph) {
  const int64_t q0 = std::clamp<int64_t>(left, 0, 4 * R), q1 = std::clamp<int64_t>(left + W, q0, 4 * R);
  for (int64_t k = 0; k < n_rows; ++k) {
    float* pk = pad + k * 4 * R;
    const vec zero{};
    for (int64_t q = 0; q < 4 * R; q += kLanes) std::memcpy(pk + q, &zero, sizeof zero);
    const int64_t iy = y0 + k;
    if (iy < 0 || iy >= H) continue;
    const float* row = plane + iy * W + (q0 - left);
    for (int64_t q = q0; q < q1; ++q) pk[q] = row[q - q0];
  }
  // |value| > kLimit, Inf or NaN: the magnitude's bits above kLimit's (a max of integers)
  typedef uint32_t uvec __attribute__((vector_size(sizeof(vec))));
  uvec top{};
  for (int64_t q = 0; q < n_rows * 4 * R; q += kLanes) {
    uvec bits;
    std::memcpy(&bits, pad + q, sizeof bits);
    bits &= 0x7fffffffu;
    top = top > bits ? top : bits;
  }
  uint32_t lanes[kLanes];
  std::memcpy(lanes, &top, sizeof lanes);
  if (*std::max_element(lanes, lanes + kLanes) > kLimitBits) return false;
  for (int64_t k = 0; k < n_rows; ++k) {
    float* p = ph + k * 4 * R;
    split_phases(pad + k * 4 * R, R, p, p + R, p + 2 * R, p + 3 * R);
  }
  return true;
}

// Asks for rows [y0, y0 + n_rows) of a plane (those inside it) to be brought into the caches: the
// next channel's, while this one is transformed. Each channel's rows are a short run of its own
// (a few KB), too short for the hardware's prefetchers to catch up with, and the transforms
// otherwise wait on memory for a good part of their time.
void prefetch_rows(const float* plane, int64_t H, int64_t W, int64_t y0, int64_t n_rows) {
  const int64_t r0 = std::max<int64_t>(y0, 0), r1 = std::min(H, y0 + n_rows);
  if (r1 <= r0) return;
  const char* p = reinterpret_cast<const char*>(plane + r0 * W);
  const int64_t bytes = (r1 - r0) * W * int64_t(sizeof(float));
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

// V for image plane xc (channel c) and the tile rows [ty0, ty0 + rows): V[xi][c][t], t = tile
// index in the item (row-major), row stride Ts (rows of xi Cx * Ts apart). Each tile row is
// stored as whole vectors, in order: the lanes past a row's last tile spill into the next row's
// place, which that row then overwrites (and the last row's into the room past the item's
// tiles, which Ts leaves). pad, ph: scratch of (4 rows + 2) x 4 R. False: a value out of range.
bool transform_input(const float* xc, const Problem& pb, int64_t ty0, int64_t rows, int64_t c,
                     float* V, int64_t Ts, float* pad, float* ph, int64_t R) {
  if (!pad_and_split(xc, pb.Hx, pb.Wx, 4 * ty0 - pb.top, 4 * rows + 2, pb.left, R, pad, ph)) return false;
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = ph + 4 * r * 4 * R;  // phases of padded row 4 r, the tile row's first
    for (int64_t t0 = 0; t0 < pb.Tw; t0 += kLanes) {
      vec d[6], e[6][6], v[6];
      for (int j = 0; j < 6; ++j) {
        const float* pj = pr + j * 4 * R + t0;
        for (int k = 0; k < 4; ++k) d[k] = L::load(pj + k * R);
        d[4] = L::load(pj + 1);  // columns 4 (t + 1) and 4 (t + 1) + 1
        d[5] = L::load(pj + R + 1);
        input_rows(d, 1, e[j]);  // e[j][kk] = (d B)[j][kk]: the columns' transform
      }
      float* dst0 = V + c * Ts + r * pb.Tw + t0;
      for (int kk = 0; kk < 6; ++kk) {
        input_rows(&e[0][kk], 6, v);  // v[i] = (B^T d B)[i][kk]
        for (int i = 0; i < 6; ++i) std::memcpy(dst0 + (i * 6 + kk) * pb.Cx * Ts, &v[i], sizeof(vec));
      }
    }
  }
  return true;
}

// The terms of one product: per kernel slice e in range, its weights U[xi][ob][e][c][o'] and the
// transformed image slice V[xi][c][t] it meets (2-D: one term).
constexpr int kMaxKD = 4;
struct Terms {
  const float* u[kMaxKD];
  const float* v[kMaxKD];
  int n = 0;
};

// M[xi][o][t] = sum_{e, c} U[xi][o][e, c] V_e[xi][c][t] for outputs [ob * kOB, + kOB) and the NV
// vectors of tiles from t0 (rows of V and M Ts apart); zeros when there is no term.
template <int NV>
void product_tile(const Terms& terms, int64_t Cx, int64_t Ts, int64_t t0, float* Mxi) {
  vec acc[kOB][NV];
  for (int o = 0; o < kOB; ++o)
    for (int q = 0; q < NV; ++q) acc[o][q] = vec{};
  for (int k = 0; k < terms.n; ++k) {
    const float* Vxi = terms.v[k];
    const float* Uxi = terms.u[k];
    for (int64_t c = 0; c < Cx; ++c) {
      vec v[NV];
      for (int q = 0; q < NV; ++q) v[q] = L::load(Vxi + c * Ts + t0 + q * kLanes);
      const float* u = Uxi + c * kOB;
      for (int o = 0; o < kOB; ++o) {
        const vec uo = L::splat(u[o]);
        for (int q = 0; q < NV; ++q) acc[o][q] += uo * v[q];
      }
    }
  }
  for (int o = 0; o < kOB; ++o)
    for (int q = 0; q < NV; ++q) std::memcpy(Mxi + o * Ts + t0 + q * kLanes, &acc[o][q], sizeof(vec));
}

// Output channel o's blocks of the item's tiles (from tile row ty0, T tiles), from M[xi][o][t]
// (Mo = M[0][o], rows xi Mxi_stride apart), plus bias, into its plane yo.
void transform_output(const float* Mo, int64_t Mxi_stride, float bias, const Problem& pb, int64_t ty0,
                      int64_t T, float* yo) {
  for (int64_t t0 = 0; t0 < T; t0 += kLanes) {
    vec m[36], s[4][6], y[4][4];
    for (int xi = 0; xi < 36; ++xi) m[xi] = L::load(Mo + xi * Mxi_stride + t0);
    for (int kk = 0; kk < 6; ++kk) {
      vec col[4];
      output_rows(&m[kk], 6, col);  // rows of A^T M, column kk
      for (int i = 0; i < 4; ++i) s[i][kk] = col[i];
    }
    const vec b = L::splat(bias);
    for (int i = 0; i < 4; ++i) {
      output_rows(s[i], 1, y[i]);
      for (int j = 0; j < 4; ++j) y[i][j] += b;
    }
    // rows of outputs: out[i][4 l + j] = y[i][j][l], tile l's four columns side by side
    float out[4][4 * kLanes];
    for (int i = 0; i < 4; ++i) weave_phases(y[i], out[i]);
    // runs of tiles in one tile row, each 4 output rows of 4 run columns (clipped to the plane)
    const int64_t n = std::min<int64_t>(kLanes, T - t0);
    for (int64_t l = 0; l < n;) {
      const int64_t t = t0 + l, ty = ty0 + t / pb.Tw, tx = t % pb.Tw;
      const int64_t run = std::min(n - l, pb.Tw - tx);
      const int64_t ni = std::min<int64_t>(4, pb.Hy - 4 * ty), nc = std::min(4 * run, pb.Wy - 4 * tx);
      for (int64_t i = 0; i < ni; ++i)
        std::memcpy(yo + (4 * ty + i) * pb.Wy + 4 * tx, &out[i][4 * l], sizeof(float) * size_t(nc));
      l += run;
    }
  }
}

// The correlation for every item; false (y partly written) when an input is out of range.
// Items: (group, block of the batch's tile rows, run of output slices, part of the output
// channels; the blocks are cut finer, and the last two at all, only as far as the threads need:
// any cut gives the same bits, each output being summed by one item in the same order). An item keeps the last
// KD image slices it transformed (slot iz mod KD), so that each slice is transformed once per
// run, not once per output slice that reads it. Its tile rows fall in one or two (or more, on
// small planes) samples: segments, each transformed from and written to its own sample.
bool run(const float* x, const float* Up, const float* bias, float* y, const Problem& pb) {
  const int64_t n_ob = (pb.Cy + kOB - 1) / kOB;
  const int64_t per_group_u = 36 * n_ob * pb.Cd * kOB;
  const int64_t R = phase_len(pb.Tw);
  const int64_t plane_x = pb.Hx * pb.Wx, plane_y = pb.Hy * pb.Wy;
  const int64_t total_rows = pb.N * pb.Th;
  const bool big = double(pb.G) * total_rows * pb.Tw * pb.Dy * 36 * pb.Cd * pb.Cy >= kParallelWork;
  const int threads = big ? max_threads() : 1;
  // Blocks of tile rows: the shape's choice, or, when they are few for the threads, a multiple
  // of the threads' count of blocks of even sizes (a short last block idled a thread)
  int64_t rows_per_item = pb.rows_per_item, n_blocks = pb.n_blocks;
  if (threads > 1 && pb.G * n_blocks < 8 * threads) {
    const int64_t want = std::min(total_rows, round_up(n_blocks, threads));
    rows_per_item = (total_rows + want - 1) / want;
    n_blocks = (total_rows + rows_per_item - 1) / rows_per_item;
  }
  const int64_t Tmax = rows_per_item * pb.Tw, Ts_max = round_up(Tmax, kLanes) + kLanes;
  const int64_t outer = pb.G * n_blocks;
  // runs of output slices, then parts of the output channels (whose items transform the same
  // inputs each): enough items for the threads
  const int64_t n_runs = pieces_for(outer, pb.Dy, threads);
  const int64_t per_run = (pb.Dy + n_runs - 1) / n_runs;
  const int64_t n_parts = pieces_for(outer * n_runs, n_ob, threads);
  const int64_t per_part = (n_ob + n_parts - 1) / n_parts;
  const int64_t items = outer * n_runs * n_parts;
  int ok = 1;
#pragma omp parallel if (big && items > 1) reduction(& : ok)
  {
    const int64_t pad_rows = 4 * rows_per_item + 2;
    const int64_t slice_v = 36 * pb.Cx * Ts_max;  // one transformed image slice
    Scratch<float, 0> ph(2 * pad_rows * 4 * R + kLanes);  // padded rows, then their phases
    Scratch<float, 1> V(pb.KD * slice_v);
    Scratch<float, 2> M(36 * kOB * Ts_max);  // one block of outputs
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      if (!ok) continue;
      const int64_t part = it % n_parts, run_i = (it / n_parts) % n_runs;
      const int64_t blk = (it / (n_parts * n_runs)) % n_blocks, grp = it / (n_parts * n_runs * n_blocks);
      // the item's tile rows [gr0, gr1) of the batch, in segments of one sample each
      const int64_t gr0 = blk * rows_per_item, gr1 = std::min(total_rows, gr0 + rows_per_item);
      struct Segment {
        int64_t n, ty0, rows, t_base;
      };
      Segment seg[kMaxSegments];
      int n_seg = 0;
      for (int64_t gr = gr0; gr < gr1;) {
        const int64_t n = gr / pb.Th, ty = gr % pb.Th, rows = std::min(gr1 - gr, pb.Th - ty);
        seg[n_seg++] = Segment{n, ty, rows, (gr - gr0) * pb.Tw};
        gr += rows;
      }
      // T tiles, whole vectors of them (Tp) in the products, rows of Ts in V and M
      const int64_t T = (gr1 - gr0) * pb.Tw, Tp = round_up(T, kLanes), Ts = Tp + kLanes;
      int64_t held[kMaxKD];  // the image slice in each slot (none yet)
      std::fill(held, held + kMaxKD, INT64_MIN);
      const float* Ug = Up + grp * per_group_u;
      for (int64_t oz = run_i * per_run; oz < std::min(pb.Dy, (run_i + 1) * per_run) && ok; ++oz) {
        int64_t slot_of[kMaxKD], e_of[kMaxKD];
        int n_terms = 0;
        for (int64_t e = 0; e < pb.KD && ok; ++e) {
          const int64_t iz = oz - pb.front + e;
          if (iz < 0 || iz >= pb.Dx) continue;  // the volume's zero padding: no term
          const int64_t slot = iz % pb.KD;
          if (held[slot] != iz) {
            held[slot] = iz;
            for (int sg = 0; sg < n_seg && ok; ++sg) {
              const Segment& S = seg[sg];
              // channel c of sample n, slice iz at xs + c * Dx * plane_x
              const float* xs = x + ((S.n * pb.G + grp) * pb.Cx * pb.Dx + iz) * plane_x;
              for (int64_t c = 0; c < pb.Cx && ok; ++c) {
                if (c + 1 < pb.Cx) {
                  prefetch_rows(xs + (c + 1) * pb.Dx * plane_x, pb.Hx, pb.Wx, 4 * S.ty0 - pb.top, 4 * S.rows + 2);
                }
                ok &= int(transform_input(xs + c * pb.Dx * plane_x, pb, S.ty0, S.rows, c,
                                          V.data() + slot * slice_v + S.t_base, Ts, ph.data(),
                                          ph.data() + pad_rows * 4 * R, R));
              }
            }
          }
          slot_of[n_terms] = slot, e_of[n_terms] = e, ++n_terms;
        }
        if (!ok) break;
        // per block of kOB outputs: M[xi][o'][t] for every xi, then its outputs (the block's M
        // stays in the caches; V is read once per block, in order)
        for (int64_t ob = part * per_part; ob < std::min(n_ob, (part + 1) * per_part); ++ob) {
          for (int64_t xi = 0; xi < 36; ++xi) {
            Terms terms;
            terms.n = n_terms;
            for (int k = 0; k < n_terms; ++k) {
              terms.u[k] = Ug + ((xi * n_ob + ob) * pb.Cd + e_of[k] * pb.Cx) * kOB;
              terms.v[k] = V.data() + slot_of[k] * slice_v + xi * pb.Cx * Ts;
            }
            float* Mxi = M.data() + xi * kOB * Ts;
            int64_t t0 = 0;
            for (; t0 + kNV * kLanes <= Tp; t0 += kNV * kLanes) product_tile<kNV>(terms, pb.Cx, Ts, t0, Mxi);
            if (Tp - t0 == 2 * kLanes) product_tile<2>(terms, pb.Cx, Ts, t0, Mxi);
            if (Tp - t0 == kLanes) product_tile<1>(terms, pb.Cx, Ts, t0, Mxi);
          }
          for (int sg = 0; sg < n_seg; ++sg) {
            const Segment& S = seg[sg];
            float* ys = y + ((S.n * pb.G + grp) * pb.Cy * pb.Dy + oz) * plane_y;  // channel o at o * Dy * plane_y
            for (int64_t o = ob * kOB; o < std::min(pb.Cy, (ob + 1) * kOB); ++o) {
              transform_output(M.data() + (o - ob * kOB) * Ts + S.t_base, kOB * Ts, bias ? bias[grp * pb.Cy + o] : 0.0f,
                               pb, S.ty0, S.rows * pb.Tw, ys + o * pb.Dy * plane_y);
            }
          }
        }
      }
    }
  }
  return ok != 0;
}

// in / out: (D, H, W) of the image and the output; pad: (front, top, left).
Problem make_problem(const Geom& g, int64_t Cx, int64_t Cy, std::array<int64_t, 3> in, std::array<int64_t, 3> out,
                     std::array<int64_t, 3> pad) {
  Problem pb{g.N, g.G, Cx, Cy, in[0], in[1], in[2], out[0], out[1], out[2], pad[0], pad[1], pad[2],
             g.kd, g.kd * Cx, (out[1] + 3) / 4, (out[2] + 3) / 4, 1, 1};
  const int64_t total = pb.N * pb.Th;
  pb.rows_per_item = choose_rows_per_item(total, pb.Th, pb.Tw, pb.Cd);
  pb.n_blocks = (total + pb.rows_per_item - 1) / pb.rows_per_item;
  return pb;
}

// Whether the path's memory stays reasonable: per thread its transformed inputs (36 x channels x
// an item's tiles), one block of products and padded rows, and the transformed weights (4x the
// weights). Very wide rows (an item is at least one row of tiles) or huge channel counts take
// the direct kernels, which need far less.
bool within_budget(const Problem& pb) {
  const double Ts = double(round_up(pb.rows_per_item * pb.Tw, kLanes) + kLanes);
  const double R = double(phase_len(pb.Tw));
  const double n_o = double(round_up(pb.Cy, kOB));
  const double per_thread = 4.0 * (36 * (double(pb.Cd) + kOB) * Ts + 2 * (4.0 * double(pb.rows_per_item) + 2) * 4 * R);  // KD slices of V
  const double weights = 4.0 * 36 * n_o * double(pb.Cd) * double(pb.G);
  return per_thread <= 64e6 && weights <= 256e6;
}

bool weights_in_range(const float* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(w[i]) <= kLimit)) return false;
  return true;
}

// The padding after the image along a dim (stride 1, dilation 1): out = in + before + after - k + 1.
constexpr int64_t pad_after(int64_t in, int64_t out, int64_t k, int64_t before) { return out + k - 1 - in - before; }

// 3x3 in H and W (a depth of at most kMaxKD in 3-D), stride 1, dilation 1; at least 16 channels
// on each side and 24 terms per product (kernel depth x channels), and 16 rows and columns on
// each side; padding of at most the kernel's size - 1 on each side (wider padding has outputs
// whose windows hold only zeros: exactly the bias by definition, but a tile mixes them with its
// neighbours' rounding). Below that the direct kernels were as fast or faster (Intel Xeon, 1 thread, with
// Winograd / direct: 14x14 planes 1.0-1.5 at 32-256 channels, 16x16 0.88 and 56x56 0.52 at 64,
// 16 channels 1.0-1.2 on 32x32, 8 channels 1.1).
bool winograd_fits(const Geom& g) {
  return conv_winograd_enabled() && g.kd <= kMaxKD && g.kh == 3 && g.kw == 3 && g.sd == 1 && g.sh == 1 &&
         g.sw == 1 && g.dd == 1 && g.dh == 1 && g.dw == 1 && g.Cig >= 16 && g.Cog >= 16 &&
         g.kd * g.Cig >= 24 && g.kd * g.Cog >= 24 && std::min(g.Ho, g.Wo) >= 16 && std::min(g.Hi, g.Wi) >= 16 &&
         g.ph <= 2 && g.pw <= 2 && g.pd <= g.kd - 1 && pad_after(g.Hi, g.Ho, 3, g.ph) <= 2 &&
         pad_after(g.Wi, g.Wo, 3, g.pw) <= 2 && pad_after(g.Di, g.Do, g.kd, g.pd) <= g.kd - 1;
}

}  // namespace

template <>
bool winograd_correlate<float>(const float* x, const float* w, const float* bias, float* y, const Geom& g) {
  if (!winograd_fits(g) || !weights_in_range(w, g.Co * g.CKg)) return false;
  const Problem pb = make_problem(g, g.Cig, g.Cog, {g.Di, g.Hi, g.Wi}, {g.Do, g.Ho, g.Wo}, {g.pd, g.ph, g.pw});
  if (!within_budget(pb)) return false;
  const std::unique_ptr<float[]> Up = transform_weights(pb, [&](int64_t grp, int64_t o, int64_t c, int64_t e, int a, int b) {
    return double(w[((grp * g.Cog + o) * g.Cig + c) * g.K + (e * 3 + a) * 3 + b]);
  });
  return run(x, Up.get(), bias, y, pb);
}

template <>
bool winograd_correlate<double>(const double*, const double*, const double*, double*, const Geom&) {
  return false;
}

// x[ci, i] = sum_{co, t} w[co, ci, t] y[co, i + pad - t]: the correlation of y with the flipped,
// transposed kernel, padded by (kernel - 1) - pad.
template <>
bool winograd_correlate_adjoint<float>(const float* y, const float* w, const float* bias, float* x,
                                       const Geom& g) {
  if (!winograd_fits(g) || !weights_in_range(w, g.Co * g.CKg)) return false;
  const Problem pb = make_problem(g, g.Cog, g.Cig, {g.Do, g.Ho, g.Wo}, {g.Di, g.Hi, g.Wi},
                                  {g.kd - 1 - g.pd, 2 - g.ph, 2 - g.pw});
  if (!within_budget(pb)) return false;
  const std::unique_ptr<float[]> Up = transform_weights(pb, [&](int64_t grp, int64_t ci, int64_t co, int64_t e, int a, int b) {
    return double(w[((grp * g.Cog + co) * g.Cig + ci) * g.K + ((g.kd - 1 - e) * 3 + (2 - a)) * 3 + (2 - b)]);
  });
  return run(y, Up.get(), bias, x, pb);
}

template <>
bool winograd_correlate_adjoint<double>(const double*, const double*, const double*, double*, const Geom&) {
  return false;
}

}  // namespace tg::kernels::TG_ISA_NS::conv_detail

#pragma GCC diagnostic pop
