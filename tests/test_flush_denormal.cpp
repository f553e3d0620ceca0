// tg::set_flush_denormal: denormal inputs read as zero and denormal results become zero, in the
// calling thread and in every OpenMP worker (MXCSR is per thread), and turning it off restores
// IEEE behaviour.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

// Restores the default (off) and the thread count whatever a test does.
struct FlushDenormalReset {
  int threads = tg::num_threads();
  ~FlushDenormalReset() {
    tg::set_flush_denormal(false);
    tg::set_num_threads(threads);
  }
};

// Halving the smallest normal float gives a denormal unless results are flushed. volatile keeps
// the compiler from folding it at compile time.
float halve_smallest_normal() {
  volatile float x = std::numeric_limits<float>::min();
  return x * 0.5f;
}

// What every thread of a team of n sees.
std::vector<float> halved_in_each_thread(int n) {
  std::vector<float> seen(n, -1.0f);
#pragma omp parallel num_threads(n)
  seen[omp_get_thread_num()] = halve_smallest_normal();
  return seen;
}

bool is_denormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL; }

// Off by default, as in PyTorch (README): after the library has run kernels on the threads,
// denormals still appear in the calling thread and in the workers (every test that turns it
// on turns it off again, so this holds in a whole-suite run too).
TEST(FlushDenormal, IsOffByDefault) {
  tg::Tensor a = tg::randn({64, 64});
  tg::matmul(a, a);  // the library's kernels and its OpenMP team have run
  EXPECT_TRUE(is_denormal(halve_smallest_normal()));
  for (float v : halved_in_each_thread(2)) EXPECT_TRUE(is_denormal(v));
}

TEST(FlushDenormal, FlushesInTheCallingThreadAndEveryWorker) {
  FlushDenormalReset reset;
  tg::set_num_threads(2);
  ASSERT_TRUE(tg::set_flush_denormal(true)) << "every x86-64 CPU this project runs on has DAZ";
  EXPECT_EQ(halve_smallest_normal(), 0.0f);
  for (float v : halved_in_each_thread(2)) EXPECT_EQ(v, 0.0f);

  tg::set_flush_denormal(false);
  EXPECT_TRUE(is_denormal(halve_smallest_normal()));
  for (float v : halved_in_each_thread(2)) EXPECT_TRUE(is_denormal(v));
}

TEST(FlushDenormal, ReachesWorkersAddedLaterAndThreadsStartedLater) {
  FlushDenormalReset reset;
  tg::set_num_threads(1);
  ASSERT_TRUE(tg::set_flush_denormal(true));
  tg::set_num_threads(4);  // more workers than the first team had
  for (float v : halved_in_each_thread(4)) EXPECT_EQ(v, 0.0f);
  float in_thread = -1.0f;
  std::thread([&] { in_thread = halve_smallest_normal(); }).join();
  EXPECT_EQ(in_thread, 0.0f);
}

TEST(FlushDenormal, AppliesToKernelsAndDenormalInputs) {
  FlushDenormalReset reset;
  tg::set_num_threads(2);
  // Large enough for the kernel to split it across threads.
  const int64_t n = 4 * tg::kParallelGrain;
  const float denormal = std::numeric_limits<float>::denorm_min() * 1000.0f;
  tg::Tensor x = tg::full({n}, denormal);
  ASSERT_TRUE(tg::set_flush_denormal(true));
  tg::Tensor y = tg::mul(x, 2.0);  // DAZ: the denormal input reads as zero
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  tg::set_flush_denormal(false);
  y = tg::mul(x, 2.0);
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, denormal * 2.0f);
}

}  // namespace
