// What the tests of the native 16-bit kernels share (test_half_kernels.cpp,
// test_half_kernels_sampling.cpp): random 16-bit inputs, their exact widening to float, and the
// comparison of a 16-bit kernel's result with the float32 kernel's result rounded once.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::testing {

// One ulp of the 16-bit type relative to a value in [1, 2): 2^-7 for bfloat16, 2^-10 for float16.
template <class H>
inline double ulp_fraction() { return std::is_same_v<H, BFloat16> ? 1.0 / 128 : 1.0 / 1024; }

// n values offset + scale * N(0, 1), rounded to H.
template <class H>
std::vector<H> random_half(int64_t n, uint64_t seed, double scale = 1.0, double offset = 0.0) {
  Generator gen(seed);
  std::vector<double> d = randn({n}, DType::Float64, &gen).to_vector<double>();
  std::vector<H> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = H(static_cast<float>(offset + scale * d[i]));
  return out;
}

template <class H>
std::vector<float> widen(const std::vector<H>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Position of a 16-bit pattern on the number line (sign-magnitude to ordered integer; both
// zeros at 0): neighbours differ by 1.
inline int ordinal(uint16_t b) { return (b & 0x8000) ? -static_cast<int>(b & 0x7fff) : static_cast<int>(b); }

// got (16-bit) within 1 ulp of ref (float) rounded once to H, elementwise, or within abs_floor
// of ref (for results that are the rounding noise of a cancellation, see grad_x below).
template <class H>
void expect_within_one_ulp(const std::vector<H>& got, const std::vector<float>& ref, const std::string& what,
                           double abs_floor = 0) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int worst = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const H r(ref[k]);
    const float g = got[k];
    if (std::isnan(g) || std::isnan(static_cast<float>(r))) {
      if (std::isnan(g) != std::isnan(static_cast<float>(r)) && bad++ == 0) first_bad = k;
      continue;
    }
    const int d = std::abs(ordinal(got[k].bits) - ordinal(r.bits));
    if (std::fabs(static_cast<double>(g) - ref[k]) <= abs_floor) continue;
    worst = std::max(worst, d);
    if (d > 1 && bad++ == 0) first_bad = k;
  }
  EXPECT_EQ(bad, 0u) << what << ": worst " << worst << " ulps; first at " << first_bad << ": got "
                     << static_cast<float>(got[first_bad]) << ", float32 kernel " << ref[first_bad];
}

}  // namespace tg::testing
