#include "init.h"

#include <algorithm>
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
// The fan of kaiming_*_ by mode, checked.
int64_t kaiming_fan(const Tensor& t, const std::string& mode, const char* op) {
  TG_CHECK(mode == "fan_in" || mode == "fan_out", op, ": mode must be \"fan_in\" or \"fan_out\", got \"", mode, "\"");
  const int64_t fan = mode == "fan_in" ? fan_in(t) : fan_out(t);
  TG_CHECK(fan > 0, op, ": initializing a zero-element tensor of shape ", format_shape(t.shape()));
  return fan;
}
double xavier_std(const Tensor& t, double gain, const char* op) {
  const double fans = static_cast<double>(fan_in(t) + fan_out(t));
  TG_CHECK(fans > 0, op, ": initializing a zero-element tensor of shape ", format_shape(t.shape()));
  return gain * std::sqrt(2.0 / fans);
}
double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
// erf^-1(y) for y in (-1, 1): Giles' single-precision approximation ("Approximating the erfinv
// function", 2010), then two Newton steps on erf(x) = y, which bring it to double precision.
double erfinv(double y) {
  const double w0 = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w0 < 5.0) {
    const double w = w0 - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = p * w + c;
    x = p * y;
  } else {
    const double w = std::sqrt(w0) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = p * w + c;
    x = p * y;
  }
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int i = 0; i < 2 && std::isfinite(x); ++i) x -= (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
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
  const int64_t fan = kaiming_fan(t, mode, "kaiming_uniform_");
  const double stddev = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
  const double bound = std::sqrt(3.0) * stddev;
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  const double bound = std::sqrt(3.0) * xavier_std(t, gain, "xavier_uniform_");  // gain * sqrt(6 / fans)
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                        Generator* gen) {
  const int64_t fan = kaiming_fan(t, mode, "kaiming_normal_");
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)), gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  return normal_(t, 0.0, xavier_std(t, gain, "xavier_normal_"), gen);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_floating(t, "trunc_normal_");
  TG_CHECK(std > 0, "trunc_normal_: expected std > 0, got ", std);
  TG_CHECK(a < b, "trunc_normal_: expected a < b, got a=", a, " b=", b);
  const double lo = 2.0 * normal_cdf((a - mean) / std) - 1.0, hi = 2.0 * normal_cdf((b - mean) / std) - 1.0;
  Tensor u = uniform(t.shape(), lo, hi, DType::Float64, gen);
  double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i)
    p[i] = std::clamp(mean + std * std::sqrt(2.0) * erfinv(p[i]), a, b);  // +-inf at y = +-1: clamped
  NoGradGuard no_grad;
  t.copy_(u);
  return t;
}

}  // namespace tg::init
