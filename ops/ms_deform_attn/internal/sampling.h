// The sampling machinery shared by the forward (ms_deform_attn_kernels.cpp) and backward
// (ms_deform_attn_backward_kernels.cpp) kernels of multi-scale deformable attention: SIMD
// vectors and lane sums, the problem and slice descriptions, the staging of a slice's rows
// (copied, widened from 16 bits, rounded back), the per-thread scratch, and the footprints of a
// query's samples. The legend, the maths and the work split are in ms_deform_attn_kernels.cpp.
//
// Included by those two kernel files only, inside nothing: it opens the includer's
// instruction-set namespace TG_ISA_NS (ops/internal/isa_dispatch.h), one copy per path.
#pragma once

#include "../ms_deform_attn_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../../framework/half.h"
#include "../../../framework/parallel.h"
#include "../../internal/half_access.h"
#include "../../internal/isa_dispatch.h"
#include "../../internal/simd_width.h"

#if defined(__SSE4_1__)
#include <immintrin.h>
#endif

// The SIMD helpers below pass vectors by value between inline functions of the two kernel files only; GCC's
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

// The type the sampling loops read value's rows in: a 16-bit row as stored, widened to float in
// registers as it is loaded (load_vec), so that a corner costs half the cache lines of a float32
// one (C = 32: 64 bytes instead of 128); float16 only where the path widens a vector in one
// instruction (F16C), else its rows are widened to float32 up front (the generic x86-64-v2 copy).
template <class S>
struct RowType {
  using type = S;
};
#if !defined(__F16C__)
template <>
struct RowType<Float16> {
  using type = float;
};
#endif
template <class S>
using row_t = typename RowType<S>::type;

// Simd<T>::kLanes consecutive values of a row stored as R, as one vector of T. Widening is exact:
// a bfloat16 is the top half of its float32 (zero-extend, shift left 16), and F16C's conversion
// is exact too, so the loops compute the same bits as on rows widened beforehand.
template <class T, class R>
inline typename Simd<T>::Vec load_vec(const R* p) {
  using Vec = typename Simd<T>::Vec;
  if constexpr (std::is_same_v<R, T>) {
    return Simd<T>::load(p);
  } else if constexpr (std::is_same_v<R, BFloat16>) {
    // (Intrinsics where there are: GCC 12 makes two half-width zero-extensions and an insert of
    // __builtin_convertvector's 16 lanes.)
#if defined(__AVX512F__)
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return reinterpret_cast<Vec>(_mm512_slli_epi32(u, 16));
#elif defined(__AVX2__)
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return reinterpret_cast<Vec>(_mm256_slli_epi32(u, 16));
#elif defined(__SSE4_1__)
    const __m128i u = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return reinterpret_cast<Vec>(_mm_slli_epi32(u, 16));
#else
    typedef uint16_t Halves __attribute__((vector_size(kSimdBytes / 2)));
    typedef uint32_t Words __attribute__((vector_size(kSimdBytes)));
    Halves h;
    std::memcpy(&h, p, sizeof h);
    const Words u = __builtin_convertvector(h, Words) << 16;
    Vec v;
    std::memcpy(&v, &u, sizeof v);
    return v;
#endif
  } else {
    static_assert(std::is_same_v<R, Float16>, "rows are T, bfloat16 or float16");
#if defined(__F16C__)
#if defined(__AVX512F__)
    return reinterpret_cast<Vec>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(__AVX__)
    return reinterpret_cast<Vec>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
    return reinterpret_cast<Vec>(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
#endif
  }
}

// Element k of a row stored as R, as T (exact, like load_vec). Float16 uses F16C's scalar
// conversion where load_vec uses its vector one: half_bits' integer widening is long enough that
// GCC vectorises a tail's four corners together, which leaves its products unfused (other bits).
template <class T, class R>
inline T load_elem(const R* p, int64_t k) {
#if defined(__F16C__)
  if constexpr (std::is_same_v<R, Float16>)
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(p)[k]);
  else
#endif
    return load_op(p, k);
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

// Where one slice's rows are: key k of the slice at value + k * value_stride (stored as R, see
// row_t), its gradient at grad + k * grad_stride (grad null when grad_value is not asked for).
template <class T, class R = T>
struct Slice {
  int64_t n, m;
  const R* value;
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

// Copies a slice's K rows (C each, stride apart) to or from a contiguous buffer of type T:
// copied as they are when S is T, else widened on the way in and rounded on the way out.
// A row of `bytes` bytes copied inline, a vector register at a time: the rows are short (C = 32
// bfloat16 values are 64 bytes), and a call to memcpy per row cost more than the copying (a third
// of the decoder's forward, for float32 and bfloat16 alike).
inline void copy_row(const void* src, int64_t bytes, void* dst) {
  typedef unsigned char Chunk __attribute__((vector_size(kSimdBytes)));
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  int64_t b = 0;
  for (; b + kSimdBytes <= bytes; b += kSimdBytes) {
    Chunk c;
    std::memcpy(&c, s + b, sizeof c);
    std::memcpy(d + b, &c, sizeof c);
  }
  if (b < bytes) std::memcpy(d + b, s + b, static_cast<size_t>(bytes - b));
}

template <class S, class T>
void gather_rows(const S* src, int64_t stride, int64_t K, int64_t C, T* dst) {
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (std::is_same_v<S, T>)
      copy_row(src + k * stride, C * static_cast<int64_t>(sizeof(T)), dst + k * C);
    else
      load_row(src + k * stride, C, dst + k * C);
  }
}
template <class T, class S>
void scatter_rows(const T* src, int64_t K, int64_t C, S* dst, int64_t stride) {
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (std::is_same_v<S, T>)
      copy_row(src + k * C, C * static_cast<int64_t>(sizeof(T)), dst + k * stride);
    else
      store_row(src + k * C, C, dst + k * stride);
  }
}

