// Helpers shared by the io tests (npy, safetensors): temp folders, raw file bytes, and
// checking that a call throws tg::Error with a message that says what went wrong.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "golden.h"

namespace tg::testing {

// A fresh, empty folder for one test under the system temp dir (pid-suffixed: tests of
// several build trees may run at once on one machine).
inline std::string fresh_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("tapegrad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs fn and expects a tg::Error whose message contains every piece.
template <class Fn>
void expect_error_with(Fn&& fn, const std::vector<std::string>& pieces) {
  try {
    fn();
    ADD_FAILURE() << "expected a tg::Error containing '" << pieces.front() << "'";
  } catch (const Error& e) {
    for (const auto& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what();
  }
}

// Bitwise equality of two tensors' shapes, dtypes and C-order contents.
inline void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = static_cast<size_t>(ca.numel()) * dtype_size(ca.dtype());
  if (n == 0) return;
  const char* pa = static_cast<const char*>(static_cast<const void*>(ca.impl()->storage->data())) +
                   ca.offset() * dtype_size(ca.dtype());
  const char* pb = static_cast<const char*>(static_cast<const void*>(cb.impl()->storage->data())) +
                   cb.offset() * dtype_size(cb.dtype());
  EXPECT_EQ(std::string(pa, n), std::string(pb, n)) << what << ": contents differ";
}

}  // namespace tg::testing
