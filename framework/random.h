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

  // The whole state as an int64 tensor of kStateSize elements: the four xoshiro words, whether a
  // spare normal is waiting (0 or 1) and that normal's bits. What a checkpoint stores: a
  // generator given it back draws exactly the numbers the original would have drawn next.
  // (PyTorch's Generator.get_state/set_state, which use a uint8 tensor.)
  static constexpr int64_t kStateSize = 6;
  Tensor get_state() const;
  // Throws tg::Error (and changes nothing) unless `state` is an int64 tensor of shape [6] whose
  // flag is 0 or 1 and whose words are not all zero (xoshiro's one invalid state).
  void set_state(const Tensor& state);

 private:
  uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds the default generator
// The default generator's state (PyTorch's torch.get_rng_state / torch.set_rng_state).
Tensor get_rng_state();
void set_rng_state(const Tensor& state);

// U[0, 1) and U[low, high) hold in the dtype too: a draw that rounds up to the upper bound is
// the largest value below it instead. uniform's bounds must be finite values of the dtype with
// a finite difference (as PyTorch); low == high fills low.
Tensor rand(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr);  // N(0, 1)
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::Float32, Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double stddev, DType dtype = DType::Float32, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);  // int64 in [low, high)
Tensor randperm(int64_t n, Generator* gen = nullptr);                                       // int64

}  // namespace tg
