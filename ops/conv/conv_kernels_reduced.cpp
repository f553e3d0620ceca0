// Convolution kernels with 16-bit operands S (BFloat16 or Float16) and float32 results: the
// kernels behind bf16/fp16 convolutions and the reduced float32 math modes (conv_kernels.h,
// framework/math_mode.h). The same three pieces as the float kernels (see the overview in
// conv_kernels.cpp), each as im2col in S + kernels::gemm_batched_reduced<S> (16-bit operands,
// float32 products and sums, float32 result), so that what moves through memory and what the
// GEMM reads stays 16 bits wide:
//
//   correlate_reduced  y = w . im2col(x)           per (n, g, chunk of grid positions)
//   adjoint_reduced    x = col2im(w^T . y)         per (n, g, block of image channels); the
//                                                  columns and the boxes they scatter into are
//                                                  float32. Stride 1 (and padding <= the window's
//                                                  span): y correlated with the flipped kernel
//                                                  instead (adjoint_as_correlation)
//   weight_grad_reduced dw = sum_n y . im2col(x)^T per (slot of samples, g, block of column
//                                                  channels), computed as its transpose; slots
//                                                  added in a fixed order
//
// Which way a convolution goes (widen_to_float32): where the 16-bit GEMM is the converting one
// (the float32 GEMM kernel on widened operands: every path but bf16 on Isa::Avx512Bf16), a
// convolution other than a unit one is the float32 kernels on widened copies of its operands,
// whose direct correlations beat im2col + GEMM; the pieces below serve unit convolutions there,
// and everything on the vdpbf16ps path. Either way every product and sum is float32.
//
// Legend as in conv_kernels.cpp: image x (N, Ci, Di, Hi, Wi), columns y (N, Co, Do, Ho, Wo),
// weight w (Co, Ci / G, kd, kh, kw); Cig = Ci / G, Cog = Co / G, K taps, CKg = Cig * K,
// Li / Lo image / window positions, grid positions (Geom: Wg per row, garbage past Wo on a
// flat grid).
//
// Boxes, grids, im2col, col2im_add, chunking and Scratch are the float kernels'
// (internal/conv_kernels_shared.h), instantiated for S. Unit convolutions (1x1x1, stride 1,
// no padding) use the image itself as the column matrix. Depthwise and grouped convolutions
// take the same path (a GEMM per group; depthwise ones are correct, not fast).
//
// Deterministic: every cut that reaches a GEMM (chunks, channel blocks, slots) depends on the
// shape only, every item owns what it writes, and the GEMM called inside the parallel region
// runs on the calling thread, summing each entry in an order that does not depend on where the
// entry falls. So results are identical for any thread count (on one instruction-set path).
//
// Inf and NaN, as the float32 kernels: the GEMMs multiply whole chunks, padding zeros and grid
// garbage included, and Inf or NaN times those zeros gives NaN where the definition has no
// product. correlate: a non-finite weight would meet im2col's padding, so such weights take
// the float32 kernel on widened copies (the fallback). adjoint: padding positions of the
// image are cropped away, and the garbage columns are zeroed after the GEMM (zero_garbage),
// so nothing is needed. weight_grad: a non-finite image value meets y's garbage zeros, a
// non-finite y value im2col's padding; a non-finite term makes its sum non-finite, so a dw
// that came out all finite is exact, and one that did not is recomputed by the fallback.
#include "conv_kernels.h"

#include "internal/conv_kernels_shared.h"
#include "../internal/half_access.h"
#include "../matmul_kernels.h"
#include "../../framework/isa.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace tg::kernels::TG_ISA_NS {

// This copy's float32 kernels (conv_kernels.cpp), for the fallback.
template <class T>
void convolution_forward(const T*, const T*, const T*, T*, const ConvParams&);
template <class T>
void convolution_backward(const T*, const T*, const T*, T*, T*, T*, const ConvParams&);

