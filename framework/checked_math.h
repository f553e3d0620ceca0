// Checked int64 size arithmetic. Every product or sum of sizes a user gave (shapes, output
// sizes, strides, padding, spatial_shapes, N * C * HxW, ...) goes through these helpers, so an
// impossible size is a tg::Error that names the op and the argument. An unchecked product
// wraps (signed overflow is undefined behaviour besides): to 0, which lets a size check pass
// and a kernel read out of bounds, or to a negative count that ends in std::bad_alloc.
#pragma once

#include <cstdint>
#include <vector>

#include "check.h"

namespace tg {

// a * b, or tg::Error "op: expected what to fit in int64, got a * b, which overflows".
inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    TG_ERROR(op, ": expected ", what, " to fit in int64, got ", a, " * ", b, ", which overflows");
  return r;
}

// a + b, or tg::Error "op: expected what to fit in int64, got a + b, which overflows".
inline int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    TG_ERROR(op, ": expected ", what, " to fit in int64, got ", a, " + ", b, ", which overflows");
  return r;
}

// a - b, or tg::Error "op: expected what to fit in int64, got a - b, which overflows".
inline int64_t checked_sub(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    TG_ERROR(op, ": expected ", what, " to fit in int64, got ", a, " - ", b, ", which overflows");
  return r;
}

// The number of elements of a shape whose sizes are all non-negative and whose product of
// nonzero sizes fits in int64 (PyTorch refuses the same shapes). The nonzero product matters
// even when a zero makes the count 0: it is the largest contiguous stride, and [0, 2^40, 2^40]
// would otherwise overflow contiguous_strides. Otherwise throws tg::Error naming op and what:
// "empty: expected the product of the sizes of shape [2^32, 2^32] to fit in int64, ...".
inline int64_t checked_numel(const std::vector<int64_t>& shape, const char* op, const char* what) {
  bool has_zero = false;
  for (int64_t s : shape) {
    if (s < 0) TG_ERROR(op, ": expected non-negative sizes in ", what, ", got ", format_shape(shape));
    has_zero = has_zero || s == 0;
  }
  int64_t nonzero = 1;
  for (int64_t s : shape)
    if (s != 0 && __builtin_mul_overflow(nonzero, s, &nonzero))
      TG_ERROR(op, ": expected the product of the ", has_zero ? "nonzero " : "", "sizes of ", what, " ",
               format_shape(shape), " to fit in int64, but it overflows");
  return has_zero ? 0 : nonzero;
}

// The number of elements of shape (non-negative sizes) if it is at most bound, else -1: how the
// file readers bound a header's shape by the bytes the file can hold before allocating it. A
// shape with a zero size holds nothing whatever its other sizes ([1000, 0] fits in an empty
// file); otherwise the product is bounded at every step, so it never overflows. The other
// sizes of an empty shape must still pass checked_numel.
inline int64_t numel_within(const std::vector<int64_t>& shape, int64_t bound) {
  for (int64_t s : shape)
    if (s == 0) return 0;
  int64_t numel = 1;
  for (int64_t s : shape) {
    if (numel > bound / s) return -1;
    numel *= s;
  }
  return numel;
}

}  // namespace tg
