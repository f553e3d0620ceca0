// How an op whose kernels exist for float32 and float64 only computes bfloat16 and float16 (the
// PyTorch CPU rule of issue 22): its 16-bit inputs are widened to float32 (detail::widen, never
// recorded), the kernel runs in float32 and each floating output is rounded once back to the
// 16-bit dtype with round_result. Ops include this; users do not.
#pragma once

#include "../../framework/half.h"
#include "../../framework/math_mode.h"
#include "../../framework/tensor.h"

#include <cmath>
#include <cstdint>

namespace tg {

// A kernel's fresh result in the dtype it should have: rounded once when it was computed in
// float32 for a 16-bit dtype; itself otherwise (no copy, no new handle: the float32 and float64
// paths pay nothing), and undefined stays undefined (a gradient an output mask did not ask for).
inline Tensor round_result(const Tensor& out, DType dtype) {
  return !out.defined() || out.dtype() == dtype ? out : detail::convert(out, dtype);
}

// float32 operands rounded to S for a reduced math mode (framework/math_mode.h): out[i] = S(x[i]).
template <class S>
void round_operand(const float* x, int64_t n, S* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = S(x[i]);
}

// The two bf16 parts of float32 operands for Float32Math::BFloat16x3: hi = bf16(x) and
// lo = bf16(x - hi) (exact in float32), so x = hi + lo to about 2^-16 of |x|, and a product
// x * y is hi_x * hi_y + hi_x * lo_y + lo_x * hi_y to about 2^-16 of |x y| (lo_x * lo_y,
// below 2^-16, is left out).
inline void split_bfloat16(const float* x, int64_t n, BFloat16* hi, BFloat16* lo) {
  for (int64_t i = 0; i < n; ++i) {
    hi[i] = BFloat16(x[i]);
    const float h = float(hi[i]);
    // An infinite hi (x infinite, or rounded up past bf16's largest) leaves lo = 0, never the
    // NaN of inf - inf, so that the three products give inf where float32 would.
    lo[i] = BFloat16(std::isinf(h) ? 0.0f : x[i] - h);
  }
}

}  // namespace tg
