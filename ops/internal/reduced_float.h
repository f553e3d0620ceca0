// How an op whose kernels exist for float32 and float64 only computes bfloat16 and float16 (the
// PyTorch CPU rule of issue 22): its 16-bit inputs are widened to float32 (detail::widen, never
// recorded), the kernel runs in float32 and each floating output is rounded once back to the
// 16-bit dtype with round_result. Ops include this; users do not.
#pragma once

#include "../../framework/tensor.h"

namespace tg {

// A kernel's fresh result in the dtype it should have: rounded once when it was computed in
// float32 for a 16-bit dtype; itself otherwise (no copy, no new handle: the float32 and float64
// paths pay nothing), and undefined stays undefined (a gradient an output mask did not ask for).
inline Tensor round_result(const Tensor& out, DType dtype) {
  return !out.defined() || out.dtype() == dtype ? out : detail::convert(out, dtype);
}

}  // namespace tg
