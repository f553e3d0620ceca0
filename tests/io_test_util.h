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
// several build trees may run at once on one machine), removed when the test program exits
// (every ctest run left nine of them behind).
inline std::string fresh_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  struct RemovedAtExit {
    std::vector<fs::path> dirs;
    ~RemovedAtExit() {
      std::error_code ignored;
      for (const fs::path& d : dirs) fs::remove_all(d, ignored);
    }
  };
  static RemovedAtExit made;
  fs::path p = fs::temp_directory_path() / ("tapegrad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  made.dirs.push_back(p);
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

// (i * scale - 3) in C order, computed in double then cast: the arrays tools/fixtures/io.py
// writes with numpy/torch and the tests rebuild to compare bytes.
inline Tensor formula(const Shape& shape, DType dtype, double scale) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i) * scale - 3;
  return from_vector(v, shape).to(dtype);
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

#include <random>

namespace tg::testing {

// Deterministic corruptions of a valid file: a flipped byte, a byte set to 0x00 or 0xff, a
// truncation, or random bytes inserted. Loaders must turn each into a result or a tg::Error;
// anything else (a crash, std::bad_alloc, a stray std::out_of_range) is a bug.
inline std::vector<std::string> corruptions_of(const std::string& good, uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s = good;
    const size_t at = s.empty() ? 0 : rng() % s.size();
    switch (i % 5) {
      case 0: if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8))); break;
      case 1: if (!s.empty()) s[at] = static_cast<char>((rng() & 1) ? 0xff : 0x00); break;
      case 2: s.resize(at); break;
      case 3: s.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng()))); break;
      case 4:  // the header region, where lengths, dims and dtypes live
        if (s.size() > 1) {
          const size_t h = rng() % std::min<size_t>(s.size(), 128);
          s[h] = static_cast<char>(rng());
        }
        break;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Runs load on every corruption written to `path` (or, with an empty path, on the bytes
// themselves); counts how many loaded and how many threw tg::Error, and fails on any other
// exception.
template <class Load>
void expect_only_tg_errors(const std::vector<std::string>& variants, const std::string& path, Load&& load,
                           int* loaded = nullptr, int* rejected = nullptr) {
  int ok = 0, err = 0;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!path.empty()) write_bytes(path, variants[i]);
    try {
      load(path.empty() ? variants[i] : path);
      ++ok;
    } catch (const Error&) {
      ++err;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "variant " << i << " threw a non-tg::Error: " << e.what();
    }
  }
  if (loaded) *loaded = ok;
  if (rejected) *rejected = err;
}

}  // namespace tg::testing
