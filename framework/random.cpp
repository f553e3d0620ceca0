#include "random.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace tg {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::seed_(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
  has_spare_normal_ = false;
}

uint64_t Generator::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::next_normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u1 = 1.0 - next_double();  // (0, 1]: log is finite
  double u2 = next_double();
  double r = std::sqrt(-2.0 * std::log(u1));
  spare_normal_ = r * std::sin(2.0 * M_PI * u2);
  has_spare_normal_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

Tensor Generator::get_state() const {
  std::vector<int64_t> words(kStateSize);
  std::memcpy(words.data(), s_, sizeof(s_));
  words[4] = has_spare_normal_ ? 1 : 0;
  std::memcpy(&words[5], &spare_normal_, sizeof(double));
  return from_vector(words, {kStateSize});
}

void Generator::set_state(const Tensor& state) {
  TG_CHECK(state.defined() && state.dtype() == DType::Int64 && state.shape() == Shape{kStateSize},
           "Generator.set_state: expected an int64 tensor of shape [", kStateSize, "], got ",
           state.defined() ? dtype_name(state.dtype()) : "an undefined tensor", " ", describe_shape(state));
  const std::vector<int64_t> words = state.to_vector<int64_t>();
  TG_CHECK(words[4] == 0 || words[4] == 1, "Generator.set_state: expected the spare-normal flag (element 4) to be 0 or 1, got ",
           words[4]);
  TG_CHECK(words[0] != 0 || words[1] != 0 || words[2] != 0 || words[3] != 0,
           "Generator.set_state: the four xoshiro words (elements 0 to 3) are all zero, which is not a valid state");
  std::memcpy(s_, words.data(), sizeof(s_));
  has_spare_normal_ = words[4] == 1;
  std::memcpy(&spare_normal_, &words[5], sizeof(double));
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().seed_(seed); }
Tensor get_rng_state() { return default_generator().get_state(); }
void set_rng_state(const Tensor& state) { default_generator().set_state(state); }

namespace {
// The largest value of T below `high`.
template <class T>
T largest_below(double high) {
  T v = static_cast<T>(static_cast<opmath_t<T>>(high));
  while (!(static_cast<double>(v) < high)) v = next_below(v);
  return v;
}

// draw() values rounded to dtype; with a finite `below`, a value that rounds up to it or past
// it is the largest one under it instead (rand and uniform are [low, high) in the dtype too:
// 1 - 2^-10 rounds to a bfloat16 1).
template <class Draw>
Tensor fill_random(const Shape& shape, DType dtype, const char* op, Draw draw,
                   double below = std::numeric_limits<double>::infinity()) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch_all_floating(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    const bool capped = std::isfinite(below);
    const T cap = capped ? largest_below<T>(below) : T(0);
    for (int64_t i = 0; i < t.numel(); ++i) {
      // A 16-bit type rounds the float32 value of the double drawn (twice, as PyTorch rounds).
      const T v = static_cast<T>(static_cast<opmath_t<T>>(draw()));
      p[i] = capped && !(static_cast<double>(v) < below) ? cap : v;
    }
  });
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, DType dtype, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  return fill_random(shape, dtype, "rand", [&] { return g.next_double(); }, 1.0);
}

Tensor randn(const Shape& shape, DType dtype, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  return fill_random(shape, dtype, "randn", [&] { return g.next_normal(); });
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Generator* gen) {
  TG_CHECK(low <= high, "uniform: expected low <= high, got low ", low, " and high ", high);
  // As PyTorch: bounds the dtype holds, and a width within double's range (inf - -inf is NaN,
  // 1e300 - -1e300 inf: every value came out NaN or inf).
  TG_CHECK(std::isfinite(low) && std::isfinite(high) && fits_floating_range(dtype, low) &&
               fits_floating_range(dtype, high),
           "uniform: bounds [", low, ", ", high,
           ") must be finite values of ", dtype_name(dtype));
  TG_CHECK(std::isfinite(high - low), "uniform: expected high - low to be finite, got low ", low, " and high ", high);
  Generator& g = gen ? *gen : default_generator();
  // low == high fills low (PyTorch's uniform_(2, 2)); otherwise [low, high).
  return fill_random(shape, dtype, "uniform", [&] { return low + (high - low) * g.next_double(); },
                     low < high ? high : std::numeric_limits<double>::infinity());
}

Tensor normal(const Shape& shape, double mean, double stddev, DType dtype, Generator* gen) {
  TG_CHECK(stddev >= 0, "normal: expected stddev >= 0, got ", stddev);
  Generator& g = gen ? *gen : default_generator();
  return fill_random(shape, dtype, "normal", [&] { return mean + stddev * g.next_normal(); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  TG_CHECK(low < high, "randint: expected low < high, got low ", low, " and high ", high);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = Tensor::empty(shape, DType::Int64);
  int64_t* p = t.data<int64_t>();
  // In uint64: [INT64_MIN, INT64_MAX) is wider than int64 holds (the signed difference overflowed).
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + g.next_u64() % range);
  return t;
}

Tensor randperm(int64_t n, Generator* gen) {
  TG_CHECK(n >= 0, "randperm: expected n >= 0, got ", n);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = Tensor::empty({n}, DType::Int64);
  int64_t* p = t.data<int64_t>();
  std::iota(p, p + n, int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[g.next_u64() % static_cast<uint64_t>(i + 1)]);
  return t;
}

}  // namespace tg
