// Multi-scale deformable attention kernels. Shapes and semantics: see ms_deform_attn_kernels.h.
//
// Legend: N = batch, K = keys, M = heads, C = channels per head, L = levels, Q = queries,
// P = points. A "slice" is one (n, m) pair: the C-channel rows value[n, :, m, :] that one head of
// one image reads, consecutive keys M*C elements apart. A sample is one (n, q, m, l, p).
//
// The maths, for one sample with attention weight a at pixel coordinates (x, y) of level l:
//   x0 = floor(x), y0 = floor(y), fx = x - x0, fy = y - y0
//   corners  nw = (x0, y0)  ne = (x0+1, y0)  sw = (x0, y0+1)  se = (x0+1, y0+1)
//   weights  w_nw = (1-fy)(1-fx)  w_ne = (1-fy)fx  w_sw = fy(1-fx)  w_se = fy fx
//   forward      out[c]       += a * sum_k w_k v_k[c]                (v_k = 0 outside the map)
//   backward     grad_v_k[c]  += a * w_k * g[c]                      (corners inside the map)
//                d_k           = sum_c g[c] v_k[c]
//                grad_a        = sum_k w_k d_k
//                grad_x        = a * ((d_ne - d_nw)(1-fy) + (d_se - d_sw) fy) * W
//                grad_y        = a * ((d_sw - d_nw)(1-fx) + (d_se - d_ne) fx) * H
// (the factors W and H: x = loc_x * W - 0.5). The time goes into the loops over C, which are
// contiguous; corners outside the map read a row of zeros and write into a scratch row, so
// those loops have no branches, and PyTorch's zero padding (the outside value 0 is still
// multiplied by its weight, so NaN weights give NaN) falls out for free.
//
// Work split: the slice is the unit of ownership. The backward hands out whole slices, so each
// grad_value row has one writer (no atomics) and receives its contributions in query order;
// only with few slices (under 8) is a slice cut into chunks of queries, the cut chosen from
// the shapes alone, each chunk summed into its own buffer and the buffers added in chunk
// order, so that the bits never depend on the thread count. The forward hands out slices, or
// blocks of a slice's queries (each output row is one task's). Per query: the footprints of
// its L*P samples (one vectorised loop), then the loops over channels. Walking slice by slice,
// a thread touches one head's rows; when a slice is sampled often, they are first copied into
// a contiguous aligned buffer (see worth_copying) so that they use the whole cache. A slice's
// per-query inputs are M queries apart in memory, too far for the hardware prefetcher, so they
// are prefetched a few queries ahead.
//
// One copy of this file (and of ms_deform_attn_kernels_double_backward.cpp) per instruction set
// (ops/internal/isa_dispatch.h); ms_deform_attn_dispatch.cpp holds the public entry points.
//
// 16-bit storage S (BFloat16, Float16; forward and first-order backward): everything below runs
// in T = opmath_t<S> = float. The per-query inputs (locations, attention weights, grad_output)
// are widened as they are read; value's rows are widened into the slice's per-thread copy, or,
// when the slices are not copied, into one float32 copy of value up front. grad_value is summed
// in float32 (the slice's copy, the chunk buffers, or a float32 grad_value when chunks or
// uncopied slices need one) and rounded once at the end; every other output is rounded as it
// is stored.
#include "ms_deform_attn_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../framework/half.h"
#include "../../framework/parallel.h"
#include "../internal/half_access.h"
#include "../internal/isa_dispatch.h"
#include "../internal/simd_width.h"

// The SIMD helpers below pass vectors by value between inline functions of this file only; GCC's
// note that such an ABI depends on -mavx is irrelevant here.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tg::kernels::TG_ISA_NS {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;
// How many queries ahead (of the same slice) the per-query inputs are prefetched.
constexpr int64_t kPrefetchQueries = 2;
// Queries per forward task (one slice's consecutive queries).
constexpr int64_t kQueryBlock = 64;

// One SIMD register of T as a GCC/Clang vector extension, as wide as the target's registers
// (wider types are split by the compiler, badly: scalars go through the stack). Plain loops are
// not enough here: the channel dots are reductions, which the compiler may not reorder into
// vector lanes by itself. kSimdBytes (ops/internal/simd_width.h) follows each copy's target:
// 64 bytes in the AVX-512 copy, 32 in the AVX2 one, 16 in the generic one, so the channel dots
// are summed in a different order on each path (tests/test_isa_families.cpp states the bound).
template <class T>
struct Simd {
  typedef T Vec __attribute__((vector_size(kSimdBytes)));
  static constexpr int64_t kLanes = kSimdBytes / sizeof(T);
  static Vec load(const T* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }
};