namespace conv_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Fallback: the operands widened to float32, then the float32 kernels.

// n values of S widened to float32 (exact) in a fresh buffer; none for a null x (an operand no
// requested result needs).
using Widened = std::unique_ptr<float[]>;
template <class S>
Widened widened(const S* x, int64_t n) {
  if (!x) return nullptr;
  Widened out(new float[size_t(n)]);  // every element written by widen_all
  widen_all(x, n, out.get());
  return out;
}

// Whether a convolution runs as the float32 kernels on widened operands rather than im2col + the
// 16-bit GEMM. It does wherever the 16-bit GEMM is the converting one (the float32 GEMM kernel
// on operands widened as they are packed: every path but bf16 on Isa::Avx512Bf16) and the
// convolution is not a unit one: the arithmetic is then the same kind (float32 products and
// sums), but the float32 kernels correlate directly from the boxes at up to 1.5x the GEMM's rate
// (bench/README.md) without a column matrix, and the widening is one streaming pass. (bf16 3x3
// 64->64 on (8, 64, 56, 56), forward + backward, Intel Xeon model 207, 1 thread: 105 ms as
// im2col + GEMM, the float32 kernels' time plus the widening this way.) A unit convolution is a
// GEMM on the image either way, and the 16-bit one reads half the bytes.
template <class S>
bool widen_to_float32(const Geom& g) {
  const bool dot_product_gemm = std::is_same_v<S, BFloat16> && active_isa() == Isa::Avx512Bf16;
  return !dot_product_gemm && !g.unit;
}

int64_t image_numel(const ConvParams& p, bool input_side) {
  const auto& s = input_side ? p.in : p.out;
  return p.N * (input_side ? p.C_in : p.C_out) * s[0] * s[1] * s[2];
}

// ---------------------------------------------------------------------------------------------
// The column matrix of one (n, g) for grid positions [q0, q1): a pointer and its row stride.
// Unit convolutions read the image itself; others im2col from the boxes P (Cig channels).
struct Cols {
  const void* p;
  int64_t ld;
};

// Rows j < n of y (channels Lo apart) on the grid range [q0, q1): y itself where the grid has
// no garbage (Wg == Wo: grid position = window position), else a copy with zero garbage.
template <class S>
Cols grid_rows(const S* y, int64_t n, int64_t q0, int64_t q1, const Geom& g, S* buf) {
  if (g.Wg == g.Wo) return {y + q0, g.Lo};
  grid_from_rows(y, n, q0, q1, g, buf);
  return {buf, q1 - q0};
}

int64_t box_stride(const Geom& g) { return g.Cig * g.box.L + g.box.slack; }

// ---------------------------------------------------------------------------------------------
// y[n, g] (Cog x Lo, float32) = w[g] (Cog x CKg) . im2col(x[n, g]) (+ bias), finite weights.

