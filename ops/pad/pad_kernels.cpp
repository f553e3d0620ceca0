// Padding kernels (reflect, replicate, circular); the shape legend and the index rules are in
// pad_kernels.h.
//
// The index map is separable (output (od, oh, ow) reads (map_d[od], map_h[oh], map_w[ow])), so
// the forward copies whole rows: the middle of each output row is a contiguous copy of the
// input row, only the few padded columns go through map_w. The backward is the adjoint as a
// gather: each input row owns its gradient and sums the output rows that read it.
//
// One copy of this file per instruction set (ops/internal/isa_dispatch.h; pad_dispatch.cpp holds
// the public entry points).
#include "pad_kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// Positive remainder: a mod m for m > 0.
int64_t pos_mod(int64_t a, int64_t m) {
  const int64_t r = a % m;
  return r < 0 ? r + m : r;
}

// The input index each output index of one dim reads (pad_kernels.h).
std::vector<int64_t> index_map(int64_t n, int64_t before, int64_t after, PadMode mode) {
  const int64_t n_out = n + before + after;
  std::vector<int64_t> map(static_cast<size_t>(std::max<int64_t>(n_out, 0)));
  const int64_t lo = std::max<int64_t>(-before, 0), kept = n - lo - std::max<int64_t>(-after, 0);
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t j = o - before;
    if (mode == PadMode::Reflect) {
      if (j < 0) j = -j;
      if (j >= n) j = 2 * (n - 1) - j;
    } else if (mode == PadMode::Replicate) {
      j = std::clamp<int64_t>(j, 0, n - 1);
    } else {  // Circular
      j = lo + pos_mod(o - std::max<int64_t>(before, 0), kept);
    }
    map[o] = j;
  }
  return map;
}

// For each input index, the output indices that read it, ascending (compressed rows).
struct InverseMap {
  std::vector<int64_t> start, out;
};

InverseMap invert(const std::vector<int64_t>& map, int64_t n) {
  InverseMap inv;
  inv.start.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t j : map) ++inv.start[j + 1];
  for (int64_t i = 0; i < n; ++i) inv.start[i + 1] += inv.start[i];
  inv.out.resize(map.size());
  std::vector<int64_t> next(inv.start.begin(), inv.start.end() - 1);
  for (size_t o = 0; o < map.size(); ++o) inv.out[next[map[o]]++] = static_cast<int64_t>(o);
  return inv;
}

// The output columns [mid_begin, mid_end) read the input row contiguously from mid_begin - before.
struct RowSplit {
  int64_t mid_begin, mid_end;
};

RowSplit row_split(const PadGeometry& g) {
  const int64_t Wo = g.out(2);
  const int64_t begin = std::min(std::max<int64_t>(g.before[2], 0), Wo);
  const int64_t kept = g.in[2] + std::min<int64_t>(g.before[2], 0) + std::min<int64_t>(g.after[2], 0);
  return {begin, std::min(begin + std::max<int64_t>(kept, 0), Wo)};
}

}  // namespace

template <class T>
void pad_forward(const T* x, T* y, const PadGeometry& g, PadMode mode) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  const int64_t Do = g.out(0), Ho = g.out(1), Wo = g.out(2);
  if (g.planes <= 0 || Do <= 0 || Ho <= 0 || Wo <= 0) return;
  const std::vector<int64_t> map_d = index_map(D, g.before[0], g.after[0], mode);
  const std::vector<int64_t> map_h = index_map(H, g.before[1], g.after[1], mode);
  const std::vector<int64_t> map_w = index_map(W, g.before[2], g.after[2], mode);
  const RowSplit s = row_split(g);
  const int64_t rows = g.planes * Do * Ho;
  const int64_t shift = s.mid_begin - g.before[2];  // input column of output column mid_begin
#pragma omp parallel for schedule(static) if (rows * Wo >= kParallelGrain && max_threads() > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = r / (Do * Ho), od = (r / Ho) % Do, oh = r % Ho;
    const T* src = x + ((p * D + map_d[od]) * H + map_h[oh]) * W;
    T* dst = y + r * Wo;
    for (int64_t ow = 0; ow < s.mid_begin; ++ow) dst[ow] = src[map_w[ow]];
    std::copy(src + shift, src + shift + (s.mid_end - s.mid_begin), dst + s.mid_begin);
    for (int64_t ow = s.mid_end; ow < Wo; ++ow) dst[ow] = src[map_w[ow]];
  }
}

template <class T>
void pad_backward(const T* grad_y, T* grad_x, const PadGeometry& g, PadMode mode) {
  using Acc = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, T, float>;
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  const int64_t Do = g.out(0), Ho = g.out(1), Wo = g.out(2);
  const int64_t rows = g.planes * D * H;
  if (rows <= 0 || W <= 0) return;
  const std::vector<int64_t> map_w = index_map(W, g.before[2], g.after[2], mode);
  const InverseMap inv_d = invert(index_map(D, g.before[0], g.after[0], mode), D);
  const InverseMap inv_h = invert(index_map(H, g.before[1], g.after[1], mode), H);
  const RowSplit s = row_split(g);
  const int64_t shift = s.mid_begin - g.before[2];
  const int64_t mid = s.mid_end - s.mid_begin;
#pragma omp parallel if (rows * W >= kParallelGrain && max_threads() > 1)
  {
    std::vector<Acc> acc(static_cast<size_t>(W));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = r / (D * H), id = (r / H) % D, ih = r % H;
      std::fill(acc.begin(), acc.end(), Acc(0));
      Acc* a = acc.data();
      for (int64_t kd = inv_d.start[id]; kd < inv_d.start[id + 1]; ++kd) {
        for (int64_t kh = inv_h.start[ih]; kh < inv_h.start[ih + 1]; ++kh) {
          const T* gy = grad_y + ((p * Do + inv_d.out[kd]) * Ho + inv_h.out[kh]) * Wo;
          for (int64_t ow = 0; ow < s.mid_begin; ++ow) a[map_w[ow]] += static_cast<Acc>(gy[ow]);
          const T* gm = gy + s.mid_begin;
          Acc* am = a + shift;
          for (int64_t k = 0; k < mid; ++k) am[k] += static_cast<Acc>(gm[k]);
          for (int64_t ow = s.mid_end; ow < Wo; ++ow) a[map_w[ow]] += static_cast<Acc>(gy[ow]);
        }
      }
      T* gx = grad_x + r * W;
      for (int64_t iw = 0; iw < W; ++iw) gx[iw] = static_cast<T>(a[iw]);
    }
  }
}

TG_PAD_INSTANTIATE_ALL

}  // namespace tg::kernels::TG_ISA_NS