// Lane sums of four vectors at once: d[k] = sum of the lanes of a_k. Summing each vector on its
// own costs log2(lanes) shuffle+add pairs apiece; here the four are interleaved while halving,
// so every shuffle works for all four. A fixed order, so the result does not vary between runs.
//   pair step:  two vectors of n lanes, each holding groups of g lanes, become one vector of
//               groups of g/2 (each group's halves added): [a0 | a1], [a2 | a3] -> [a0|a1|a2|a3]
//   halve step: one vector of groups of g becomes half as many lanes, groups of g/2
constexpr int pair_lane(int j, int n, int g, bool upper) {
  const int half = n / 2, src = j < half ? 0 : n, k = (j % half) / (g / 2), o = j % (g / 2);
  return src + k * g + o + (upper ? g / 2 : 0);
}
constexpr int halve_lane(int j, int g, bool upper) {
  return (j / (g / 2)) * g + j % (g / 2) + (upper ? g / 2 : 0);
}
template <int n, int g, class V, int... J>
inline V pair_step(const V& a, const V& b, std::integer_sequence<int, J...>) {
  return __builtin_shufflevector(a, b, pair_lane(J, n, g, false)...) +
         __builtin_shufflevector(a, b, pair_lane(J, n, g, true)...);
}
template <int g, class V, int... J>
inline auto halve_step(const V& a, std::integer_sequence<int, J...>) {
  return __builtin_shufflevector(a, a, halve_lane(J, g, false)...) +
         __builtin_shufflevector(a, a, halve_lane(J, g, true)...);
}
template <int g, class V>
inline auto halve_to_one(const V& v) {
  constexpr int n = sizeof(V) / sizeof(v[0]);
  if constexpr (g == 1)
    return v;
  else
    return halve_to_one<g / 2>(halve_step<g>(v, std::make_integer_sequence<int, n / 2>{}));
}
template <class T>
inline void lane_sums4(const typename Simd<T>::Vec& a0, const typename Simd<T>::Vec& a1,
                       const typename Simd<T>::Vec& a2, const typename Simd<T>::Vec& a3, T* d) {
  constexpr int n = static_cast<int>(Simd<T>::kLanes);
  const auto lanes = std::make_integer_sequence<int, n>{};
  const auto a01 = pair_step<n, n>(a0, a1, lanes), a23 = pair_step<n, n>(a2, a3, lanes);
  if constexpr (n == 2) {  // two doubles: a01 = [d0, d1], a23 = [d2, d3] already
    std::memcpy(d, &a01, 2 * sizeof(T));
    std::memcpy(d + 2, &a23, 2 * sizeof(T));
  } else {
    const auto sums = halve_to_one<n / 4>(pair_step<n, n / 2>(a01, a23, lanes));
    std::memcpy(d, &sums, 4 * sizeof(T));
  }
}

inline void prefetch_range(const void* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b);
}

// The inputs as given, in their storage type S (float, double, BFloat16 or Float16).
template <class S>
struct Problem {
  const S* value;
  const int64_t* spatial_shapes;
  const int64_t* level_start_index;
  const S* sampling_locations;
  const S* attention_weights;
  int64_t N, K, M, C, L, Q, P;
};

// Where one slice's rows are: key k of the slice at value + k * value_stride, its gradient at
// grad + k * grad_stride (grad null when grad_value is not asked for).
template <class T>
struct Slice {
  int64_t n, m;
  const T* value;
  int64_t value_stride;
  T* grad;
  int64_t grad_stride;
};

// In value, a slice's rows are M*C elements apart: the other heads' channels sit in between, so
// one head's rows use only 1/M of the cache sets (for M = 8, C = 32 floats: 8 of the 64 L1
// sets, 1/8 of L2). When a slice is sampled often enough, its rows are first copied into a
// contiguous per-thread buffer (and its gradient accumulated in one, then copied out), which
// gives it the whole cache: for the Deformable-DETR encoder a slice (5440 x 32 floats, 700 KB)
// then fits in L2. "Often enough": at least kCopyReads corner reads per key.
constexpr int64_t kCopyReads = 2;
inline bool worth_copying(int64_t M, int64_t K, int64_t queries, int64_t samples) {
  return M > 1 && queries * samples * 4 >= kCopyReads * K;
}

// Copies a slice's K rows (C each, stride apart) to or from a contiguous buffer of the
// arithmetic type T: 16-bit rows (S) are widened on the way in and rounded on the way out.
template <class S, class T>
void gather_rows(const S* src, int64_t stride, int64_t K, int64_t C, T* dst) {
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (std::is_same_v<S, T>)
      std::memcpy(dst + k * C, src + k * stride, C * sizeof(T));
    else
      load_row(src + k * stride, C, dst + k * C);
  }
}
template <class T, class S>
void scatter_rows(const T* src, int64_t K, int64_t C, S* dst, int64_t stride) {
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (std::is_same_v<S, T>)
      std::memcpy(dst + k * stride, src + k * C, C * sizeof(T));
    else
      store_row(src + k * C, C, dst + k * stride);
  }
}

// n elements of S widened to T (to = from when S is T: not called then), or T rounded to S;
// in parallel, in blocks (each element has one writer, so any split gives the same bits).
template <class S, class T>
void widen_all(const S* from, int64_t n, T* to) {
  constexpr int64_t kBlockElems = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= 4 * kBlockElems)
  for (int64_t b = 0; b < ceil_div(n, kBlockElems); ++b)
    load_row(from + b * kBlockElems, std::min(kBlockElems, n - b * kBlockElems), to + b * kBlockElems);
}
template <class T, class S>
void round_all(const T* from, int64_t n, S* to) {
  constexpr int64_t kBlockElems = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= 4 * kBlockElems)
  for (int64_t b = 0; b < ceil_div(n, kBlockElems); ++b)
    store_row(from + b * kBlockElems, std::min(kBlockElems, n - b * kBlockElems), to + b * kBlockElems);
}

// Where the L*P sampling points of one query land, one entry per (level, point) i; corner
// arrays are corner-major ([k * LP + i], corners k = nw, ne, sw, se).
template <class T>
struct Footprints {
  std::vector<T> fx, fy;       // distances to the west / north corners (PyTorch's "w", "n")
  std::vector<T> w;            // bilinear weights
  std::vector<const T*> rows;  // value rows of the corners (or the zero row)
  std::vector<T*> grad_rows;   // gradient rows of the corners (or the sink rows)
  std::vector<T> aw;           // attention weight times bilinear weight
  std::vector<T> a;            // the attention weights (widened when stored in 16 bits)
  std::vector<int32_t> x0, y0;  // the north-west corner
  explicit Footprints(int64_t LP)
      : fx(static_cast<size_t>(LP)), fy(static_cast<size_t>(LP)), w(static_cast<size_t>(4 * LP)),
        rows(static_cast<size_t>(4 * LP)), grad_rows(static_cast<size_t>(4 * LP)),
        aw(static_cast<size_t>(4 * LP)), a(static_cast<size_t>(LP)), x0(static_cast<size_t>(LP)),
        y0(static_cast<size_t>(LP)) {}
};

