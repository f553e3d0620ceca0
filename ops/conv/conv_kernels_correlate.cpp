// correlate, the first of the three pieces (see conv_kernels.cpp): y = w . im2col(x), the
// normal forward and the transposed input gradient.
#include "internal/conv_kernels_shared.h"
#include "internal/conv_direct.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tg::kernels::TG_ISA_NS::conv_detail {

namespace {

// y[n, g] = w[g] . x[n, g] directly, flat grids only; items (n, g, range of blocks).
template <class T, int OB>
void correlate_direct(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  constexpr int64_t QB = direct_q<T, OB>();
  const DirectPlan pl{g.Cig, g.box.L, g.slice, g.off.data(), g.K, g.Do, g.Ho, g.Wg, g.Wo,
                      g.Lo, g.Ho * g.Wo, g.Wo, 1};
  const bool rows = row_blocks_pay<T>(pl, g.Cog, QB);  // else blocks of OB channels x QB positions
  const int wob = rows ? kRowNV * Lanes<T>::n : OB;
  const int64_t wsize = repacked_size(g.Cog, g.Cig, g.K, wob);  // per group
  Scratch<T, kRepackSlot> wr(g.G * wsize);
  for (int64_t grp = 0; grp < g.G; ++grp) {
    const T* wg = w + grp * g.Cog * g.CKg;
    repack<T>(wr.data() + grp * wsize, g.Cog, g.Cig, g.K, wob,
              [&](int64_t o, int64_t c, int64_t t) { return wg[(o * g.Cig + c) * g.K + t]; });
  }
  const int64_t blocks = g.Do * (rows ? row_blocks_per_slice(pl) : direct_blocks_per_slice(pl, QB));
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
      const T* b = bias ? bias + grp * g.Cog : nullptr;
      const int64_t b0 = part * per_part, b1 = std::min(blocks, b0 + per_part);
      if (rows) {
        direct_rows<T>(P.data(), wr.data() + grp * wsize, g.Cog, b, y + ng * g.Cog * g.Lo, pl, b0, b1);
      } else {
        direct_blocks<T, OB>(P.data(), wr.data() + grp * wsize, g.Cog, b, y + ng * g.Cog * g.Lo, pl, b0, b1);
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

// y[n, co, o] += w[co, c, t] * x[n, ci, window(o) + t] for the non-finite weights (every
// weight when `every_weight`), at the valid taps only.
template <class T>
void add_weight_taps(const T* x, const T* w, T* y, const Geom& g, bool every_weight) {
  for (int64_t co = 0; co < g.Co; ++co)
    for (int64_t c = 0; c < g.Cig; ++c)
      for (int64_t t = 0; t < g.K; ++t) {
        const T wv = w[(co * g.Cig + c) * g.K + t];
        if (!every_weight && std::isfinite(wv)) continue;
        const int64_t ci = co / g.Cog * g.Cig + c;
        for (int64_t n = 0; n < g.N; ++n) {
          T* yn = y + (n * g.Co + co) * g.Lo;
          const T* xn = x + (n * g.Ci + ci) * g.Li;
          for_valid_windows(g, t, [&](int64_t o, int64_t i) { yn[o] += wv * xn[i]; });
        }
      }
}

}  // namespace

// y[n, g] = w[g] . im2col(x[n, g]) (+ bias). Flat grids run directly; the others (and unit
// convolutions) as im2col + GEMM, items (n, g, range of chunks).
template <class T>
void correlate(const T* x, const T* w, const T* bias, T* y, const Geom& g) {
  if (g.N == 0 || g.Co == 0 || g.Lo == 0) return;
  if (winograd_correlate(x, w, bias, y, g)) return;
  if (!g.unit && !all_finite(w, g.Co * g.CKg)) {  // "Non-finite weights": conv_kernels_shared.h
    if (!all_finite(x, g.N * g.Ci * g.Li)) {
      // the zeroed weights would meet x's Inf or NaN (0 * Inf = NaN where the definition has
      // an Inf): every tap by the definition, as the rare case it is
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t co = 0; co < g.Co; ++co)
          std::fill(y + (n * g.Co + co) * g.Lo, y + (n * g.Co + co + 1) * g.Lo, bias ? bias[co] : T(0));
      add_weight_taps(x, w, y, g, true);
      return;
    }
    const std::vector<T> finite_w = finite_part(w, g.Co * g.CKg);
    correlate(x, finite_w.data(), bias, y, g);
    add_weight_taps(x, w, y, g, false);
    return;
  }
  if (g.flat) {
    return with_ob(g.Cog, [&](auto ob) { correlate_direct<T, decltype(ob)::value>(x, w, bias, y, g); });
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

template void correlate<float>(const float*, const float*, const float*, float*, const Geom&);
template void correlate<double>(const double*, const double*, const double*, double*, const Geom&);

}  // namespace tg::kernels::TG_ISA_NS::conv_detail
