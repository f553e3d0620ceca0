// weight_grad, the third of the three pieces (see conv_kernels.cpp): dw = sum_n y . im2col(x)^T,
// the weight gradient of both directions; and bias_grad.
#include "internal/conv_kernels_shared.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"  // see Lanes

namespace tg::kernels::TG_ISA_NS::conv_detail {

namespace {

// ---------------------------------------------------------------------------------------------
// Depthwise: one image channel per group (Cig == 1), direct loops on boxes of single planes.
// Column channel co reads image channel co / Cog.

// Room the depthwise weight gradient keeps after a grid slice of y (reads run past it by less
// than one vector), and the kernel taps it sums in one pass.
constexpr int64_t kBlock = 64;
constexpr int kDwTaps = 3;

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

// dw[co, c, t] += y[n, co, o] * x[n, ci, window(o) + t] for the non-finite column values y
// (every value when `every_value`), at the valid taps only.
template <class T>
void add_column_taps(const T* y, const T* x, T* dw, const Geom& g, bool every_value) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t co = 0; co < g.Co; ++co) {
      const T* yn = y + (n * g.Co + co) * g.Lo;
      if (!every_value && all_finite(yn, g.Lo)) continue;
      for (int64_t c = 0; c < g.Cig; ++c) {
        const T* xn = x + (n * g.Ci + co / g.Cog * g.Cig + c) * g.Li;
        for (int64_t t = 0; t < g.K; ++t) {
          T& d = dw[(co * g.Cig + c) * g.K + t];
          for_valid_windows(g, t, [&](int64_t o, int64_t i) {
            if (every_value || !std::isfinite(yn[o])) d += yn[o] * xn[i];
          });
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
// pass, then the passes in double) and through the image channels cb at a time (a "step"); the
// threads share out each step's tiles, and each lays the y and the boxes its tiles read in its
// own buffers, so that no thread waits for another until the end (on a busy machine, a barrier
// per step stalled every thread whenever one was preempted). An element is summed in the same
// order whatever the threads, so the result does not depend on the thread count.

// The boxes of a step of the direct weight gradients: P[k * L] = box of the step's image
// channel k = (i * G + grp) * nc + c (sample n0 + i, group grp, channel c0 + c), for k < boxes
// (nn * G * nc), and k == boxes: the slack zeros after the last box. A thread pads the boxes its
// own tiles read, and the box after each run of them: flat reads at garbage positions run a
// little past a box and must meet image values or zeros, never another call's leftovers.
template <class T>
void pad_box(const T* x, const Geom& g, int64_t n0, int64_t c0, int64_t nc, int64_t boxes, int64_t k, T* P) {
  if (k == boxes) std::fill(P + boxes * g.box.L, P + boxes * g.box.L + g.box.slack, T(0));
  if (k >= boxes) return;
  const int64_t i = k / (g.G * nc), grp = k / nc % g.G, c = k % nc;
  pad_channels(x + (((n0 + i) * g.G + grp) * g.Cig + c0 + c) * g.Li, 1, g.Di, g.Hi, g.Wi, g.box, P + k * g.box.L,
               &g.box_rows);
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
// 24 sums + 4 y rows + 1 x row: 29 of AVX-512's 32 registers; 9 + 3 + 1 of the others' 16
constexpr int kDotO = kVecRegs >= 32 ? 4 : 3, kDotR = kVecRegs >= 32 ? 6 : 3;

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
          // one load used kDotO times, not kDotO loads folded into the FMAs
#if defined(__AVX512F__)
          __asm__("" : "+v"(xv));
#elif defined(__x86_64__)
          __asm__("" : "+x"(xv));
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
  Scratch<double, 6> acc(g.Co * g.CKg);
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) acc[i] = 0.0;
    // this thread's items [it0, it1): it lays out their y rows and their groups' boxes itself
    const int nt = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t it0 = items * me / nt, it1 = items * (me + 1) / nt;
    Scratch<T, 4> Y(it1 > it0 ? ns * g.Co * ldY : 0);                        // Y[i, co]: ldY each
    Scratch<T, 5> P(it1 > it0 ? ns * g.G * cb * g.box.L + g.box.slack : 0);  // P[i, grp, c]: box.L each
    for (int64_t n0 = 0; n0 < g.N && it1 > it0; n0 += ns) {
      const int64_t nn = std::min(g.N - n0, ns);
      for (int64_t it = it0; it < it1; ++it) {
        const int64_t grp = it / nb, o0 = (it % nb) * ob, no = std::min(g.Cog, o0 + ob) - o0;
        for (int64_t i = 0; i < nn; ++i)
          for (int64_t co = grp * g.Cog + o0; co < grp * g.Cog + o0 + no; ++co) {  // zero but for the grid's rows
            T* yk = Y.data() + (i * g.Co + co) * ldY;
            const T* yc = y + ((n0 + i) * g.Co + co) * g.Lo;
            std::fill(yk, yk + ldY, T(0));
            for (int64_t od = 0; od < g.Do; ++od)
              for (int64_t oh = 0; oh < g.Ho; ++oh) {
                std::memcpy(yk + od * Sp + oh * g.Wg, yc + (od * g.Ho + oh) * g.Wo, sizeof(T) * g.Wo);
              }
          }
      }
      for (int64_t c0 = 0; c0 < g.Cig; c0 += cb) {
        const int64_t nc = std::min(g.Cig, c0 + cb) - c0, rows = nc * g.K;
        const int64_t boxes = nn * g.G * nc;  // the boxes of the items' groups, every sample
        for (int64_t i = 0; i < nn; ++i)
          for (int64_t k = (i * g.G + it0 / nb) * nc; k <= (i * g.G + (it1 - 1) / nb + 1) * nc; ++k) {
            pad_box(x, g, n0, c0, nc, boxes, k, P.data());
          }
        for (int64_t it = it0; it < it1; ++it) {
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
        }
      }
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.Co * g.CKg; ++i) dw[i] = T(acc[i]);
  }
}

// ---- weight_grad_outer: column channels in the lanes

// A tile: R rows x NV vectors of column channels, R * NV = kAccRegs sums in registers (+ NV y
// vectors + 1 broadcast), and R row pointers that stay in registers too.
// sums[r][v] += sum over positions q in [q0, q1) of y[q * ld_y + v * lanes] * xrow[r][q],
// skipping the garbage positions of the grid (columns Wo .. Wg - 1 of each grid row, where y is
// zero): at stride 2 on 28 x 28 they were 1 of every 15 multiply-adds.
template <class T, int NV, int R>
void outer_tile(const T* y, int64_t ld_y, const T* const* xrow, int64_t q0, int64_t q1, int64_t Wg, int64_t Wo,
                typename Lanes<T>::vec (&sums)[R][NV]) {
  using L = Lanes<T>;
  typename L::vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = sums[r][v];
  const T* xp[R];
  for (int r = 0; r < R; ++r) xp[r] = xrow[r];
  for (int64_t q = q0, col = q0 % Wg; q < q1; col = Wo) {  // col: q's grid column
    if (col >= Wo) {
      q += Wg - col;
      col = 0;
      if (q >= q1) break;
    }
    const int64_t end = std::min(q1, q + (Wo - col));
    const T* yp = y + q * ld_y;
    for (; q < end; ++q, yp += ld_y) {
      typename L::vec yv[NV];
      for (int v = 0; v < NV; ++v) yv[v] = L::load(yp + v * L::n);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const typename L::vec xv = L::splat(xp[r][q]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] += yv[v] * xv;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) sums[r][v] = acc[r][v];
}

// Boxes of a step of weight_grad_outer: fewer steps measured faster than boxes that stay in L2,
// as each x value is read by only Cog / CW tiles.
constexpr int64_t kOuterBoxBytes = 1024 * 1024, kOuterYBytes = 1024 * 1024;

// Y[i, grp, ct, q, c] = samples n0 .. n0 + nn of y transposed onto the grid, column channel
// co = ct * CW + c of group grp (channels past Cog are zeros): each tile of column channels has
// its own contiguous (positions x CW) block. ldY: one sample.
template <class T, int CW>
void transpose_onto_grid(const T* y, const Geom& g, int64_t n0, int64_t nn, int64_t c_tiles, int64_t ldY,
                         T* Y) {
  using L = Lanes<T>;
  const int64_t y_size = g.N * g.Co * g.Lo;
  for (int64_t k = 0; k < nn * g.Do * g.Ho; ++k) {  // k = (i * Do + od) * Ho + oh: one grid row
    const int64_t i = k / (g.Do * g.Ho), odh = k % (g.Do * g.Ho);
    const int64_t q_row = (odh / g.Ho) * g.S + (odh % g.Ho) * g.Wg;  // the row's first grid position
    for (int64_t gt = 0; gt < g.G * c_tiles; ++gt) {
      T* yk = Y + i * ldY + (gt * g.Lg + q_row) * CW;
      std::fill(yk, yk + g.Wg * CW, T(0));
    }
    for (int64_t grp = 0; grp < g.G; ++grp) {  // (Cog x Wo, Lo apart) -> (Wo x CW, CW apart) per tile
      const int64_t src_at = ((n0 + i) * g.G + grp) * g.Cog * g.Lo + odh * g.Wo;
      const T* src = y + src_at;
      for (int64_t c0 = 0; c0 < g.Cog; c0 += L::n)
        for (int64_t w0 = 0; w0 < g.Wo; w0 += L::n) {
          const int64_t nc = std::min<int64_t>(L::n, g.Cog - c0), nw = std::min<int64_t>(L::n, g.Wo - w0);
          // writes L::n channels: past Cog they are zeros
          T* dst = Y + i * ldY + ((grp * c_tiles + c0 / CW) * g.Lg + q_row + w0) * CW + c0 % CW;
          // a short row (Wo < L::n) is read whole all the same where that stays inside y: the
          // values past it land in rows of the transpose that are not written. (Copied into a
          // zeroed block first, with a call to memcpy per channel, these rows took ~6% of the
          // weight gradient at 3x3 stride 2, Wo = 14.)
          if (nc == L::n && (nw == L::n || src_at + (c0 + L::n - 1) * g.Lo + w0 + L::n <= y_size)) {
            L::transpose(src + c0 * g.Lo + w0, g.Lo, dst, CW, int(nw));
            continue;
          }
          T block[L::n * L::n] = {};  // an edge block, zero-padded
          for (int64_t c = 0; c < nc; ++c) std::memcpy(block + c * L::n, src + (c0 + c) * g.Lo + w0, sizeof(T) * nw);
          L::transpose(block, L::n, dst, CW, int(nw));
        }
    }
  }
}

// Each thread takes an even share of each step's tiles (group, NV vectors of column channels,
// R rows), lays the pass's y on the grid (Y, see transpose_onto_grid) and the image channels its
// tiles read in boxes itself, in its own buffers, and sums its tiles run by run: a run of a
// tile's Y block (32 KB, contiguous, so it maps evenly onto L1's sets) stays in L1 while the
// thread's tiles take it in turn, their sums parked in memory in between. No thread waits for
// another between the first and the last step (on a busy machine a barrier per step cost more
// than the computation: a preempted thread stalled all others); the price is Y laid out once
// per thread, about 1 / CKg of the work.
template <class T, int NV, int R = kAccRegs / NV>
void weight_grad_outer(const T* y, const T* x, T* dw, const Geom& g) {
  using L = Lanes<T>;
  using Sums = typename L::vec[R][NV];
  constexpr int64_t CW = NV * L::n, sz = sizeof(T);  // column channels per tile
  const int64_t c_tiles = (g.Cog + CW - 1) / CW;
  // positions per run: a thread's tiles take every column tile of a group, 32 KB of Y in all
  const int64_t run = std::max<int64_t>(32 * 1024 / (CW * sz * c_tiles), 16);
  const int64_t ldY = g.G * c_tiles * g.Lg * CW;  // one sample of Y
  // samples per pass: 4096 grid positions (fewer passes), as far as the pass's Y fits in
  // kOuterYBytes
  const int64_t ns = std::clamp<int64_t>(std::min((4096 + g.Lg - 1) / std::max<int64_t>(g.Lg, 1),
                                                  kOuterYBytes / std::max<int64_t>(ldY * sz, 1)),
                                         1, std::max<int64_t>(g.N, 1));
  const bool big = double(g.N) * g.Co * g.CKg * g.Lo >= kParallelWork;
  const int64_t cb = step_channels(g, ns, sz, kOuterBoxBytes, R);
  const int64_t max_tiles = g.G * c_tiles * ((cb * g.K + R - 1) / R);
  // The sums of the passes and steps, in double: acc[grp, row, c] with the column channels
  // (padded to whole tiles, Cp) contiguous, so that a tile adds its lanes to one contiguous run
  // per row. (Laid out as dw, a tile's 64 channels went to 64 cache lines CKg apart per row:
  // 15% of the kernel at stride 2.)
  const int64_t Cp = c_tiles * CW;
  Scratch<double, 6> acc(g.G * g.CKg * Cp);
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.G * g.CKg * Cp; ++i) acc[i] = 0.0;
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    Scratch<T, 4> Y(ns * ldY);
    Scratch<T, 5> P(ns * g.G * cb * g.box.L + g.box.slack);  // P[i, grp, c]: box.L each
    std::vector<Sums> sums((max_tiles + threads - 1) / threads);
    std::vector<int64_t> xoff(R * sums.size());  // each tile's rows: offsets into a sample's boxes
    for (int64_t n0 = 0; n0 < g.N; n0 += ns) {
      const int64_t nn = std::min(g.N - n0, ns);
      bool y_ready = false;
      for (int64_t c0 = 0; c0 < g.Cig; c0 += cb) {
        const int64_t nc = std::min(g.Cig, c0 + cb) - c0, rows = nc * g.K;
        // this thread's tiles [t0, t1) of the step, tile = (grp * r_tiles + rt) * c_tiles + ct:
        // a range of rows, so of image channels, of a few groups
        const int64_t r_tiles = (rows + R - 1) / R, tiles = g.G * c_tiles * r_tiles;
        const int64_t t0 = tiles * me / threads, t1 = tiles * (me + 1) / threads;
        if (t0 == t1) continue;
        if (!y_ready) transpose_onto_grid<T, CW>(y, g, n0, nn, c_tiles, ldY, Y.data());
        y_ready = true;
        // the boxes of the channels [lo, hi] that the tiles of group grp read (see pad_box)
        const int64_t boxes = nn * g.G * nc;
        const int64_t grp0 = t0 / (c_tiles * r_tiles), grp1 = (t1 - 1) / (c_tiles * r_tiles);
        for (int64_t grp = grp0; grp <= grp1; ++grp) {
          const int64_t ta = std::max(t0, grp * c_tiles * r_tiles), tb = std::min(t1, (grp + 1) * c_tiles * r_tiles) - 1;
          const int64_t lo = (ta / c_tiles) % r_tiles * R / g.K;
          const int64_t hi = std::min(rows - 1, (tb / c_tiles) % r_tiles * R + R - 1) / g.K;
          for (int64_t i = 0; i < nn; ++i)
            for (int64_t c = lo; c <= hi + 1; ++c) pad_box(x, g, n0, c0, nc, boxes, (i * g.G + grp) * nc + c, P.data());
        }
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
                outer_tile<T, NV, R>(Yq, CW, xrow, q0, std::min(g.S, q0 + run), g.Wg, g.Wo, sums[t - t0]);
              }
            }
        for (int64_t t = t0; t < t1; ++t) {  // the tiles' elements of acc are this thread's alone
          const int64_t grp = t / (c_tiles * r_tiles), o0 = t % c_tiles * CW;
          const int64_t r0 = (t / c_tiles) % r_tiles * R;
          T lanes[CW];
          for (int64_t r = 0; r < std::min<int64_t>(R, rows - r0); ++r) {
            std::memcpy(lanes, sums[t - t0][r], sizeof lanes);
            double* a = acc.data() + (grp * g.CKg + c0 * g.K + r0 + r) * Cp + o0;
            for (int64_t o = 0; o < CW; ++o) a[o] += double(lanes[o]);
          }
        }
      }
    }
#pragma omp barrier
    // dw[grp, co, row] = acc[grp, row, co], in blocks of L::n rows whose acc runs stay in L1:
    // whole L::n x L::n squares rounded to T and transposed in registers (element by element,
    // the strided reads took ~4% of the kernel at 3x3 stride 2), the edges one by one
    constexpr int64_t kRows = L::n;
    const int64_t row_blocks = (g.CKg + kRows - 1) / kRows;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < g.G * row_blocks; ++b) {
      const int64_t grp = b / row_blocks, k0 = b % row_blocks * kRows, k1 = std::min(g.CKg, k0 + kRows);
      const double* ak = acc.data() + (grp * g.CKg + k0) * Cp;
      T* dk = dw + grp * g.Cog * g.CKg + k0;
      int64_t o0 = 0;
      for (; k1 - k0 == kRows && o0 + L::n <= g.Cog; o0 += L::n) {
        T square[L::n * L::n];
        for (int64_t k = 0; k < kRows; ++k)
          for (int64_t o = 0; o < L::n; ++o) square[k * L::n + o] = T(ak[k * Cp + o0 + o]);
        L::transpose(square, L::n, dk + o0 * g.CKg, g.CKg);
      }
      for (int64_t o = o0; o < g.Cog; ++o)
        for (int64_t k = k0; k < k1; ++k) dk[o * g.CKg + k - k0] = T(ak[(k - k0) * Cp + o]);
    }
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
  if (kVecRegs >= 32 && g.S >= kOuterMinSlice && g.Cog > 2 * Lanes<T>::n) {
    weight_grad_outer<T, 4>(y, x, dw, g);  // 4 x 6 tiles; with 16 registers 2 x 6 ones below
  } else if (g.S >= kOuterMinSlice && g.Cog > Lanes<T>::n) {
    weight_grad_outer<T, 2>(y, x, dw, g);
  } else if (g.S >= kDotMinSlice) {
    weight_grad_dot(y, x, dw, g);
  } else {
    return false;
  }
  return true;
}

}  // namespace