// A zeroed buffer whose data starts on a 64-byte boundary, so that rows of a multiple of 64
// bytes (C = 32 floats, say) never straddle cache lines: a 64-byte access that does costs two.
template <class T>
struct AlignedBuffer {
  std::vector<T> storage;
  T* data = nullptr;
  void resize(int64_t n) {
    storage.assign(static_cast<size_t>(n) + 64 / sizeof(T), T(0));
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    data = storage.data() + ((64 - address % 64) % 64) / sizeof(T);
  }
};

// Per-thread scratch.
template <class T>
struct Scratch {
  int64_t LP;
  int64_t C;
  AlignedBuffer<T> zeros;  // C zeros: what a corner outside the map reads
  AlignedBuffer<T> sinks;  // 4 x C: where a corner outside the map's gradient goes
  // Constant over the call, per sample i = (level, point): its level's size and first key.
  std::vector<int64_t> level_W, level_H, level_start;
  std::vector<T> half_W, half_H;    // W / 2, H / 2
  std::vector<T> clamp_W, clamp_H;  // min(W, 2^30), min(H, 2^30)
  // Two queries' footprints: the next query's are computed before the current one is summed,
  // so that its row pointers, written as vectors, have left the store buffer when read one by
  // one, and its rows are being fetched meanwhile.
  Footprints<T> fp[2];
  std::vector<T> dots;  // d_k = sum_c g[c] v_k[c], 4 per sample (sample-major)
  std::vector<T> row;   // C: a 16-bit query's output before rounding
  AlignedBuffer<T> g_wide[2];  // C: a 16-bit query's grad_output widened, for two queries
  int64_t g_id[2] = {-1, -1};  // which (n, q, m) each holds
  // 2 * LP, LP: the locations and weights of a 16-bit query widened, for two queries (the next
  // one is widened one query ahead, see prepare_query), and which (n, q, m) each holds.
  AlignedBuffer<T> loc_wide[2], attn_wide[2];
  int64_t wide_id[2] = {-1, -1};
  // Contiguous copies of one slice's value rows and grad_value rows (see Slice), K x C each.
  AlignedBuffer<T> value_copy, grad_copy;

  Scratch(const int64_t* spatial_shapes, const int64_t* level_start_index, int64_t L, int64_t P,
          int64_t channels)
      : LP(L * P), C(channels), fp{Footprints<T>(L * P), Footprints<T>(L * P)},
        dots(static_cast<size_t>(4 * L * P)), row(static_cast<size_t>(channels)) {
    for (int b = 0; b < 2; ++b) {
      g_wide[b].resize(C);
      loc_wide[b].resize(2 * LP);
      attn_wide[b].resize(LP);
    }
    zeros.resize(C);
    sinks.resize(4 * C);
    for (auto* v : {&level_W, &level_H, &level_start}) v->resize(static_cast<size_t>(LP));
    for (auto* v : {&half_W, &half_H, &clamp_W, &clamp_H}) v->resize(static_cast<size_t>(LP));
    for (int64_t i = 0; i < LP; ++i) {
      const int64_t l = i / P;
      level_H[i] = spatial_shapes[2 * l];
      level_W[i] = spatial_shapes[2 * l + 1];
      level_start[i] = level_start_index[l];
      half_H[i] = static_cast<T>(level_H[i]) / 2;
      half_W[i] = static_cast<T>(level_W[i]) / 2;
      clamp_H[i] = static_cast<T>(std::min<int64_t>(level_H[i], int64_t(1) << 30));
      clamp_W[i] = static_cast<T>(std::min<int64_t>(level_W[i], int64_t(1) << 30));
    }
  }
};