// Where the L*P sampling points of one query land, one entry per (level, point) i; corner
// arrays are corner-major ([k * LP + i], corners k = nw, ne, sw, se). Value rows are read as R.
template <class T, class R = T>
struct Footprints {
  std::vector<T> fx, fy;       // distances to the west / north corners (PyTorch's "w", "n")
  std::vector<T> w;            // bilinear weights
  std::vector<const R*> rows;  // value rows of the corners (or the zero row)
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
// Held as bytes and zeroed by memset: a vector of BFloat16 (whose constructor sets its bits) was
// filled one element at a time, 5% of the decoder's bf16 forward for the slice copy's buffer. All
// the element types here (float, double, the 16-bit types, pointers) are zero when all bits are.
template <class T>
struct AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "zeroed as bytes");
  std::vector<unsigned char> storage;
  T* data = nullptr;
  void resize(int64_t n) {
    storage.assign((static_cast<size_t>(n) + 64 / sizeof(T)) * sizeof(T), 0);
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    data = reinterpret_cast<T*>(storage.data() + (64 - address % 64) % 64);
  }
};

// Per-thread scratch (value rows read as R, see row_t).
template <class T, class R = T>
struct Scratch {
  int64_t LP;
  int64_t C;
  AlignedBuffer<R> zeros;  // C zeros: what a corner outside the map reads
  AlignedBuffer<T> sinks;  // 4 x C: where a corner outside the map's gradient goes
  // Constant over the call, per sample i = (level, point): its level's size and first key.
  std::vector<int64_t> level_W, level_H, level_start;
  std::vector<T> half_W, half_H;    // W / 2, H / 2
  std::vector<T> clamp_W, clamp_H;  // min(W, 2^30), min(H, 2^30)
  // Two queries' footprints: the next query's are computed before the current one is summed,
  // so that its row pointers, written as vectors, have left the store buffer when read one by
  // one, and its rows are being fetched meanwhile.
  Footprints<T, R> fp[2];
  std::vector<T> dots;  // d_k = sum_c g[c] v_k[c], 4 per sample (sample-major)
  std::vector<T> row;   // C: a 16-bit query's output before rounding
  AlignedBuffer<T> g_wide[2];  // C: a 16-bit query's grad_output widened, for two queries
  int64_t g_id[2] = {-1, -1};  // which (n, q, m) each holds
  // 2 * LP, LP: the locations and weights of a 16-bit query widened, for two queries (the next
  // one is widened one query ahead, see prepare_query), and which (n, q, m) each holds.
  AlignedBuffer<T> loc_wide[2], attn_wide[2];
  int64_t wide_id[2] = {-1, -1};
  // Contiguous copies of one slice's value rows and grad_value rows (see Slice), K x C each.
  AlignedBuffer<R> value_copy;
  AlignedBuffer<T> grad_copy;

  Scratch(const int64_t* spatial_shapes, const int64_t* level_start_index, int64_t L, int64_t P,
          int64_t channels)
      : LP(L * P), C(channels), fp{Footprints<T, R>(L * P), Footprints<T, R>(L * P)},
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
template <class S, bool kGrad, class T, class R>
void query_footprints(const S* __restrict loc, const S* __restrict attn, const R* v_slice,
                      int64_t row_stride, T* grad_slice, int64_t grad_stride, Scratch<T, R>& sc,
                      Footprints<T, R>& f) {
  const int64_t LP = sc.LP;
  const int64_t *__restrict Wi = sc.level_W.data(), *__restrict Hi = sc.level_H.data();
  const int64_t* __restrict start = sc.level_start.data();
  const T *__restrict half_W = sc.half_W.data(), *__restrict half_H = sc.half_H.data();
  const T *__restrict clamp_W = sc.clamp_W.data(), *__restrict clamp_H = sc.clamp_H.data();
  T *__restrict fx = f.fx.data(), *__restrict fy = f.fy.data(), *__restrict w = f.w.data();
  T* __restrict aw = f.aw.data();
  T* __restrict a = f.a.data();
  int32_t *__restrict x0s = f.x0.data(), *__restrict y0s = f.y0.data();
  const R** __restrict rows = f.rows.data();
  T** __restrict grad_rows = f.grad_rows.data();
  const R* zeros = sc.zeros.data;
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
template <class S, bool kGrad, class T, class R>
void prepare_query(const Problem<S>& pb, const S* grad_output, const Slice<T, R>& sl, int64_t q,
                   int64_t q1, Scratch<T, R>& sc) {
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

}  // namespace
}  // namespace tg::kernels::TG_ISA_NS
