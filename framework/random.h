// Random numbers. One seedable generator stream, consumed serially, so the numbers a program
// draws never depend on the thread count.
#pragma once

#include <cstdint>

#include "tensor.h"

namespace tg {

// xoshiro256**: small, fast, and good enough for initialisation, dropout and data shuffling.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_(seed); }
  void seed_(uint64_t seed);
  uint64_t next_u64();
  double next_double();  // uniform in [0, 1)
  double next_normal();  // standard normal (Box-Muller)

 private:
  uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds the default generator

Tensor rand(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr);  // N(0, 1)
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::Float32, Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double stddev, DType dtype = DType::Float32, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);  // int64 in [low, high)
Tensor randperm(int64_t n, Generator* gen = nullptr);                                       // int64

}  // namespace tg