// Where the L*P sampling points of one query land: bilinear weights and the four corner rows of
// each, as pointers into value (rows row_stride apart from v_slice) and, if kGrad, into
// grad_value (grad_stride apart) together with the scatter weights a * w_k. One branch-free
// loop, vectorised across the samples (written so that GCC 12 does; check with -fopt-info-vec).
template <class S, bool kGrad, class T = opmath_t<S>>
void query_footprints(const S* __restrict loc, const S* __restrict attn, const T* v_slice,
                      int64_t row_stride, T* grad_slice, int64_t grad_stride, Scratch<T>& sc,
                      Footprints<T>& f) {
  const int64_t LP = sc.LP;
  const int64_t *__restrict Wi = sc.level_W.data(), *__restrict Hi = sc.level_H.data();
  const int64_t* __restrict start = sc.level_start.data();
  const T *__restrict half_W = sc.half_W.data(), *__restrict half_H = sc.half_H.data();
  const T *__restrict clamp_W = sc.clamp_W.data(), *__restrict clamp_H = sc.clamp_H.data();
  T *__restrict fx = f.fx.data(), *__restrict fy = f.fy.data(), *__restrict w = f.w.data();
  T* __restrict aw = f.aw.data();
  T* __restrict a = f.a.data();
  int32_t *__restrict x0s = f.x0.data(), *__restrict y0s = f.y0.data();
  const T** __restrict rows = f.rows.data();
  T** __restrict grad_rows = f.grad_rows.data();
  const T* zeros = sc.zeros.data;
  T* sinks = sc.sinks.data;
  const int64_t C = sc.C;
#pragma omp simd
  for (int64_t i = 0; i < LP; ++i) {
    // The arithmetic of F.grid_sample(align_corners=False) on grid = 2*loc - 1, rather than the
    // shorter loc*W - 0.5, so that a point on a pixel border picks the same corners as PyTorch.
    const T x = (2 * load_op(loc, 2 * i) - 1 + 1) * half_W[i] - T(0.5);
    const T y = (2 * load_op(loc, 2 * i + 1) - 1 + 1) * half_H[i] - T(0.5);
    const T ai = load_op(attn, i);
    a[i] = ai;
    // Outside [-2, W] no corner is inside the map, so the coordinate is clamped there (NaN to -2)
    // before the integer conversion, which is then always defined; floor comes from truncation.
    // (std::floor would not vectorise; 32-bit conversions vectorise on every x86 level. Levels
    // wider or higher than 2^30 pixels are clamped at 2^30.)
    const T Wf = clamp_W[i], Hf = clamp_H[i];
    const T x_lo = x >= -2 ? x : T(-2), y_lo = y >= -2 ? y : T(-2);
    const T xc = x_lo <= Wf ? x_lo : Wf, yc = y_lo <= Hf ? y_lo : Hf;
    const int32_t xt = static_cast<int32_t>(xc), yt = static_cast<int32_t>(yc);
    const int32_t x0i = xt - (xc < static_cast<T>(xt)), y0i = yt - (yc < static_cast<T>(yt));
    const T x0 = static_cast<T>(x0i), y0 = static_cast<T>(y0i);
    // Distances to the west and north corners. For a NaN or infinite coordinate PyTorch computes
    // x - floor(x) = NaN; adding x - x (0, or NaN) reproduces that. Its weights are then NaN too.
    const T e = (xc - x0) + (x - x), n = (yc - y0) + (y - y);
    fx[i] = e;
    fy[i] = n;
    w[0 * LP + i] = (1 - n) * (1 - e);
    w[1 * LP + i] = (1 - n) * e;
    w[2 * LP + i] = n * (1 - e);
    w[3 * LP + i] = n * e;
    x0s[i] = x0i;
    y0s[i] = y0i;
    if (kGrad)
      for (int k = 0; k < 4; ++k) aw[k * LP + i] = ai * w[k * LP + i];
  }
  // The corner rows, from the integer corner coordinates. A second loop: with 64-bit pointer
  // arithmetic it vectorises only on AVX2 and better, the loop above everywhere.
#pragma omp simd
  for (int64_t i = 0; i < LP; ++i) {
    const int64_t xi = x0s[i], yi = y0s[i];
    // (& rather than && keeps the loop free of branches.)
    const bool west_in = (xi >= 0) & (xi < Wi[i]), east_in = (xi >= -1) & (xi < Wi[i] - 1);
    const bool north_in = (yi >= 0) & (yi < Hi[i]), south_in = (yi >= -1) & (yi < Hi[i] - 1);
    const int64_t nw = start[i] + yi * Wi[i] + xi, ne = nw + 1, sw = nw + Wi[i], se = sw + 1;
    rows[0 * LP + i] = (north_in & west_in) ? v_slice + nw * row_stride : zeros;
    rows[1 * LP + i] = (north_in & east_in) ? v_slice + ne * row_stride : zeros;
    rows[2 * LP + i] = (south_in & west_in) ? v_slice + sw * row_stride : zeros;
    rows[3 * LP + i] = (south_in & east_in) ? v_slice + se * row_stride : zeros;
    if (kGrad) {
      grad_rows[0 * LP + i] = (north_in & west_in) ? grad_slice + nw * grad_stride : sinks;
      grad_rows[1 * LP + i] = (north_in & east_in) ? grad_slice + ne * grad_stride : sinks + C;
      grad_rows[2 * LP + i] = (south_in & west_in) ? grad_slice + sw * grad_stride : sinks + 2 * C;
      grad_rows[3 * LP + i] = (south_in & east_in) ? grad_slice + se * grad_stride : sinks + 3 * C;
    }
  }
}

// The footprints of query q of a slice into sc.fp[q % 2], and prefetches of the inputs of a
// query further on (a slice's queries are M apart in the inputs, too far for the hardware).
template <class S, bool kGrad, class T = opmath_t<S>>
void prepare_query(const Problem<S>& pb, const S* grad_output, const Slice<T>& sl, int64_t q,
                   int64_t q1, Scratch<T>& sc) {
  const int64_t LP = pb.L * pb.P, nqm = (sl.n * pb.Q + q) * pb.M + sl.m;
  const S* loc = pb.sampling_locations + nqm * LP * 2;
  const S* attn = pb.attention_weights + nqm * LP;
  if (q + kPrefetchQueries < q1) {
    const int64_t ahead = kPrefetchQueries * pb.M;
    prefetch_range(loc + ahead * LP * 2, LP * 2 * sizeof(S));
    prefetch_range(attn + ahead * LP, LP * sizeof(S));
    if (grad_output) prefetch_range(grad_output + (nqm + ahead) * pb.C, pb.C * sizeof(S));
  }
  if constexpr (!std::is_same_v<S, T>) {
    // Widened in loops of their own, so that the footprint loop is the float kernel's (read as 16
    // bits inside it, its vectorisation changed and the forward took 1.5x float32's time), and
    // one query ahead: read right after they were written, the footprint loop's loads waited for
    // the widening stores (3x the footprint time).
    auto widen = [&](int64_t qq) {
      const int64_t id = (sl.n * pb.Q + qq) * pb.M + sl.m, b = qq % 2;
      if (sc.wide_id[b] == id) return;
      load_row(pb.sampling_locations + id * LP * 2, 2 * LP, sc.loc_wide[b].data);
      load_row(pb.attention_weights + id * LP, LP, sc.attn_wide[b].data);
      sc.wide_id[b] = id;
    };
    widen(q);
    if (q + 1 < q1) widen(q + 1);
    query_footprints<T, kGrad>(sc.loc_wide[q % 2].data, sc.attn_wide[q % 2].data, sl.value, sl.value_stride, sl.grad,
                               sl.grad_stride, sc, sc.fp[q % 2]);
    return;
  }
  query_footprints<S, kGrad>(loc, attn, sl.value, sl.value_stride, sl.grad, sl.grad_stride, sc,
                             sc.fp[q % 2]);
}

