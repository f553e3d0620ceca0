// The one loop behind every strided elementwise operation (copy, fill, broadcast arithmetic,
// reduction to a broadcast shape): walk a shape with K sets of strides, one row of the last
// dimension at a time, after merging dimensions that are contiguous in all K operands (so a
// contiguous tensor is a single row and the row body vectorises).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "parallel.h"

namespace tg {

template <size_t K>
struct StridedRows {
  std::vector<int64_t> shape;                     // merged dims, the last one is the row
  std::array<std::vector<int64_t>, K> strides;    // per operand, per merged dim
  int64_t rows = 0;                               // number of rows
  int64_t row_size = 0;                           // elements per row
  std::array<int64_t, K> row_stride{};            // stride inside the row, per operand

  StridedRows(const std::vector<int64_t>& full_shape, const std::array<std::vector<int64_t>, K>& full_strides) {
    int64_t total = 1;
    for (int64_t s : full_shape) total *= s;
    if (total == 0) return;
    // Drop size-1 dims, then merge dim i into i+1 when they are contiguous in every operand.
    for (size_t d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      bool merge = !shape.empty();
      for (size_t k = 0; k < K && merge; ++k)
        merge = strides[k].back() == full_strides[k][d] * full_shape[d];
      if (merge) {
        shape.back() *= full_shape[d];
        for (size_t k = 0; k < K; ++k) strides[k].back() = full_strides[k][d];
      } else {
        shape.push_back(full_shape[d]);
        for (size_t k = 0; k < K; ++k) strides[k].push_back(full_strides[k][d]);
      }
    }
    if (shape.empty()) {  // a single element
      shape.push_back(1);
      for (size_t k = 0; k < K; ++k) strides[k].push_back(0);
    }
    row_size = shape.back();
    rows = total / row_size;
    for (size_t k = 0; k < K; ++k) row_stride[k] = strides[k].back();
  }

  // Element offsets of the first element of row r, per operand; `index` (if given) receives
  // row r's position in the outer dims, for next_row.
  std::array<int64_t, K> row_offsets(int64_t r, std::vector<int64_t>* index = nullptr) const {
    std::array<int64_t, K> off{};
    if (index) index->assign(shape.size(), 0);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      int64_t i = r % shape[d];
      r /= shape[d];
      if (index) (*index)[d] = i;
      for (size_t k = 0; k < K; ++k) off[k] += i * strides[k][d];
    }
    return off;
  }

  // Moves `off` and `index` from a row to the next one, like an odometer: no divisions, which
  // matters when rows are short (broadcasting over a trailing dim of 2 gives millions of rows).
  // for_each_row takes the common step (along the innermost outer dim) itself, in registers.
  void next_row(std::vector<int64_t>& index, std::array<int64_t, K>& off) const {
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k) off[k] += strides[k][d];
      if (++index[d] < shape[d]) return;
      for (size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
};

// Calls fn(offsets, n, row_strides) for every row, in parallel when the work is large enough.
// Rows are disjoint in the output operand, so no two threads write the same element. When there
// are fewer rows than threads (a contiguous tensor is a single row), each row is cut into
// contiguous pieces, one task each, so that every thread gets work: fn then sees part of a row
// (offsets at the piece's start, n its length). A serial call (allow_parallel = false, which
// reductions into a broadcast output use) always gets whole rows, in order.
template <size_t K, class Fn>
void for_each_row(const std::vector<int64_t>& shape, const std::array<std::vector<int64_t>, K>& strides, Fn&& fn,
                  bool allow_parallel = true) {
  StridedRows<K> it(shape, strides);
  if (it.rows == 0) return;
  const int64_t work = it.rows * it.row_size;
  const bool parallel = allow_parallel && work >= kParallelGrain;
  // Pieces per row: enough for every thread, none shorter than a few thousand elements.
  constexpr int64_t kMinPiece = 4096;
  int64_t pieces = 1;
  if (parallel && it.rows < num_threads()) {
    const int64_t per_row = (num_threads() + it.rows - 1) / it.rows;
    pieces = std::max<int64_t>(1, std::min(per_row, it.row_size / kMinPiece));
  }
  // A task is a contiguous range of whole rows (pieces == 1: one range per thread) or one piece
  // of a row. One call site for fn: two would let the compiler vectorise them differently, and
  // the bits would then depend on the thread count.
  const int64_t tasks = pieces == 1 ? (parallel ? std::min<int64_t>(it.rows, num_threads()) : 1) : it.rows * pieces;
#pragma omp parallel for schedule(static) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    int64_t first = task / pieces, last = first + 1, begin = 0, end = it.row_size;
    if (pieces == 1) {
      first = it.rows * task / tasks;
      last = it.rows * (task + 1) / tasks;
    } else {
      begin = it.row_size * (task % pieces) / pieces;
      end = it.row_size * (task % pieces + 1) / pieces;
    }
    std::vector<int64_t> index;
    std::array<int64_t, K> off = it.row_offsets(first, &index);
    for (size_t k = 0; k < K; ++k) off[k] += begin * it.row_stride[k];
    // Most rows follow the last one by a step along the innermost outer dim: that step and the
    // offsets stay in registers (next_row through memory cost 5-10% of a broadcast add of 1024
    // x 1024 floats), the odometer runs only when the dim wraps.
    const int64_t inner = static_cast<int64_t>(it.shape.size()) - 2;  // -1: a single row
    std::array<int64_t, K> step{};
    int64_t i_inner = 0, n_inner = 1;
    if (inner >= 0) {
      for (size_t k = 0; k < K; ++k) step[k] = it.strides[k][inner];
      i_inner = index[inner];
      n_inner = it.shape[inner];
    }
    const std::array<int64_t, K> row_stride = it.row_stride;
    for (int64_t r = first; r < last; ++r) {
      fn(off, end - begin, row_stride);
      if (r + 1 == last) break;
      if (++i_inner < n_inner) {
        for (size_t k = 0; k < K; ++k) off[k] += step[k];
      } else {  // wraps: the odometer from the innermost dim's last position
        index[inner] = n_inner - 1;
        std::array<int64_t, K> next = off;
        it.next_row(index, next);
        off = next;
        i_inner = 0;
      }
    }
  }
}

}  // namespace tg
