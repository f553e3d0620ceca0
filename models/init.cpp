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
// The fan of kaiming_*_ by mode (any case, as PyTorch lower-cases it), checked.
int64_t kaiming_fan(const Tensor& t, std::string mode, const char* op) {
  for (char& c : mode) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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
// A window of the standard normal at least this far from the mean is sampled as a tail.
constexpr double kDeepTail = 3.0;
// A window at most this wide (in standard units) and within kDeepTail of the mean is sampled by
// rejection from the uniform: at least 46% of draws are kept.
constexpr double kNarrow = 0.25;

// The draws below work in offsets from a bound, never in the standard variable itself: with a
// mean huge against the window (1e17 with [-2, 2]), mean + std * x cancels to nothing.

// The offset y >= 0, in standard units, of one draw from the near bound of a window in a tail:
// the standard normal cut to [d, d + width] (d >= kDeepTail, width may be inf), measured from d
// (Robert, "Simulation of truncated normal variables", 1995): y from the exponential of rate d
// cut at width (by inversion), kept with probability exp(-y^2 / 2). The density of d + y is then
// exactly exp(-x^2 / 2) on the window; at 3 std or more, over 91% of draws are kept.
double tail_offset(double d, double width, Generator& g) {
  const double mass = -std::expm1(-d * width);
  for (;;) {
    const double y = -std::log1p(-g.next_double() * mass) / d;
    if (g.next_double() < std::exp(-0.5 * y * y)) return y;
  }
}

// The offset y in [0, width], in standard units, of one draw from the window's lower bound alpha
// (width = beta - alpha <= kNarrow): uniform, kept with the density's ratio to its peak on the
// window, at peak = clamp(0, alpha, beta).
double narrow_offset(double alpha, double width, Generator& g) {
  const double peak_offset = std::clamp(-alpha, 0.0, width);
  for (;;) {
    const double y = g.next_double() * width;
    const double from_peak = y - peak_offset, sum = (alpha + y) + (alpha + peak_offset);
    if (g.next_double() < std::exp(-0.5 * from_peak * sum)) return y;  // exp(-(x^2 - peak^2) / 2)
  }
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
  for (const char* one : {"linear", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                          "conv_transpose3d"})
    if (nonlinearity == one) return 1.0;
  if (nonlinearity == "selu") return 0.75;
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
  TG_CHECK(t.defined(), "constant_: the tensor is undefined");
  NoGradGuard no_grad;  // any dtype, as PyTorch's fill_ (a value an integer dtype cannot hold throws)
  t.fill_(value);
  return t;
}

Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                         Generator* gen) {
  if (t.defined() && t.numel() == 0) return t;  // PyTorch: a no-op (with a warning)
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
  if (t.defined() && t.numel() == 0) return t;  // PyTorch: a no-op (with a warning)
  const int64_t fan = kaiming_fan(t, mode, "kaiming_normal_");
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)), gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  return normal_(t, 0.0, xavier_std(t, gain, "xavier_normal_"), gen);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_floating(t, "trunc_normal_");
  TG_CHECK(std > 0 && std::isfinite(std), "trunc_normal_: expected a finite std > 0, got ", std);
  TG_CHECK(std::isfinite(mean), "trunc_normal_: expected a finite mean, got ", mean);
  TG_CHECK(a < b, "trunc_normal_: expected a < b, got a=", a, " b=", b);
  // The bounds rounded inward to t's dtype, before anything is drawn: the values are clamped to
  // them after rounding (a value rounded to the dtype's nearest could land just outside [a, b]).
  double lo_in = 0, hi_in = 0;
  dispatch_all_floating(t.dtype(), "trunc_normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T hi = static_cast<T>(static_cast<M>(b)), lo = static_cast<T>(static_cast<M>(-a));
    if (static_cast<double>(hi) > b) hi = next_below(hi);
    if (static_cast<double>(lo) > -a) lo = next_below(lo);
    hi_in = static_cast<double>(hi);
    lo_in = -static_cast<double>(lo);  // the smallest value >= a
  });
  TG_CHECK(lo_in <= hi_in, "trunc_normal_: no ", dtype_name(t.dtype()), " value lies in [", a, ", ", b, "]");
  Generator& g = gen ? *gen : default_generator();
  const double alpha = (a - mean) / std, beta = (b - mean) / std;  // the standardised window
  const double width = (b - a) / std;  // not beta - alpha, which cancels when the mean is huge
  Tensor u;
  if (alpha < kDeepTail && beta > -kDeepTail && width > kNarrow) {
    // Within reach of the mean: PyTorch's method, a uniform draw between the CDFs at the bounds
    // mapped back through the inverse CDF.
    const double lo = 2.0 * normal_cdf(alpha) - 1.0, hi = 2.0 * normal_cdf(beta) - 1.0;
    u = uniform(t.shape(), lo, hi, DType::Float64, &g);
    double* p = u.data<double>();
    for (int64_t i = 0; i < u.numel(); ++i) p[i] = mean + std * std::sqrt(2.0) * erfinv(p[i]);  // +-inf: clamped
  } else {
    // All of it in one tail, where the CDFs round to 0 or 1 (the draws collapsed onto the near
    // bound past 6.7 std), or a narrow window, where they are too close to tell the draws apart:
    // sampled exactly, as an offset from a bound (a window below the mean from b downwards).
    u = Tensor::empty(t.shape(), DType::Float64);
    double* p = u.data<double>();
    const bool upper = alpha >= kDeepTail, lower = beta <= -kDeepTail;
    // A window infinitely far out in standard units (the bounds over a std that underflows):
    // every value is the near bound, the distribution's limit.
    const bool infinitely_far = (upper || lower) && !std::isfinite(upper ? alpha : beta);
    for (int64_t i = 0; i < u.numel(); ++i) {
      if (infinitely_far)
        p[i] = upper ? a : b;
      else if (upper)
        p[i] = a + std * tail_offset(alpha, width, g);
      else if (lower)
        p[i] = b - std * tail_offset(-beta, width, g);
      else
        p[i] = a + std * narrow_offset(alpha, width, g);
    }
  }
  // Clamped in double to the inward bounds, which the dtype holds exactly, then rounded: no
  // value can round past them.
  double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i) p[i] = std::clamp(p[i], lo_in, hi_in);  // also +-inf
  Tensor r = u.to(t.dtype());
  NoGradGuard no_grad;
  t.copy_(r);
  return t;
}

}  // namespace tg::init