// Output channels [c, c + kVectors * kLanes) of one query, accumulated in kVectors registers in
// one pass over its samples (so each sample's pointers and weights are read once per pass).
// a multiplies the interpolated value, as in PyTorch, so an infinite weight gives +-Inf rather
// than Inf - Inf between corners.
template <class T, int kVectors>
inline void sum_samples(const Footprints<T>& f, const T* a, int64_t LP, int64_t c, T* out) {
  using S = Simd<T>;
  typename S::Vec acc[kVectors] = {};
  const T* const* r = f.rows.data();
  const T* w = f.w.data();
  for (int64_t i = 0; i < LP; ++i) {
    const T *p0 = r[i] + c, *p1 = r[LP + i] + c, *p2 = r[2 * LP + i] + c, *p3 = r[3 * LP + i] + c;
    const T w0 = w[i], w1 = w[LP + i], w2 = w[2 * LP + i], w3 = w[3 * LP + i];
    for (int v = 0; v < kVectors; ++v) {
      const int64_t o = v * S::kLanes;
      acc[v] += a[i] * (w0 * S::load(p0 + o) + w1 * S::load(p1 + o) + w2 * S::load(p2 + o) +
                        w3 * S::load(p3 + o));
    }
  }
  for (int v = 0; v < kVectors; ++v) S::store(out + c + v * S::kLanes, acc[v]);
}

// Forward for queries [q0, q1) of a slice: per query, the footprints of its L*P samples, then
// its output, up to four vectors of channels per pass over the samples.
template <class S, class T = opmath_t<S>>
void forward_queries(const Problem<S>& pb, S* output, const Slice<T>& sl, int64_t q0,
                     int64_t q1, Scratch<T>& sc) {
  constexpr int64_t V = Simd<T>::kLanes;
  constexpr bool kNative = std::is_same_v<S, T>;
  const int64_t C = pb.C, LP = pb.L * pb.P;
  if (q0 < q1) prepare_query<S, false>(pb, nullptr, sl, q0, q1, sc);
  for (int64_t q = q0; q < q1; ++q) {
    if (q + 1 < q1) prepare_query<S, false>(pb, nullptr, sl, q + 1, q1, sc);
    const Footprints<T>& f = sc.fp[q % 2];
    const int64_t nqm = (sl.n * pb.Q + q) * pb.M + sl.m;
    const T* a = f.a.data();
    // A 16-bit query's output is summed into a float row, then rounded once.
    T* out;
    if constexpr (kNative) out = output + nqm * C; else out = sc.row.data();
    int64_t c = 0;
    for (; c + 4 * V <= C; c += 4 * V) sum_samples<T, 4>(f, a, LP, c, out);
    if (c + 2 * V <= C) {
      sum_samples<T, 2>(f, a, LP, c, out);
      c += 2 * V;
    }
    if (c + V <= C) {
      sum_samples<T, 1>(f, a, LP, c, out);
      c += V;
    }
    const T* const* r = f.rows.data();
    const T* w = f.w.data();
    for (; c < C; ++c) {
      T acc = 0;
      for (int64_t i = 0; i < LP; ++i)
        acc += a[i] * (w[i] * r[i][c] + w[LP + i] * r[LP + i][c] +
                       w[2 * LP + i] * r[2 * LP + i][c] + w[3 * LP + i] * r[3 * LP + i][c]);
      out[c] = acc;
    }
    if constexpr (!kNative) store_row(out, C, output + nqm * C);
  }
}

