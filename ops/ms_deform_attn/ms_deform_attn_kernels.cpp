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
// are widened as they are read; value's rows stay 16 bits (in the slice's per-thread copy, or
// where they are) and are widened in registers by the channel loops (row_t, load_vec), so that
// a corner costs half the bytes of a float32 one; only float16 on a path without F16C widens
// them into the slice's copy, or one float32 copy of value up front. grad_value is summed
// in float32 (the slice's copy, the chunk buffers, or a float32 grad_value when chunks or
// uncopied slices need one) and rounded once at the end; every other output is rounded as it
// is stored.
#include "internal/sampling.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// lo, hi = the lanes of e and o alternated: e0 o0 e1 o1 ... (lo the first half, hi the second).
template <class Vec, int... J>
inline void interleave(const Vec& e, const Vec& o, Vec* lo, Vec* hi, std::integer_sequence<int, J...>) {
  constexpr int n = sizeof...(J);
  *lo = __builtin_shufflevector(e, o, (J % 2 ? n + J / 2 : J / 2)...);
  *hi = __builtin_shufflevector(e, o, (J % 2 ? n + (n + J) / 2 : (n + J) / 2)...);
}

// Output channels [c, c + kVectors * kLanes) of one query, accumulated in kVectors registers in
// one pass over its samples (so each sample's pointers and weights are read once per pass).
// a multiplies the interpolated value, as in PyTorch, so an infinite weight gives +-Inf rather
// than Inf - Inf between corners.
template <class T, class R, int kVectors>
inline void sum_samples(const Footprints<T, R>& f, const T* a, int64_t LP, int64_t c, T* out) {
  using S = Simd<T>;
  typename S::Vec acc[kVectors] = {};
  const R* const* r = f.rows.data();
  const T* w = f.w.data();
  for (int64_t i = 0; i < LP; ++i) {
    const R *p0 = r[i] + c, *p1 = r[LP + i] + c, *p2 = r[2 * LP + i] + c, *p3 = r[3 * LP + i] + c;
    const T w0 = w[i], w1 = w[LP + i], w2 = w[2 * LP + i], w3 = w[3 * LP + i];
    for (int v = 0; v < kVectors; ++v) {
      const int64_t o = v * S::kLanes;
      acc[v] += a[i] * (w0 * load_vec<T>(p0 + o) + w1 * load_vec<T>(p1 + o) +
                        w2 * load_vec<T>(p2 + o) + w3 * load_vec<T>(p3 + o));
    }
  }
  for (int v = 0; v < kVectors; ++v) S::store(out + c + v * S::kLanes, acc[v]);
}

// bfloat16 rows, channels [c, c + kBlocks * 2 * kLanes): the same sums as sum_samples, with the
// rows widened two channels per 32-bit word (bf16_even_odd). Every lane does exactly
// sum_samples' arithmetic on its channel (same expression, same contraction), so the bits are the
// same; only the lanes' order differs, and the even and odd vectors are interleaved back as they
// are stored.
// With `rounded` (AVX-512, 16 lanes), the sums are rounded straight into rounded[c, ...) from the
// even and odd vectors (float_to_bf16_even_odd_x32, store_op's rule: the same bits as rounding
// out) and out is not written.
template <class T, int kBlocks>
inline void sum_sample_pairs(const Footprints<T, BFloat16>& f, const T* a, int64_t LP, int64_t c, T* out,
                             [[maybe_unused]] BFloat16* rounded = nullptr) {
  using S = Simd<T>;
  using Vec = typename S::Vec;
  constexpr int64_t V = S::kLanes;
  Vec acc_e[kBlocks] = {}, acc_o[kBlocks] = {};
  const BFloat16* const* r = f.rows.data();
  const T* w = f.w.data();
  for (int64_t i = 0; i < LP; ++i) {
    const BFloat16 *p0 = r[i] + c, *p1 = r[LP + i] + c, *p2 = r[2 * LP + i] + c, *p3 = r[3 * LP + i] + c;
    const T w0 = w[i], w1 = w[LP + i], w2 = w[2 * LP + i], w3 = w[3 * LP + i];
    for (int b = 0; b < kBlocks; ++b) {
      const int64_t o = 2 * V * b;
      Vec e0, o0, e1, o1, e2, o2, e3, o3;
      bf16_even_odd(p0 + o, &e0, &o0);
      bf16_even_odd(p1 + o, &e1, &o1);
      bf16_even_odd(p2 + o, &e2, &o2);
      bf16_even_odd(p3 + o, &e3, &o3);
      acc_e[b] += a[i] * (w0 * e0 + w1 * e1 + w2 * e2 + w3 * e3);
      acc_o[b] += a[i] * (w0 * o0 + w1 * o1 + w2 * o2 + w3 * o3);
    }
  }
#if defined(__AVX512F__)
  if constexpr (V == 16 && std::is_same_v<T, float>) {
    if (rounded) {
      for (int b = 0; b < kBlocks; ++b)
        _mm512_storeu_si512(rounded + c + 2 * V * b, float_to_bf16_even_odd_x32(reinterpret_cast<__m512>(acc_e[b]),
                                                                                reinterpret_cast<__m512>(acc_o[b])));
      return;
    }
  }
#endif
  for (int b = 0; b < kBlocks; ++b) {
    Vec lo, hi;
    interleave(acc_e[b], acc_o[b], &lo, &hi, std::make_integer_sequence<int, static_cast<int>(V)>{});
    S::store(out + c + 2 * V * b, lo);
    S::store(out + c + 2 * V * b + V, hi);
  }
}

