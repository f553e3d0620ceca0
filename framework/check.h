// tg::Error and the TG_CHECK macro: every user-facing function validates its inputs with them.
// Messages follow PyTorch's style and name the op, the argument, what was expected and what
// was given: "conv2d: expected weight to have 4 dims, got [64, 3, 3]".
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {

inline void stream_all(std::ostream&) {}
template <class First, class... Rest>
void stream_all(std::ostream& os, const First& first, const Rest&... rest) {
  os << first;
  stream_all(os, rest...);
}

template <class... Args>
[[noreturn]] void throw_error(const Args&... args) {
  std::ostringstream os;
  stream_all(os, args...);
  throw Error(os.str());
}

}  // namespace detail

// "[2, 3, 4]": how shapes and integer lists appear in every message.
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace tg

// TG_CHECK(cond, "op: expected ...", value, "...") throws tg::Error with the pieces streamed
// together when cond is false. The pieces are only evaluated on failure.
#define TG_CHECK(cond, ...)                      \
  do {                                           \
    if (!(cond)) ::tg::detail::throw_error(__VA_ARGS__); \
  } while (0)

#define TG_ERROR(...) ::tg::detail::throw_error(__VA_ARGS__)
