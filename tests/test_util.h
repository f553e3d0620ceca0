// Small helpers every test file uses: the message of the tg::Error a call throws, and
// bit-for-bit tensor equality (NaN included, which == would not accept).
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::testing {

// The what() of the tg::Error fn throws, or "<no error>".
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Same shape and the same bits in every element (compared as float64, exact for f32 and f64).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape()) return false;
  std::vector<double> x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

}  // namespace tg::testing

namespace tg {
using testing::error_of;
using testing::same_bits;
}  // namespace tg