// Forward for queries [q0, q1) of a slice: per query, the footprints of its L*P samples, then
// its output, up to four vectors of channels per pass over the samples.
template <class S, class T, class R>
void forward_queries(const Problem<S>& pb, S* output, const Slice<T, R>& sl, int64_t q0,
                     int64_t q1, Scratch<T, R>& sc) {
  constexpr int64_t V = Simd<T>::kLanes;
  constexpr bool kNative = std::is_same_v<S, T>;
  const int64_t C = pb.C, LP = pb.L * pb.P;
  if (q0 < q1) prepare_query<S, false>(pb, nullptr, sl, q0, q1, sc);
  for (int64_t q = q0; q < q1; ++q) {
    if (q + 1 < q1) prepare_query<S, false>(pb, nullptr, sl, q + 1, q1, sc);
    const Footprints<T, R>& f = sc.fp[q % 2];
    const int64_t nqm = (sl.n * pb.Q + q) * pb.M + sl.m;
    const T* a = f.a.data();
    // A 16-bit query's output is summed into a float row, then rounded once (bfloat16 channels
    // in whole pairs of AVX-512 vectors: rounded as they are summed, sum_sample_pairs).
    T* out;
    if constexpr (kNative) out = output + nqm * C; else out = sc.row.data();
    int64_t c = 0;
    if constexpr (std::is_same_v<R, BFloat16> && std::is_same_v<S, BFloat16>) {
#if defined(__AVX512F__)
      // Channels of whole pairs of vectors only (C = 32, 64, ...): each rounded as summed.
      if (C % (2 * V) == 0) {
        BFloat16* y = output + nqm * C;
        for (; c + 4 * V <= C; c += 4 * V) sum_sample_pairs<T, 2>(f, a, LP, c, out, y);
        if (c < C) sum_sample_pairs<T, 1>(f, a, LP, c, out, y);
        continue;
      }
#endif
    }
    if constexpr (std::is_same_v<R, BFloat16>) {
      for (; c + 4 * V <= C; c += 4 * V) sum_sample_pairs<T, 2>(f, a, LP, c, out);
      if (c + 2 * V <= C) {
        sum_sample_pairs<T, 1>(f, a, LP, c, out);
        c += 2 * V;
      }
    }
    for (; c + 4 * V <= C; c += 4 * V) sum_samples<T, R, 4>(f, a, LP, c, out);
    if (c + 2 * V <= C) {
      sum_samples<T, R, 2>(f, a, LP, c, out);
      c += 2 * V;
    }
    if (c + V <= C) {
      sum_samples<T, R, 1>(f, a, LP, c, out);
      c += V;
    }
    const R* const* r = f.rows.data();
    const T* w = f.w.data();
    for (; c < C; ++c) {
      T acc = 0;
      for (int64_t i = 0; i < LP; ++i)
        acc += a[i] * (w[i] * load_elem<T>(r[i], c) + w[LP + i] * load_elem<T>(r[LP + i], c) +
                       w[2 * LP + i] * load_elem<T>(r[2 * LP + i], c) +
                       w[3 * LP + i] * load_elem<T>(r[3 * LP + i], c));
      out[c] = acc;
    }
    if constexpr (!kNative) store_row(out, C, output + nqm * C);
  }
}

}  // namespace

template <class S>
void ms_deform_attn_forward(const S* value, const int64_t* spatial_shapes,
                            const int64_t* level_start_index, const S* sampling_locations,
                            const S* attention_weights, S* output, int64_t bs, int64_t num_keys,
                            int64_t heads, int64_t channels, int64_t levels, int64_t queries,
                            int64_t points) {
  using T = opmath_t<S>;  // the arithmetic type: float for the 16-bit types
  using R = row_t<S>;     // the type the value rows are read in
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
  // The value rows the loops read, as R: value itself, or (float16 without F16C) widened per
  // slice when copied, else all at once here.
  std::vector<R> wide;
  const R* value_t = nullptr;
  if constexpr (std::is_same_v<S, R>) {
    value_t = value;
  } else if (!copy) {
    wide.resize(static_cast<size_t>(bs * K * row_stride));
    widen_all(value, bs * K * row_stride, wide.data());
    value_t = wide.data();
  }
#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    Scratch<T, R> scratch(spatial_shapes, level_start_index, levels, points, channels);
    if (copy) scratch.value_copy.resize(K * C);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t s = task / blocks, q0 = task % blocks * block;
      const int64_t offset = (s / heads * K * heads + s % heads) * C;  // slice s's rows
      Slice<T, R> sl{s / heads, s % heads, value_t ? value_t + offset : nullptr, row_stride, nullptr, 0};
      if (copy) {
        gather_rows(value + offset, row_stride, K, C, scratch.value_copy.data);
        sl.value = scratch.value_copy.data;
        sl.value_stride = C;
      }
      forward_queries(pb, output, sl, q0, std::min(queries, q0 + block), scratch);
    }
  }
}

#define TG_INSTANTIATE(T) \
  template void ms_deform_attn_forward<T>(const T*, const int64_t*, const int64_t*, const T*, const T*, T*, \
                                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