// dw[g] = sum_n y[n, g] . im2col(x[n, g])^T. Items (slot, g, ci block, co block): a slot is a
// fixed range of samples whose partial sum goes to its own buffer (slot 0 straight into dw), so
// every sample's x and y are read once; the slots are then added in order. Slots and blocks
// depend on the shape only, and each item sums its samples, then chunks, in increasing order.
template <class T>
void weight_grad(const T* y, const T* x, T* dw, const Geom& g, bool exact) {
  if (g.Co == 0 || g.CKg == 0) return;
  // A non-finite dw may come from non-finite values meeting zeros where the definition has no
  // product: x's at garbage grid positions (meeting y's zeros), y's at the padding (see
  // "Non-finite weights and column values" in conv_kernels_shared.h). The rare case is
  // redone exactly.
  const bool redo_if_nonfinite = !exact && !g.unit;
  if (exact && !g.unit && !all_finite(y, g.N * g.Co * g.Lo)) {
    if (!all_finite(x, g.N * g.Ci * g.Li)) {
      // the zeroed column values would meet x's Inf or NaN: every tap by the definition
      std::fill(dw, dw + g.Co * g.CKg, T(0));
      add_column_taps(y, x, dw, g, true);
      return;
    }
    const std::vector<T> finite_y = finite_part(y, g.N * g.Co * g.Lo);
    weight_grad(finite_y.data(), x, dw, g, true);
    add_column_taps(y, x, dw, g, false);
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
template <class T, class R>
void bias_grad(const T* dy, R* db, int64_t N, int64_t C, int64_t L) {
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
    db[c] = R(acc);
  }
}

template void weight_grad<float>(const float*, const float*, float*, const Geom&, bool);
template void weight_grad<double>(const double*, const double*, double*, const Geom&, bool);
template void bias_grad<float>(const float*, float*, int64_t, int64_t, int64_t);
template void bias_grad<double>(const double*, double*, int64_t, int64_t, int64_t);
template void bias_grad<BFloat16, float>(const BFloat16*, float*, int64_t, int64_t, int64_t);
template void bias_grad<Float16, float>(const Float16*, float*, int64_t, int64_t, int64_t);

}  // namespace tg::kernels::TG_ISA_NS::conv_detail