template <class S>
void correlate_reduced(const S* x, const S* w, const float* bias, float* y, const Geom& g) {
  const int64_t NG = g.N * g.G;
  // Boxes of every (n, g), built first (one parallel pass), read by the chunks of all threads.
  std::vector<S> boxes;
  if (!g.unit) {
    boxes.resize(size_t(NG * box_stride(g)));
#pragma omp parallel for schedule(static) if (NG > 1)
    for (int64_t ng = 0; ng < NG; ++ng)
      pad_image(x + ng * g.Cig * g.Li, g.Cig, g.Di, g.Hi, g.Wi, g.box, boxes.data() + ng * box_stride(g),
                &g.box_rows);
  }
  const int64_t L = g.unit ? g.Lo : g.Lg;
  // Wider chunks than the float kernels': the reduced GEMM packs the weights on every call, and
  // measured faster with chunks of about 2 MB of columns (64 x 576 x 1624: about 10% over 406).
  const int64_t lc = chunk_len(g.CKg, L, sizeof(S), 4 * kChunkBytes), chunks = (L + lc - 1) / lc;
  const bool par = double(NG) * g.Cog * g.CKg * L >= kParallelWork && NG * chunks > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t item = 0; item < NG * chunks; ++item) {
    const int64_t ng = item / chunks, gi = ng % g.G, q0 = (item % chunks) * lc, q1 = std::min(L, q0 + lc);
    const int64_t n = q1 - q0;
    Scratch<S, 0> col(g.unit ? 0 : g.CKg * n);
    Scratch<float, 0> out(g.Wg == g.Wo ? 0 : g.Cog * n);
    Cols c{nullptr, n};
    if (g.unit) {
      c = {x + ng * g.Cig * g.Li + q0, g.Li};
    } else {
      im2col(boxes.data() + ng * box_stride(g), g.Cig, q0, q1, g, col.data());
      c.p = col.data();
    }
    float* yng = y + ng * g.Cog * g.Lo;  // (n, g * Cog) is channel ng * Cog of (N, Co)
    const bool direct = g.Wg == g.Wo;      // grid position = window position: write y in place
    float* C = direct ? yng + q0 : out.data();
    const int64_t ldc = direct ? g.Lo : n;
    gemm_batched_reduced<S>(w + gi * g.Cog * g.CKg, {g.CKg, 0, false}, static_cast<const S*>(c.p), {c.ld, 0, false},
                            C, {ldc, 0, false}, 1, g.Cog, g.CKg, n, false);
    for (int64_t co = 0; co < g.Cog; ++co) {
      const float b = bias ? bias[gi * g.Cog + co] : 0.0f;
      float* yr = yng + co * g.Lo;
      if (direct) {
        if (bias)
          for (int64_t q = q0; q < q1; ++q) yr[q] += b;
        continue;
      }
      const float* src = out.data() + co * n;
      for_grid_rows(g, q0, q1, [&](int64_t off, int64_t od, int64_t oh, int64_t u0, int64_t u1) {
        float* d = yr + (od * g.Ho + oh) * g.Wo;
        for (int64_t u = u0; u < std::min(u1, g.Wo); ++u) d[u] = src[off + u - u0] + b;
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// x[n, g] (Cig x Li, float32) = col2im(w[g]^T (CKg x Cog) . y[n, g] (Cog x Lo)) (+ bias).

template <class S>
void adjoint_reduced(const S* y, const S* w, const float* bias, float* x, const Geom& g) {
  const int64_t NG = g.N * g.G;
  // Blocks of image channels, so that a small batch still gives kSplitTarget items (shape only).
  const int64_t pieces = pieces_for(NG, g.Cig, kSplitTarget), bc = (g.Cig + pieces - 1) / pieces;
  const int64_t blocks = (g.Cig + bc - 1) / bc;
  const int64_t L = g.unit ? g.Lo : g.Lg;
  const int64_t lc = chunk_len(bc * g.K + g.Cog, L, sizeof(float));
  const bool par = double(NG) * g.Cog * g.CKg * L >= kParallelWork && NG * blocks > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t item = 0; item < NG * blocks; ++item) {
    const int64_t ng = item / blocks, gi = ng % g.G, ci0 = (item % blocks) * bc, nc = std::min(bc, g.Cig - ci0);
    const S* yng = y + ng * g.Cog * g.Lo;
    const S* wt = w + gi * g.Cog * g.CKg + ci0 * g.K;  // columns (ci0 .. ci0 + nc) * K of w[g]
    float* xb = x + (ng * g.Cig + ci0) * g.Li;
    if (g.unit) {
      for (int64_t q0 = 0; q0 < L; q0 += lc) {
        const int64_t n = std::min(L, q0 + lc) - q0;
        gemm_batched_reduced<S>(wt, {g.CKg, 0, true}, yng + q0, {g.Lo, 0, false}, xb + q0, {g.Li, 0, false}, 1, nc,
                                g.Cog, n, false);
      }
    } else {
      Scratch<float, 0> box(nc * g.box.L + g.box.slack);
      Scratch<float, 1> col(nc * g.K * lc);
      Scratch<S, 0> ybuf(g.Wg == g.Wo ? 0 : g.Cog * lc);
      std::fill(box.data(), box.data() + nc * g.box.L + g.box.slack, 0.0f);
      for (int64_t q0 = 0; q0 < L; q0 += lc) {
        const int64_t q1 = std::min(L, q0 + lc), n = q1 - q0;
        const Cols yc = grid_rows(yng, g.Cog, q0, q1, g, ybuf.data());
        gemm_batched_reduced<S>(wt, {g.CKg, 0, true}, static_cast<const S*>(yc.p), {yc.ld, 0, false}, col.data(),
                                {n, 0, false}, 1, nc * g.K, g.Cog, n, false);
        zero_garbage(col.data(), nc * g.K, q0, q1, g);  // w^T times y's garbage zeros: NaN for Inf w
        col2im_add(col.data(), nc, q0, q1, g, box.data());
      }
      crop_image(box.data(), nc, g.Di, g.Hi, g.Wi, g.box, xb);
    }
    if (bias) {
      for (int64_t c = 0; c < nc; ++c) {
        const float b = bias[gi * g.Cig + ci0 + c];
        for (int64_t i = 0; i < g.Li; ++i) xb[c * g.Li + i] += b;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dw[g] (Cog x CKg, float32) = sum_n y[n, g] (Cog x Lo) . im2col(x[n, g])^T. Returns false
// when dw came out non-finite (the caller recomputes it exactly). The GEMMs compute the
// transpose, dw[g]^T (CKg x Cog) = im2col(x) . y^T (the GEMM measured about 1.4x faster with the
// long side in its rows: 576 x 406 x 64 against 64 x 406 x 576), into per-slot partials that
// the final sum transposes back.

template <class S>
bool weight_grad_reduced(const S* y, const S* x, float* dw, const Geom& g) {
  // Samples n = s, s + slots, ... go to slot s; each slot's partial dw^T is summed over its
  // samples in order, then the slots are added in order 0, 1, ...: a fixed order for a shape.
  const int64_t slots = std::min<int64_t>(g.N, kSplitTarget);
  const int64_t pieces = pieces_for(slots * g.G, g.Cog, kSplitTarget), bc = (g.Cog + pieces - 1) / pieces;
  const int64_t blocks = (g.Cog + bc - 1) / bc;
  const int64_t L = g.unit ? g.Lo : g.Lg;
  const int64_t lc = chunk_len(g.CKg + bc, L, sizeof(S));
  const int64_t wsize = g.Co * g.CKg;
  std::vector<float> partial(size_t(slots * wsize));  // slot s, group g: (CKg x Cog)
  const int64_t items = slots * g.G * blocks;
  const bool par = double(g.N) * g.Cog * g.CKg * L >= kParallelWork && items > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t s = item / (g.G * blocks), gi = (item / blocks) % g.G, co0 = (item % blocks) * bc;
    const int64_t nco = std::min(bc, g.Cog - co0);
    float* C = partial.data() + s * wsize + gi * g.CKg * g.Cog + co0;  // columns co0.. of (CKg x Cog)
    for (int64_t r = 0; r < g.CKg; ++r) std::fill(C + r * g.Cog, C + r * g.Cog + nco, 0.0f);
    Scratch<S, 0> box(g.unit ? 0 : box_stride(g));
    Scratch<S, 1> col(g.unit ? 0 : g.CKg * lc);
    Scratch<S, 2> ybuf(g.Wg == g.Wo ? 0 : nco * lc);
    for (int64_t nn = s; nn < g.N; nn += slots) {
      const int64_t ng = nn * g.G + gi;
      const S* xng = x + ng * g.Cig * g.Li;
      const S* yng = y + (ng * g.Cog + co0) * g.Lo;
      if (!g.unit) pad_image(xng, g.Cig, g.Di, g.Hi, g.Wi, g.box, box.data(), &g.box_rows);
      for (int64_t q0 = 0; q0 < L; q0 += lc) {
        const int64_t q1 = std::min(L, q0 + lc), n = q1 - q0;
        Cols c{xng + q0, g.Li};
        if (!g.unit) {
          im2col(box.data(), g.Cig, q0, q1, g, col.data());
          c = {col.data(), n};
        }
        const Cols yc = grid_rows(yng, nco, q0, q1, g, ybuf.data());
        gemm_batched_reduced<S>(static_cast<const S*>(c.p), {c.ld, 0, false}, static_cast<const S*>(yc.p),
                                {yc.ld, 0, true}, C, {g.Cog, 0, false}, 1, g.CKg, n, nco, true);
      }
    }
  }
  const bool par_sum = double(slots) * wsize >= kParallelWork;
#pragma omp parallel for schedule(static) if (par_sum)
  for (int64_t i = 0; i < wsize; ++i) {  // dw[gi, co, r] = sum over slots of partial[s, gi, r, co]
    const int64_t gi = i / (g.Cog * g.CKg), co = (i / g.CKg) % g.Cog, r = i % g.CKg;
    const int64_t at = gi * g.CKg * g.Cog + r * g.Cog + co;
    float acc = partial[size_t(at)];
    for (int64_t s = 1; s < slots; ++s) acc += partial[size_t(s * wsize + at)];
    dw[i] = acc;
  }
  return all_finite(dw, wsize);
}

// ---------------------------------------------------------------------------------------------
// The adjoint of a stride-1 convolution as a correlation: x[ci, i] = sum_{co, t} w[co, ci, t] *
// y[co, i + pad - t * dil] is y, padded by (k - 1) * dil - pad, correlated with the flipped,
// transposed kernel w'[ci, co, K - 1 - t] (per group). The GEMMs then sum over Cog * K (not Cog
// alone) and no float32 column matrix is scattered: im2col of y in S, as the forward. Returns
// false (nothing written) where this does not apply: a stride above 1, a padding above
// (k - 1) * dil (the correlation would crop), or non-finite weights (correlate's condition).

template <class S>
bool adjoint_as_correlation(const S* y, const S* w, const float* bias, float* x, const Geom& g) {
  if (g.sd != 1 || g.sh != 1 || g.sw != 1) return false;
  const int64_t k[3] = {g.kd, g.kh, g.kw}, dil[3] = {g.dd, g.dh, g.dw}, pad[3] = {g.pd, g.ph, g.pw};
  const int64_t img[3] = {g.Di, g.Hi, g.Wi}, col[3] = {g.Do, g.Ho, g.Wo};
  std::vector<int64_t> in(3), kernel(3), stride(3, 1), dilation(3), before(3), after(3);
  for (int d = 0; d < 3; ++d) {
    in[d] = col[d], kernel[d] = k[d], dilation[d] = dil[d];
    before[d] = (k[d] - 1) * dil[d] - pad[d];
    after[d] = img[d] - col[d] - before[d] + (k[d] - 1) * dil[d];  // so that the output is img[d]
    if (before[d] < 0 || after[d] < 0) return false;
  }
  if (!all_finite(w, g.Co * g.CKg)) return false;
  const ConvParams q = make_conv_params(3, g.N, g.Co, g.Ci, g.G, in, kernel, stride, dilation, before, after, false, {});
  const Geom f = make_geom(q);
  if (f.Di != g.Di || f.Do != g.Do || f.Hi != g.Hi || f.Ho != g.Ho || f.Wi != g.Wi || f.Wo != g.Wo) return false;
  // (the flipped geometry's image is g's columns and its columns g's image)
  std::vector<S> wf(size_t(g.Co * g.CKg));  // (Ci, Cog, K) per group
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t co = 0; co < g.Cog; ++co)
      for (int64_t ci = 0; ci < g.Cig; ++ci)
        for (int64_t t = 0; t < g.K; ++t)
          wf[size_t(((gi * g.Cig + ci) * g.Cog + co) * g.K + g.K - 1 - t)] =
              w[((gi * g.Cog + co) * g.Cig + ci) * g.K + t];
  correlate_reduced(y, wf.data(), bias, x, f);
  return true;
}

}  // namespace
}  // namespace conv_detail

using namespace conv_detail;

template <class S>
void convolution_forward_reduced(const S* input, const S* weight, const float* bias, float* output,
                                 const ConvParams& p) {
  const Geom g = make_geom(p);
  if (widen_to_float32<S>(g) || (!p.transposed && !all_finite(weight, conv_weight_numel(p)))) {
    const Widened x = widened(input, image_numel(p, true)), w = widened(weight, conv_weight_numel(p));
    TG_ISA_NS::convolution_forward<float>(x.get(), w.get(), bias, output, p);
  } else if (p.transposed) {  // columns = input, image = output
    if (!adjoint_as_correlation(input, weight, bias, output, g)) adjoint_reduced(input, weight, bias, output, g);
  } else {
    correlate_reduced(input, weight, bias, output, g);  // image = input, columns = output
  }
}

template <class S>
void convolution_backward_reduced(const S* grad_output, const S* input, const S* weight, float* grad_input,
                                  float* grad_weight, float* grad_bias, const ConvParams& p) {
  const Geom g = make_geom(p);
  if (grad_bias) bias_grad<S, float>(grad_output, grad_bias, p.N, p.C_out, p.out[0] * p.out[1] * p.out[2]);
  const int64_t wn = conv_weight_numel(p);
  const bool widen_all = widen_to_float32<S>(g);
  bool fallback_input = widen_all && grad_input, fallback_weight = widen_all && grad_weight;
  if (grad_input && !widen_all) {
    if (!p.transposed) {
      if (!adjoint_as_correlation(grad_output, weight, static_cast<const float*>(nullptr), grad_input, g))
        adjoint_reduced(grad_output, weight, static_cast<const float*>(nullptr), grad_input, g);
    } else if (all_finite(weight, wn)) {
      correlate_reduced(grad_output, weight, static_cast<const float*>(nullptr), grad_input, g);
    } else {
      fallback_input = true;
    }
  }
  if (grad_weight && !widen_all) {
    fallback_weight = !(p.transposed ? weight_grad_reduced(input, grad_output, grad_weight, g)
                                     : weight_grad_reduced(grad_output, input, grad_weight, g));
  }
  if (fallback_input || fallback_weight) {
    const Widened dy = widened(grad_output, image_numel(p, false));
    const Widened x = widened(fallback_weight ? input : nullptr, image_numel(p, true));
    const Widened w = widened(fallback_input ? weight : nullptr, wn);
    TG_ISA_NS::convolution_backward<float>(dy.get(), x.get(), w.get(), fallback_input ? grad_input : nullptr,
                                           fallback_weight ? grad_weight : nullptr, nullptr, p);
  }
}

template void convolution_forward_reduced<BFloat16>(const BFloat16*, const BFloat16*, const float*, float*,
                                                    const ConvParams&);
template void convolution_forward_reduced<Float16>(const Float16*, const Float16*, const float*, float*,
                                                   const ConvParams&);
template void convolution_backward_reduced<BFloat16>(const BFloat16*, const BFloat16*, const BFloat16*, float*,
                                                     float*, float*, const ConvParams&);
template void convolution_backward_reduced<Float16>(const Float16*, const Float16*, const Float16*, float*, float*,
                                                    float*, const ConvParams&);

}  // namespace tg::kernels::TG_ISA_NS
