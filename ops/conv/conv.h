// Convolutions (1D, 2D, 3D, transposed, grouped, depthwise) on tensors and the tape. The maths
// and layouts are in ops/conv/conv_kernels.h; semantics and argument order follow PyTorch.
//
// Parameter lists take PyTorch's forms: one value (used for every spatial dim) or one value per
// spatial dim. padding also takes 2 * dims values, (before, after) for each spatial dim in
// order, i.e. (top, bottom, left, right) in 2-D: an asymmetric padding PyTorch spells as
// F.pad + conv. output_padding is only for transposed convolutions and each value must be
// smaller than the stride or the dilation of its dim.
//
// Precision: bf16/fp16 tensors read their 16 bits, multiply and sum in float32 and round each
// output (or gradient) once, as PyTorch on the CPU. float32 convolutions follow the calling
// thread's float32 math mode (framework/math_mode.h) when they run, forward or backward: bf16
// or fp16 operands (or bf16x3) with float32 sums and results; the default stays float32 bit for
// bit. float64 is always float64.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../framework/math_mode.h"
#include "../../framework/tensor.h"

namespace tg {

// input (N, C_in, in...), weight (C_out, C_in / groups, k...) or, transposed,
// (C_in, C_out / groups, k...), bias (C_out) or undefined -> (N, C_out, out...).
// The number of spatial dims is weight.dim() - 2. Differentiable in input, weight and bias.
Tensor convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, bool transposed, const IntList& output_padding,
                   int64_t groups);

// Dtypes: float32, float64, bfloat16, float16; input, weight, bias (and grad_output) share one
// (a mixed call is a tg::Error naming the argument, as PyTorch). In bfloat16 / float16 the
// arithmetic is float32 and each output and gradient is rounded once to the dtype (PyTorch's
// CPU rule).

// PyTorch's functional wrappers, with its argument order and defaults. Each also takes an
// unbatched input (C_in, in...) and returns (C_out, out...), as PyTorch (ops/internal/unbatched.h:
// the batched op between two recorded views); tg::convolution itself wants the batch, as aten's.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), const IntList& stride = {1},
              const IntList& padding = {0}, const IntList& dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), const IntList& stride = {1},
              const IntList& padding = {0}, const IntList& dilation = {1}, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), const IntList& stride = {1},
              const IntList& padding = {0}, const IntList& dilation = {1}, int64_t groups = 1);
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const IntList& stride = {1}, const IntList& padding = {0}, const IntList& output_padding = {0},
                        int64_t groups = 1, const IntList& dilation = {1});
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const IntList& stride = {1}, const IntList& padding = {0}, const IntList& output_padding = {0},
                        int64_t groups = 1, const IntList& dilation = {1});
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const IntList& stride = {1}, const IntList& padding = {0}, const IntList& output_padding = {0},
                        int64_t groups = 1, const IntList& dilation = {1});

// padding = "same" or "valid", PyTorch's strings for conv1d/2d/3d (not the transposed ones):
// "valid" is no padding; "same" keeps the input's size, which needs stride 1: dilation *
// (kernel - 1) in total per dim, half before and the odd one extra after. Takes a string
// literal, a const char* or a std::string, never a brace list ({1} stays an IntList), so the
// overloads below are not ambiguous with the IntList ones. Any other string is a tg::Error.
struct PaddingString {
  template <size_t N>
  PaddingString(const char (&s)[N]) : value(s) {}  // NOLINT: implicit, as padding="same"
  template <class S, std::enable_if_t<std::is_same_v<S, std::string> || std::is_same_v<S, const char*> ||
                                          std::is_same_v<S, char*>,
                                      int> = 0>
  PaddingString(const S& s) : value(s) {}  // NOLINT
  std::string value;
};

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation = {1}, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const PaddingString& padding, const IntList& dilation = {1}, int64_t groups = 1);

// The explicit padding "same" or "valid" stands for, as 2 * dims values (before, after per dim,
// tg::convolution's asymmetric form), from the kernel sizes (weight.dim() - 2 = dims), stride
// and dilation (1 or dims values each). For the Conv layers too. op names the caller in errors.
IntList conv_padding_from_string(const char* op, const std::string& padding, const IntList& kernel_size,
                                 const IntList& stride, const IntList& dilation);

struct ConvolutionGrads {
  Tensor grad_input, grad_weight, grad_bias;  // undefined where output_mask did not ask
};

// The kernel API, as aten::convolution_backward: the gradients of convolution(input, weight,
// bias, ...) for grad_output, computing only those output_mask asks for (input, weight, bias).
// bias_sizes is the bias's shape ({C_out}) or empty when there is none; grad_bias is computed
// whenever output_mask[2] is set. Does not record.
// cube_math_type (the spec's cubeMathType, its last argument): how a float32 convolution may
// compute its products, for this call only, overriding the thread's float32 math mode
// (framework/math_mode.h): KeepDtype float32, AllowFp32DownPrecision bf16 operands, UseFp16
// fp16 operands, UseHf32 three bf16 products (bf16x3); sums and results stay float32, and
// grad_bias is always the float32 sum. Not given: the thread's mode. bf16/fp16 tensors keep
// their own dtype and float64 stays float64 whatever the mode. A value outside 0..3 is a
// tg::Error.
ConvolutionGrads convolution_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                      const IntList& bias_sizes, const IntList& stride, const IntList& padding,
                                      const IntList& dilation, bool transposed, const IntList& output_padding,
                                      int64_t groups, std::array<bool, 3> output_mask = {true, true, true},
                                      std::optional<CubeMathType> cube_math_type = std::nullopt);

}  // namespace tg
