// CLI11 validators for the examples' numeric flags, with messages a user can act on. CLI11's
// own let NaN through a NonNegativeNumber (`--clip nan` turned clipping off), say "Value 0 not
// in range 0.000000 to 17976931348623157..." for `--epochs 0` and "not in range" for `--lr abc`, and
// its integer conversion clamps an overflowing value (`--seed 99999999999999999999` became
// 2^64 - 1) and wraps a negative one into an unsigned flag (`--seed -2`). CLI11 prints a
// validator's message after the flag's name:
//
//   --epochs: expected a whole number in [1, 100000], got 0
//   --lr: expected a number, got abc
//   --clip: expected a finite number >= 0, got nan
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace tg::examples {

namespace detail {

// "-12", "0", "345": an optional minus sign and decimal digits, nothing else. CLI11 converts with
// strtoull(s, 0), which reads "0x10" as hex and "-1" as 2^64 - 1.
inline bool is_whole_number_text(const std::string& s) {
  const size_t first = !s.empty() && s[0] == '-' ? 1 : 0;
  if (s.size() == first) return false;
  for (size_t i = first; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// "010", which strtoull(s, 0) reads as octal 8. (A validator cannot rewrite the text it checks,
// Option::check makes it non-modifying, so such a number is refused rather than read as 10.)
inline bool has_leading_zero(const std::string& s) {
  const size_t first = !s.empty() && s[0] == '-' ? 1 : 0;
  return s.size() > first + 1 && s[first] == '0';
}

template <class T>
std::string whole_range_text(T lo, T hi) {
  if (hi == std::numeric_limits<T>::max()) return ">= " + std::to_string(lo);
  return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace detail

// A whole number in [lo, hi], written in decimal without leading zeros. A value beyond T (an
// int, a uint64_t) is refused, never clamped, and a negative one never wraps.
template <class T>
CLI::Validator whole_number(T lo, T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T>, "whole_number: an integer type");
  auto check = [lo, hi](const std::string& s) -> std::string {
    if (!detail::is_whole_number_text(s))
      return "expected a whole number " + detail::whole_range_text(lo, hi) + ", got " + s;
    if (detail::has_leading_zero(s))
      return "expected a whole number " + detail::whole_range_text(lo, hi) + " without a leading 0 (octal), got " + s;
    T value{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    // Out of T's range, or a minus sign for an unsigned T (from_chars refuses it).
    const bool too_small = ec == std::errc() ? value < lo : s[0] == '-';
    const bool too_big = ec == std::errc() ? value > hi : s[0] != '-';
    if (too_big && hi == std::numeric_limits<T>::max())  // ">= lo" would not explain the refusal
      return "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s;
    if (too_small || too_big || end != s.data() + s.size())
      return "expected a whole number " + detail::whole_range_text(lo, hi) + ", got " + s;
    return {};
  };
  return CLI::Validator(check, "WHOLE " + detail::whole_range_text(lo, hi));
}

namespace detail {

// The number s spells (all of it, no surrounding spaces), or false. strtod also reads "nan",
// "inf" and hex floats; the callers decide about the non-finite ones.
inline bool parse_number(const std::string& s, double& value) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

inline CLI::Validator finite_number_above(double lo, bool allow_lo, const std::string& range) {
  auto check = [lo, allow_lo, range](const std::string& s) -> std::string {
    double value = 0;
    if (!parse_number(s, value)) return "expected a number, got " + s;
    if (!std::isfinite(value) || value < lo || (value == lo && !allow_lo))
      return "expected a finite number " + range + ", got " + s;
    return {};
  };
  return CLI::Validator(check, "NUMBER " + range);
}

}  // namespace detail

// A finite number > 0 (a learning rate): NaN and infinities are refused.
inline CLI::Validator positive_number() { return detail::finite_number_above(0.0, false, "> 0"); }

// A finite number >= 0 (a weight decay; a clipping norm, where 0 turns clipping off).
inline CLI::Validator non_negative_number() { return detail::finite_number_above(0.0, true, ">= 0"); }

}  // namespace tg::examples
