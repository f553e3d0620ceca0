// correlate_adjoint, the second of the three pieces (see conv_kernels.cpp): x = col2im(w^T . y),
// the normal input gradient and the transposed forward.
#include "internal/conv_kernels_shared.h"
#include "internal/conv_direct.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tg::kernels::TG_ISA_NS::conv_detail {

namespace {

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
  // per phase: its plan and where its outputs start in x
  std::vector<DirectPlan> plans(n_ph);
  std::vector<int64_t> out0(n_ph);
  for (int64_t f = 0; f < n_ph; ++f) {
    const auto& P = ap.phases[f];
    const int64_t pd_ = f / (g.sh * g.sw), ph_ = (f / g.sw) % g.sh, pw_ = f % g.sw;
    plans[f] = DirectPlan{g.Cog, yb.L, yb.Hb * yb.Wb, P.off.data(), int64_t(P.taps.size()),
                          P.count[0], P.count[1], yb.Wb, P.count[2],
                          g.Li, g.sd * g.Hi * g.Wi, g.sh * g.Wi, g.sw};
    out0[f] = ((P.first[0] * g.sd + pd_ - g.pd) * g.Hi + (P.first[1] * g.sh + ph_ - g.ph)) * g.Wi +
              (P.first[2] * g.sw + pw_ - g.pw);
  }
  // row blocks (conv_direct.h) where they pay on every phase's grid
  bool rows = true;
  for (int64_t f = 0; f < n_ph; ++f) {
    const auto& P = ap.phases[f];
    if (P.count[0] > 0 && P.count[1] > 0 && P.count[2] > 0) rows = rows && row_blocks_pay<T>(plans[f], g.Cig, QB);
  }
  // every phase's repacked weights per group, one after another: wr + w0[f * G + grp]
  const int wob = rows ? kRowNV * Lanes<T>::n : OB;
  std::vector<int64_t> w0(n_ph * g.G + 1, 0);
  for (int64_t f = 0; f < n_ph; ++f)
    for (int64_t grp = 0; grp < g.G; ++grp)
      w0[f * g.G + grp + 1] = w0[f * g.G + grp] + repacked_size(g.Cig, g.Cog, int64_t(ap.phases[f].taps.size()), wob);
  Scratch<T, kRepackSlot> wr(w0.back());
  // The units of work: a phase, or with row blocks the two W phases of a stride-2 image row
  // together (direct_rows_pair; a is the one whose columns start first). A unit's blocks are
  // a's.
  struct Unit {
    int64_t a, b;  // phases; b < 0: a alone
  };
  std::vector<Unit> units;
  for (int64_t f = 0; f < n_ph; ++f) {
    if (rows && g.sw == 2 && f % 2 == 0) {
      const int64_t a = out0[f] < out0[f + 1] ? f : f + 1, b = 2 * f + 1 - a;
      if (out0[b] == out0[a] + 1 && rows_pair_fits(plans[a], plans[b])) {
        units.push_back({a, b});
        ++f;
        continue;
      }
    }
    units.push_back({f, -1});
  }
  const int64_t n_units = int64_t(units.size());
  std::vector<int64_t> first_blk(n_units + 1, 0);
  for (int64_t u = 0; u < n_units; ++u) {
    const auto& P = ap.phases[units[u].a];
    const DirectPlan& pl = plans[units[u].a];
    const int64_t per_slice = rows ? row_blocks_per_slice(pl) : direct_blocks_per_slice(pl, QB);
    const int64_t blocks = P.count[0] > 0 && P.count[1] > 0 && P.count[2] > 0 ? P.count[0] * per_slice : 0;
    first_blk[u + 1] = first_blk[u] + blocks;
  }
  for (int64_t f = 0; f < n_ph; ++f) {
    const auto& P = ap.phases[f];
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const T* wg = w + grp * g.Cog * g.CKg;
      repack<T>(wr.data() + w0[f * g.G + grp], g.Cig, g.Cog, int64_t(P.taps.size()), wob,
                [&](int64_t ci, int64_t co, int64_t tt) { return wg[(co * g.Cig + ci) * g.K + P.taps[tt]]; });
    }
  }
  const int64_t blocks = first_blk[n_units];
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
      for (int64_t u = 0; u < n_units; ++u) {
        const int64_t lo = std::max(b0, first_blk[u]) - first_blk[u];
        const int64_t hi = std::min(b1, first_blk[u + 1]) - first_blk[u];
        if (lo >= hi) continue;
        const int64_t f = units[u].a, fb = units[u].b;
        const T* b = bias ? bias + grp * g.Cig : nullptr;
        T* xf = x + ng * g.Cig * g.Li + out0[f];
        const T* wf = wr.data() + w0[f * g.G + grp];
        if (fb >= 0) {
          direct_rows_pair<T>(Y.data(), wf, wr.data() + w0[fb * g.G + grp], g.Cig, b, xf, plans[f], plans[fb], lo, hi);
        } else if (rows) {
          direct_rows<T>(Y.data(), wf, g.Cig, b, xf, plans[f], lo, hi);
        } else {
          direct_blocks<T, OB>(Y.data(), wf, g.Cig, b, xf, plans[f], lo, hi);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Depthwise: one image channel per group (Cig == 1), direct loops on boxes of single planes.
// Column channel co reads image channel co / Cog.

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

}  // namespace

// x[n, g] = col2im(w[g]^T . y[n, g]) (+ bias). Runs as direct correlations per image phase
// when their grids are flat enough and the weights finite (the correlations read y's zero
// padding, and 0 * Inf = NaN where col2im adds nothing); otherwise as GEMM + col2im, items
// (n, g, block of image channels).
template <class T>
void correlate_adjoint(const T* y, const T* w, const T* bias, T* x, const Geom& g) {
  if (g.N == 0 || g.Ci == 0 || g.Li == 0) return;
  if (winograd_correlate_adjoint(y, w, bias, x, g)) return;
  if (!g.unit && all_finite(w, g.Co * g.CKg)) {
    const AdjointPhases ap = adjoint_phases(g);
    if (ap.ok) {
      return with_ob(g.Cig, [&](auto ob) { correlate_adjoint_direct<T, decltype(ob)::value>(y, w, bias, x, g, ap); });
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

template void correlate_adjoint<float>(const float*, const float*, const float*, float*, const Geom&);
template void correlate_adjoint<double>(const double*, const double*, const double*, double*, const Geom&);

}  // namespace tg::kernels::TG_ISA_NS::conv_detail
