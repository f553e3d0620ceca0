// The backward kernel of multi-scale deformable attention: grad_value, grad_sampling_locations and
// grad_attention_weights for a grad_output. Legend, maths, work split (slices own their gradient
// rows; few slices are cut into query chunks summed in chunk order) and 16-bit rules: see
// ms_deform_attn_kernels.cpp; the shared machinery is internal/sampling.h. One copy per
// instruction set (ops/internal/isa_dispatch.h).
#include "internal/sampling.h"

namespace tg::kernels::TG_ISA_NS {
namespace {

// The even and odd lanes of the 2n values lo, hi (lo first): e = lo0 lo2 ... hi0 hi2 ...
template <class Vec, int... J>
inline void even_odd_of(const Vec& lo, const Vec& hi, Vec* e, Vec* o, std::integer_sequence<int, J...>) {
  *e = __builtin_shufflevector(lo, hi, (2 * J)...);
  *o = __builtin_shufflevector(lo, hi, (2 * J + 1)...);
}

// Backward for queries [q0, q1) of a slice. kGradValue: scatter into the slice's gradient rows.
// kDots: the channel dots d_k, needed by the gradients of the locations and attention weights.
template <class TS, bool kGradValue, bool kDots, int kVectors, class T = opmath_t<TS>,
          class R = row_t<TS>>
void backward_queries(const Problem<TS>& pb, const TS* grad_output, const Slice<T, R>& sl,
                      TS* grad_loc, TS* grad_attn, int64_t q0, int64_t q1, Scratch<T, R>& sc) {
  using S = Simd<T>;
  using Vec = typename S::Vec;
  const int64_t C = pb.C, LP = pb.L * pb.P;
  // Channels covered by whole vectors; a compile-time constant when C is kVectors vectors, so
  // that the channel loop unrolls.
  const int64_t whole = kVectors > 0 ? kVectors * S::kLanes : C / S::kLanes * S::kLanes;
  if (q0 < q1) prepare_query<TS, kGradValue>(pb, grad_output, sl, q0, q1, sc);
  for (int64_t q = q0; q < q1; ++q) {
    if (q + 1 < q1) prepare_query<TS, kGradValue>(pb, grad_output, sl, q + 1, q1, sc);
    const Footprints<T, R>& f = sc.fp[q % 2];
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
    const R* const* rows = f.rows.data();
    T* const* grad_rows = f.grad_rows.data();
    const T* aw = f.aw.data();
    T* dots = sc.dots.data();
    // bfloat16 rows of whole pairs of vectors: the dots read them two channels per word
    // (bf16_even_odd), against grad_output's even and odd channels (ge, go, split once per
    // query), lane j summing channels 2j, 2j + 1, 2j + 2 kLanes, ... (another order of the same
    // products than float32's, so bits within rounding of its dots; the results are rounded to
    // 16 bits).
    constexpr bool kPairDots = std::is_same_v<R, BFloat16> && kDots && kVectors >= 2 && kVectors % 2 == 0;
    constexpr int kPairs = kPairDots ? kVectors / 2 : 1;
    Vec ge[kPairs], go[kPairs];
    if constexpr (kPairDots)
      for (int b = 0; b < kPairs; ++b)
        even_odd_of(S::load(g + 2 * b * S::kLanes), S::load(g + (2 * b + 1) * S::kLanes), &ge[b], &go[b],
                    std::make_integer_sequence<int, static_cast<int>(S::kLanes)>{});
    for (int64_t i = 0; i < LP; ++i) {
      const R *v0 = rows[i], *v1 = rows[LP + i], *v2 = rows[2 * LP + i], *v3 = rows[3 * LP + i];
      T *gv0 = grad_rows[i], *gv1 = grad_rows[LP + i], *gv2 = grad_rows[2 * LP + i],
        *gv3 = grad_rows[3 * LP + i];
      const T aw0 = aw[i], aw1 = aw[LP + i], aw2 = aw[2 * LP + i], aw3 = aw[3 * LP + i];
      // Lane j of acc_k sums the products of channels j, j + kLanes, ...
      Vec acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
      if constexpr (kPairDots) {
        for (int b = 0; b < kPairs; ++b) {
          const int64_t o = 2 * b * S::kLanes;
          Vec e, d;
          bf16_even_odd(v0 + o, &e, &d);
          acc0 += ge[b] * e;
          acc0 += go[b] * d;
          bf16_even_odd(v1 + o, &e, &d);
          acc1 += ge[b] * e;
          acc1 += go[b] * d;
          bf16_even_odd(v2 + o, &e, &d);
          acc2 += ge[b] * e;
          acc2 += go[b] * d;
          bf16_even_odd(v3 + o, &e, &d);
          acc3 += ge[b] * e;
          acc3 += go[b] * d;
        }
      }
      int64_t c = 0;
      for (; c < whole; c += S::kLanes) {
        const Vec gc = S::load(g + c);
        if (kDots && !kPairDots) {
          acc0 += gc * load_vec<T>(v0 + c);
          acc1 += gc * load_vec<T>(v1 + c);
          acc2 += gc * load_vec<T>(v2 + c);
          acc3 += gc * load_vec<T>(v3 + c);
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
          d[0] += gc * load_elem<T>(v0, c);
          d[1] += gc * load_elem<T>(v1, c);
          d[2] += gc * load_elem<T>(v2, c);
          d[3] += gc * load_elem<T>(v3, c);
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
        const R *v0 = rows[i], *v1 = rows[LP + i], *v2 = rows[2 * LP + i], *v3 = rows[3 * LP + i];
        const T a = attn[i], e = 1 - fx[i], s = 1 - fy[i];
        T gx = 0, gy = 0;
        for (int64_t c = 0; c < C; ++c) {
          const T ga = g[c] * a;
          const T u0 = load_elem<T>(v0, c), u1 = load_elem<T>(v1, c), u2 = load_elem<T>(v2, c), u3 = load_elem<T>(v3, c);
          gx += ((u1 - u0) * s + (u3 - u2) * fy[i]) * ga;
          gy += ((u2 - u0) * e + (u3 - u1) * fx[i]) * ga;
        }
        store_op(gl, 2 * i, gx * (2 * half_W[i]));
        store_op(gl, 2 * i + 1, gy * (2 * half_H[i]));
      }
    }
  }
}

template <class S, class T = opmath_t<S>, class R = row_t<S>>
using BackwardFn = void (*)(const Problem<S>&, const S*, const Slice<T, R>&, S*, S*, int64_t,
                            int64_t, Scratch<T, R>&);

}  // namespace

template <class S>
void ms_deform_attn_backward(const S* value, const int64_t* spatial_shapes,
                             const int64_t* level_start_index, const S* sampling_locations,
                             const S* attention_weights, const S* grad_output, S* grad_value,
                             S* grad_sampling_locations, S* grad_attention_weights, int64_t bs,
                             int64_t num_keys, int64_t heads, int64_t channels, int64_t levels,
                             int64_t queries, int64_t points) {
  using T = opmath_t<S>;  // the arithmetic type: float for the 16-bit types
  using R = row_t<S>;     // the type the value rows are read in
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
  // 16-bit tensors: value's rows are read as R (as stored, widened in registers; float16
  // without F16C widened per slice when copied, else all at once here) and grad_value is summed
  // in float32, rounded once: straight from a slice's copy when that holds the whole sum (one
  // chunk), else in a float32 grad_value rounded at the end.
  std::vector<R> wide;
  // Uninitialised: every slice's rows are zeroed by the task of its chunk 0 (zero_rows).
  std::unique_ptr<T[]> grad_wide;
  const R* value_t = nullptr;
  T* grad_t = nullptr;
  if constexpr (kNative) {
    value_t = value;
    grad_t = grad_value;
  } else {
    const int64_t n = bs * K * row_stride;
    if constexpr (std::is_same_v<S, R>) {
      value_t = value;
    } else if (!copy) {
      wide.resize(static_cast<size_t>(n));
      widen_all(value, n, wide.data());
      value_t = wide.data();
    }
    if (grad_value && (!copy || chunks > 1)) {
      grad_wide.reset(new T[static_cast<size_t>(n)]);
      grad_t = grad_wide.get();
    }
  }

#pragma omp parallel num_threads(max_threads) if (max_threads > 1)
  {
    Scratch<T, R> scratch(spatial_shapes, level_start_index, levels, points, C);
    if (copy) {
      scratch.value_copy.resize(K * C);
      if (grad_value) scratch.grad_copy.resize(K * C);
    }
    auto zero_rows = [&](T* rows, int64_t stride) {
      if (stride == C) {  // contiguous (a copy, a chunk's buffer, or one head): one fill, not K
        std::fill_n(rows, K * C, T(0));
        return;
      }
      for (int64_t k = 0; k < K; ++k) std::fill_n(rows + k * stride, C, T(0));
    };
    // Tasks handed out dynamically: which thread runs a task changes no sum, and a thread that
    // is held up (another process on its core) does not hold up the others.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t s = task / chunks, c = task % chunks;
      const int64_t q0 = c * chunk, q1 = std::min(queries, q0 + chunk);
      const int64_t offset = (s / heads * K * heads + s % heads) * C;  // slice s's rows
      Slice<T, R> sl{s / heads, s % heads, value_t ? value_t + offset : nullptr, row_stride,
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
    if (grad_wide) round_all(grad_t, bs * K * row_stride, grad_value);
}

#define TG_INSTANTIATE(T) \
  template void ms_deform_attn_backward<T>(const T*, const int64_t*, const int64_t*, const T*, const T*, const T*, \
                                           T*, T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(BFloat16)
TG_INSTANTIATE(Float16)
#undef TG_INSTANTIATE

}  // namespace tg::kernels::TG_ISA_NS