// Backward for queries [q0, q1) of a slice. kGradValue: scatter into the slice's gradient rows.
// kDots: the channel dots d_k, needed by the gradients of the locations and attention weights.
template <class TS, bool kGradValue, bool kDots, int kVectors, class T = opmath_t<TS>>
void backward_queries(const Problem<TS>& pb, const TS* grad_output, const Slice<T>& sl,
                      TS* grad_loc, TS* grad_attn, int64_t q0, int64_t q1, Scratch<T>& sc) {
  using S = Simd<T>;
  using Vec = typename S::Vec;
  const int64_t C = pb.C, LP = pb.L * pb.P;
  // Channels covered by whole vectors; a compile-time constant when C is kVectors vectors, so
  // that the channel loop unrolls.
  const int64_t whole = kVectors > 0 ? kVectors * S::kLanes : C / S::kLanes * S::kLanes;
  if (q0 < q1) prepare_query<TS, kGradValue>(pb, grad_output, sl, q0, q1, sc);
  for (int64_t q = q0; q < q1; ++q) {
    if (q + 1 < q1) prepare_query<TS, kGradValue>(pb, grad_output, sl, q + 1, q1, sc);
    const Footprints<T>& f = sc.fp[q % 2];
    const int64_t nqm = (sl.n * pb.Q + q) * pb.M + sl.m;
    const T* attn = f.a.data();
    const T* g;  // a 16-bit query's grad_output is widened once, one query ahead (as in prepare_query)
    if constexpr (std::is_same_v<TS, T>) {
      g = grad_output + nqm * C;
    } else {
      auto widen = [&](int64_t qq) {
        const int64_t id = (sl.n * pb.Q + qq) * pb.M + sl.m, b = qq % 2;
        if (sc.g_id[b] == id) return;
        load_row(grad_output + id * C, C, sc.g_wide[b].data);
        sc.g_id[b] = id;
      };
      widen(q);
      if (q + 1 < q1) widen(q + 1);
      g = sc.g_wide[q % 2].data;
    }
    const T* const* rows = f.rows.data();
    T* const* grad_rows = f.grad_rows.data();
    const T* aw = f.aw.data();
    T* dots = sc.dots.data();
    for (int64_t i = 0; i < LP; ++i) {
      const T *v0 = rows[i], *v1 = rows[LP + i], *v2 = rows[2 * LP + i], *v3 = rows[3 * LP + i];
      T *gv0 = grad_rows[i], *gv1 = grad_rows[LP + i], *gv2 = grad_rows[2 * LP + i],
        *gv3 = grad_rows[3 * LP + i];
      const T aw0 = aw[i], aw1 = aw[LP + i], aw2 = aw[2 * LP + i], aw3 = aw[3 * LP + i];
      // Lane j of acc_k sums the products of channels j, j + kLanes, ...
      Vec acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
      int64_t c = 0;
      for (; c < whole; c += S::kLanes) {
        const Vec gc = S::load(g + c);
        if (kDots) {
          acc0 += gc * S::load(v0 + c);
          acc1 += gc * S::load(v1 + c);
          acc2 += gc * S::load(v2 + c);
          acc3 += gc * S::load(v3 + c);
        }
        if (kGradValue) {
          S::store(gv0 + c, S::load(gv0 + c) + aw0 * gc);
          S::store(gv1 + c, S::load(gv1 + c) + aw1 * gc);
          S::store(gv2 + c, S::load(gv2 + c) + aw2 * gc);
          S::store(gv3 + c, S::load(gv3 + c) + aw3 * gc);
        }
      }
      T* d = dots + 4 * i;
      if (kDots) lane_sums4<T>(acc0, acc1, acc2, acc3, d);
      for (; c < C; ++c) {
        const T gc = g[c];
        if (kDots) {
          d[0] += gc * v0[c];
          d[1] += gc * v1[c];
          d[2] += gc * v2[c];
          d[3] += gc * v3[c];
        }
        if (kGradValue) {
          gv0[c] += aw0 * gc;
          gv1[c] += aw1 * gc;
          gv2[c] += aw2 * gc;
          gv3[c] += aw3 * gc;
        }
      }
    }
    if (!kDots) continue;
    // The gradients of the attention weights and the locations, from the dots of all samples.
    const T *w0 = f.w.data(), *w1 = w0 + LP, *w2 = w1 + LP, *w3 = w2 + LP;
    const T *fx = f.fx.data(), *fy = f.fy.data();
    if (grad_attn) {
      TS* ga = grad_attn + nqm * LP;
#pragma omp simd
      for (int64_t i = 0; i < LP; ++i) {
        const T* d = dots + 4 * i;
        store_op(ga, i, w0[i] * d[0] + w1[i] * d[1] + w2[i] * d[2] + w3[i] * d[3]);
      }
    }
    if (grad_loc) {
      TS* gl = grad_loc + nqm * LP * 2;
      const T *half_W = sc.half_W.data(), *half_H = sc.half_H.data();
#pragma omp simd
      for (int64_t i = 0; i < LP; ++i) {
        const T* d = dots + 4 * i;
        const T a = attn[i], e = 1 - fx[i], s = 1 - fy[i];
        store_op(gl, 2 * i, a * ((d[1] - d[0]) * s + (d[3] - d[2]) * fy[i]) * (2 * half_W[i]));
        store_op(gl, 2 * i + 1, a * ((d[2] - d[0]) * e + (d[3] - d[1]) * fx[i]) * (2 * half_H[i]));
      }
      for (int64_t i = 0; i < LP; ++i) {
        if (std::isfinite(attn[i])) continue;
        // PyTorch multiplies a into every channel's term before summing; with an infinite a
        // that order decides between +-Inf and NaN, so follow it here (rare, scalar).
        const T *v0 = rows[i], *v1 = rows[LP + i], *v2 = rows[2 * LP + i], *v3 = rows[3 * LP + i];
        const T a = attn[i], e = 1 - fx[i], s = 1 - fy[i];
        T gx = 0, gy = 0;
        for (int64_t c = 0; c < C; ++c) {
          const T ga = g[c] * a;
          gx += ((v1[c] - v0[c]) * s + (v3[c] - v2[c]) * fy[i]) * ga;
          gy += ((v2[c] - v0[c]) * e + (v3[c] - v1[c]) * fx[i]) * ga;
        }
        store_op(gl, 2 * i, gx * (2 * half_W[i]));
        store_op(gl, 2 * i + 1, gy * (2 * half_H[i]));
      }
    }
  }
}

template <class S, class T = opmath_t<S>>
using BackwardFn = void (*)(const Problem<S>&, const S*, const Slice<T>&, S*, S*, int64_t,
                            int64_t, Scratch<T>&);

}  // namespace

