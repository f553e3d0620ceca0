#include "init.h"

#include <cmath>

#include "../framework/grad_mode.h"

namespace tg::init {

namespace {
int64_t receptive_field(const Tensor& t) {
  int64_t r = 1;
  for (int64_t d = 2; d < t.dim(); ++d) r *= t.size(d);
  return r;
}
void check_fans(const Tensor& t, const char* op) {
  TG_CHECK(t.defined(), op, ": the tensor is undefined");
  TG_CHECK(t.dim() >= 2, op, ": fan in and fan out can not be computed for a tensor with fewer than 2 dims, got shape ",
           format_shape(t.shape()));
}
void check_floating(const Tensor& t, const char* op) {
  TG_CHECK(t.defined(), op, ": the tensor is undefined");
  TG_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", dtype_name(t.dtype()));
}
}  // namespace

int64_t fan_in(const Tensor& t) {
  check_fans(t, "fan_in");
  return t.size(1) * receptive_field(t);
}

int64_t fan_out(const Tensor& t) {
  check_fans(t, "fan_out");
  return t.size(0) * receptive_field(t);
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid") return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  throw Error("calculate_gain: unsupported nonlinearity \"" + nonlinearity + "\"");
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_floating(t, "uniform_");
  TG_CHECK(low <= high, "uniform_: expected low <= high, got low=", low, " high=", high);
  NoGradGuard no_grad;
  t.copy_(uniform(t.shape(), low, high, t.dtype(), gen));
  return t;
}

Tensor& normal_(Tensor& t, double mean, double stddev, Generator* gen) {
  check_floating(t, "normal_");
  TG_CHECK(stddev >= 0, "normal_: expected stddev >= 0, got ", stddev);
  NoGradGuard no_grad;
  t.copy_(normal(t.shape(), mean, stddev, t.dtype(), gen));
  return t;
}

Tensor& constant_(Tensor& t, double value) {
  check_floating(t, "constant_");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                         Generator* gen) {
  TG_CHECK(mode == "fan_in" || mode == "fan_out", "kaiming_uniform_: mode must be \"fan_in\" or \"fan_out\", got \"",
           mode, "\"");
  const int64_t fan = mode == "fan_in" ? fan_in(t) : fan_out(t);
  TG_CHECK(fan > 0, "kaiming_uniform_: initializing a zero-element tensor of shape ", format_shape(t.shape()));
  const double stddev = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
  const double bound = std::sqrt(3.0) * stddev;
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  const double fans = static_cast<double>(fan_in(t) + fan_out(t));
  TG_CHECK(fans > 0, "xavier_uniform_: initializing a zero-element tensor of shape ", format_shape(t.shape()));
  const double bound = gain * std::sqrt(6.0 / fans);
  return uniform_(t, -bound, bound, gen);
}

}  // namespace tg::init
