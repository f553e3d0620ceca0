// tg::pad, PyTorch's F.pad: constant (any rank, negative pads crop), reflect, replicate and
// circular padding, on the tape and twice differentiable. The kernels of the three reading modes
// are in ops/pad/pad_kernels.h (with the index rules).
//
// `pad` lists (before, after) pairs from the last dim backwards, as F.pad:
// pad(x, {1, 2}) pads the last dim by 1 before and 2 after, pad(x, {1, 1, 0, 3}) also the one
// before it. PyTorch 1.13's limits, each a tg::Error naming the argument:
//   - an even number of values, at most 2 * input.dim();
//   - constant: any rank and dtype (float32, float64, bfloat16, float16, int64); each padded
//     size must stay >= 0;
//   - reflect, replicate, circular: 2, 4 or 6 values pad the last 1, 2 or 3 dims of a batched
//     (N, C, ...) or unbatched (C, ...) input, so the input has 2-3, 3-4 or 4-5 dims; circular
//     needs the batched form in 1.13 (its unbatched form came later). Floating dtypes only.
//     reflect: each pad < the size of its dim; circular: each pad <= that size; reflect and
//     replicate need non-empty padded dims and give sizes >= 1. value must be 0.
// Gradients: constant's is the crop (a constant pad with the pads negated); the other modes'
// sums each output's gradient into the input it read (pad_backward).
#pragma once

#include <string>

#include "../../framework/tensor.h"
#include "pad_kernels.h"

namespace tg {

using PadMode = kernels::PadMode;

Tensor pad(const Tensor& input, const IntList& pad, PadMode mode = PadMode::Constant, double value = 0.0);

// "constant", "reflect", "replicate" or "circular" (F.pad's mode strings); any other is a
// tg::Error naming `op` and the argument `what`.
PadMode pad_mode_from_string(const std::string& mode, const char* op = "pad", const char* what = "mode");
const char* pad_mode_name(PadMode mode);

// The gradient of pad(input, pad, mode) for grad_output, given the input's shape. Linear in
// grad_output, recorded (its gradient is pad again), so pad is twice differentiable.
Tensor pad_backward(const Tensor& grad_output, const Shape& input_size, const IntList& pad, PadMode mode);

}  // namespace tg