template <class S>
void ms_deform_attn_forward(const S* value, const int64_t* spatial_shapes,
                            const int64_t* level_start_index, const S* sampling_locations,
                            const S* attention_weights, S* output, int64_t bs, int64_t num_keys,
                            int64_t heads, int64_t channels, int64_t levels, int64_t queries,
                            int64_t points) {
  using T = opmath_t<S>;  // the arithmetic type: float for the 16-bit types
  const Problem<S> pb{value,    spatial_shapes, level_start_index, sampling_locations,
                      attention_weights, bs, num_keys, heads, channels, levels, queries, points};
  const int64_t slices = bs * heads, K = num_keys, C = channels, row_stride = heads * C;
  const int64_t work = slices * queries * levels * points * (channels + 8);
  const int max_threads = work > kParallelWork ? omp_get_max_threads() : 1;
  // Tasks of consecutive queries of one slice, handed out dynamically: whole slices when they
  // spread evenly enough over the threads (so that a slice is copied once, see worth_copying),
  // else kQueryBlock queries. Every output row belongs to one task, so the result is the same
  // for any assignment, and a thread that is held up (another process on its core) does not
  // hold up the others.
  const bool whole = slices % max_threads == 0 || slices >= 4 * max_threads;
  const int64_t block = whole ? queries : kQueryBlock;
  const int64_t blocks = block > 0 ? (queries + block - 1) / block : 0, tasks = slices * blocks;
  const bool copy = whole && worth_copying(heads, K, queries, levels * points);
  // The value rows the loops read, in T: a 16-bit value is widened per slice when copied, else
  // all at once here.
  std::vector<T> wide;
  const T* value_t = nullptr;
  if constexpr (std::is_same_v<S, T>) {
    value_t = value;
  } else if (!copy) {
    wide.resize(static_cast<size_t>(bs * K * row_stride));
    widen_all(value, bs * K * row_stride, wide.data());
    value_t = wide.data();
  }
#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    Scratch<T> scratch(spatial_shapes, level_start_index, levels, points, channels);
    if (copy) scratch.value_copy.resize(K * C);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t s = task / blocks, q0 = task % blocks * block;
      const int64_t offset = (s / heads * K * heads + s % heads) * C;  // slice s's rows
      Slice<T> sl{s / heads, s % heads, value_t ? value_t + offset : nullptr, row_stride, nullptr, 0};
      if (copy) {
        gather_rows(value + offset, row_stride, K, C, scratch.value_copy.data);
        sl.value = scratch.value_copy.data;
        sl.value_stride = C;
      }
      forward_queries(pb, output, sl, q0, std::min(queries, q0 + block), scratch);
    }
  }
}

