// Parameter initialisers, PyTorch's torch.nn.init: each fills its tensor in place, without
// recording (under NoGradGuard), drawing from `gen` or the default generator.
#pragma once

#include <string>

#include "../framework/random.h"
#include "../framework/tensor.h"

namespace tg::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (dims 2.. multiply
// into the receptive field), as torch.nn.init._calculate_fan_in_and_fan_out.
int64_t fan_in(const Tensor& t);
int64_t fan_out(const Tensor& t);

// PyTorch's calculate_gain for "linear", "conv1d/2d/3d", "conv_transpose1d/2d/3d", "sigmoid"
// (1), "tanh", "relu", "leaky_relu" (param = negative slope) and "selu" (3/4).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double stddev = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
// U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a);
// mode "fan_in" or "fan_out" (any case). Linear's default is a = sqrt(5): bound = 1 /
// sqrt(fan_in). The kaiming initialisers leave a zero-element tensor as it is, as PyTorch.
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2), std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a), fan by mode as
// kaiming_uniform_ (torch.nn.init.kaiming_normal_).
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)) (torch.nn.init.xavier_normal_).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(mean, std^2) truncated to [a, b], by PyTorch's method: a uniform draw between the normal CDF
// at a and at b, mapped back through the inverse CDF (computed in double); a window 3 std or
// more from the mean on one side is sampled exactly by rejection from an exponential (the
// CDFs round to 0 or 1 there: PyTorch's draws collapse onto a bound), and a window at most
// 0.25 std wide by rejection from the uniform; both as offsets from a bound, so a mean huge
// against the window does not cancel (PyTorch gives -2 for mean 1e17 on [-2, 2], where the
// values crowd at 2). Values are clamped to
// [a, b] after rounding to the tensor's dtype. Deterministic from `gen`; the draws are not
// PyTorch's bits.
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                      Generator* gen = nullptr);

}  // namespace tg::init