template <class S>
void ms_deform_attn_backward(const S* value, const int64_t* spatial_shapes,
                             const int64_t* level_start_index, const S* sampling_locations,
                             const S* attention_weights, const S* grad_output, S* grad_value,
                             S* grad_sampling_locations, S* grad_attention_weights, int64_t bs,
                             int64_t num_keys, int64_t heads, int64_t channels, int64_t levels,
                             int64_t queries, int64_t points) {
  using T = opmath_t<S>;  // the arithmetic type: float for the 16-bit types
  constexpr bool kNative = std::is_same_v<S, T>;
  const Problem<S> pb{value,    spatial_shapes, level_start_index, sampling_locations,
                      attention_weights, bs, num_keys, heads, channels, levels, queries, points};
  const bool need_dots = grad_sampling_locations || grad_attention_weights;
  if (!grad_value && !need_dots) return;
  // The three gradient masks, and channel counts of one, two or four whole vectors, get a loop
  // specialised for them.
  constexpr int64_t kLanes = Simd<T>::kLanes;
  const int vectors = channels == kLanes       ? 1
                      : channels == 2 * kLanes ? 2
                      : channels == 4 * kLanes ? 4
                                               : 0;
  const BackwardFn<S> variants[3][5] = {
      {backward_queries<S, true, true, 0>, backward_queries<S, true, true, 1>,
       backward_queries<S, true, true, 2>, nullptr, backward_queries<S, true, true, 4>},
      {backward_queries<S, true, false, 0>, backward_queries<S, true, false, 1>,
       backward_queries<S, true, false, 2>, nullptr, backward_queries<S, true, false, 4>},
      {backward_queries<S, false, true, 0>, backward_queries<S, false, true, 1>,
       backward_queries<S, false, true, 2>, nullptr, backward_queries<S, false, true, 4>}};
  const BackwardFn<S> run = variants[grad_value ? (need_dots ? 0 : 1) : 2][vectors];

  const int64_t K = num_keys, C = channels, row_stride = heads * C;
  const int64_t total = bs * heads * queries;
  if (total == 0) {
    // No query reads value, so its gradient is zero (the other gradients are empty).
    if (grad_value) std::fill(grad_value, grad_value + bs * K * row_stride, S(T(0)));
    return;
  }
  const int64_t work = total * levels * points * (channels + 8);
  const int max_threads = work > kParallelWork ? omp_get_max_threads() : 1;
  const int64_t slices = bs * heads, samples = levels * points;
  // Tasks: a slice's queries cut into `chunks` consecutive chunks, the cut chosen from the
  // shapes alone, never from the thread count, so that every grad_value element is summed in
  // the same order at any thread count. One chunk per slice once there are kTargetTasks slices;
  // fewer slices get more chunks, up to kTargetTasks tasks in all, as long as a chunk's
  // corner updates (4 per sample) number at least kChunkCornersPerKey per key: every chunk
  // but the first accumulates into its own K x C buffer, zeroed and then added, which must
  // stay small next to the chunk's own work (that pass is memory-bound: measured on the
  // one-slice encoder benchmark at 1 thread, 8 corners per key cost 34%, 16 cost 11%, 32 cost
  // 4%). The same chunks run at 1 thread, so more of them would tax every run for the sake of
  // many-core machines. (Without grad_value nothing is added up and any cut gives the same
  // bits; the same one is used.) Chunk 0 accumulates into grad_value itself; the buffers of
  // chunks 1, 2, ... are then added to it in chunk order.
  constexpr int64_t kTargetTasks = 8, kChunkCornersPerKey = 32;
  int64_t chunks = 1;
  if (slices < kTargetTasks) {
    chunks = ceil_div(kTargetTasks, slices);
    if (grad_value)
      chunks = std::min(chunks,
                        queries * samples * 4 / (kChunkCornersPerKey * std::max<int64_t>(K, 1)));
    chunks = std::clamp<int64_t>(chunks, 1, queries);
  }
  const int64_t chunk = ceil_div(queries, chunks);  // queries per chunk (the last may be short)
  chunks = ceil_div(queries, chunk);
  const int64_t tasks = slices * chunks;
  // The buffers of chunks 1.. of every slice, K x C each (uninitialised: each task zeroes its own,
  // in parallel and in the thread that uses it).
  const bool partials = grad_value && chunks > 1;
  const int64_t per_slice = (chunks - 1) * K * C;
  std::unique_ptr<T[]> partial_storage(partials ? new T[slices * per_slice + 64 / sizeof(T)]
                                                 : nullptr);
  T* partial = partial_storage.get();
  if (partial) {
    const auto address = reinterpret_cast<std::uintptr_t>(partial);
    partial += ((64 - address % 64) % 64) / sizeof(T);
  }
  // Copy the slice's rows when the chunk samples them often enough (see worth_copying).
  const bool copy = worth_copying(heads, K, chunk, samples);
  // 16-bit tensors: value's rows are read widened (per slice when copied, else all at once
  // here) and grad_value is summed in float32, rounded once: straight from a slice's copy when
  // that holds the whole sum (one chunk), else in a float32 grad_value rounded at the end.
  std::vector<T> wide, grad_wide;
  const T* value_t = nullptr;
  T* grad_t = nullptr;
  if constexpr (kNative) {
    value_t = value;
    grad_t = grad_value;
  } else {
    const int64_t n = bs * K * row_stride;
    if (!copy) {
      wide.resize(static_cast<size_t>(n));
      widen_all(value, n, wide.data());
      value_t = wide.data();
    }
    if (grad_value && (!copy || chunks > 1)) {
      grad_wide.resize(static_cast<size_t>(n));
      grad_t = grad_wide.data();
    }
  }

#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    Scratch<T> scratch(spatial_shapes, level_start_index, levels, points, C);
    if (copy) {
      scratch.value_copy.resize(K * C);
      if (grad_value) scratch.grad_copy.resize(K * C);
    }
    auto zero_rows = [&](T* rows, int64_t stride) {
      for (int64_t k = 0; k < K; ++k) std::fill_n(rows + k * stride, C, T(0));
    };
    // Tasks handed out dynamically: which thread runs a task changes no sum, and a thread that
    // is held up (another process on its core) does not hold up the others.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t s = task / chunks, c = task % chunks;
      const int64_t q0 = c * chunk, q1 = std::min(queries, q0 + chunk);
      const int64_t offset = (s / heads * K * heads + s % heads) * C;  // slice s's rows
      Slice<T> sl{s / heads, s % heads, value_t ? value_t + offset : nullptr, row_stride,
                  grad_t ? grad_t + offset : nullptr, row_stride};
      if (copy) {
        gather_rows(value + offset, row_stride, K, C, scratch.value_copy.data);
        sl.value = scratch.value_copy.data;
        sl.value_stride = C;
      }
      if (grad_value) {
        if (c > 0) {
          sl.grad = partial + s * per_slice + (c - 1) * K * C;
          sl.grad_stride = C;
        } else if (copy) {
          sl.grad = scratch.grad_copy.data;
          sl.grad_stride = C;
        }
        zero_rows(sl.grad, sl.grad_stride);
      }
      run(pb, grad_output, sl, grad_sampling_locations, grad_attention_weights, q0, q1, scratch);
      if (grad_value && c == 0 && copy) {
        if (grad_t)
          scatter_rows(sl.grad, K, C, grad_t + offset, row_stride);
        else  // 16 bits, one chunk: the slice's whole sum, rounded once
          scatter_rows(sl.grad, K, C, grad_value + offset, row_stride);
      }
    }
    if (partials) {
      // grad_value = ((chunk 0 + chunk 1) + chunk 2) + ..., in blocks of keys (the implicit
      // barrier above has ended every chunk).
      constexpr int64_t kKeyBlock = 64;
      const int64_t key_blocks = ceil_div(K, kKeyBlock);
#pragma omp for schedule(static) nowait  // the end of the parallel region waits
      for (int64_t it = 0; it < slices * key_blocks; ++it) {
        const int64_t s = it / key_blocks, k0 = it % key_blocks * kKeyBlock;
        const int64_t k1 = std::min(K, k0 + kKeyBlock);
        T* const dst = grad_t + (s / heads * K * heads + s % heads) * C;
        for (int64_t c = 1; c < chunks; ++c) {
          const T* src = partial + s * per_slice + (c - 1) * K * C;
          for (int64_t k = k0; k < k1; ++k) {
            T* d = dst + k * row_stride;
            const T* row = src + k * C;
#pragma omp simd
            for (int64_t j = 0; j < C; ++j) d[j] += row[j];
          }
        }
      }
    }
  }  if constexpr (!kNative)
    if (!grad_wide.empty()) round_all(grad_t, bs * K * row_stride, grad_value);
}

#define TG_INSTANTIATE(T)                                                                      \
  template void ms_deform_attn_forward<T>(const T*, const int64_t*, const int64_t*, const T*,  \
                                          const T*, T*, int64_t, int64_t, int64_t, int64_t,    \
                                          int64_t, int64_t, int64_t);                          \
  template void ms_deform_attn_backward<T>(const T*, const int64_t*, const int64_t*, const T*, \
                                           const T*, const T*, T*, T*, T*, int64_t, int64_t,   \
                                           int64_t, int64_t, int64_t, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
