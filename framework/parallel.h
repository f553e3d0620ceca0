// Thread control. Kernels use OpenMP directly; these are the knobs users and benchmarks turn.
#pragma once

#include <cstdint>

namespace tg {

// Below this many elements of work a kernel runs serially: opening an OpenMP region costs
// microseconds, more than a small loop.
constexpr int64_t kParallelGrain = 32768;

int num_threads();               // threads an OpenMP region will use
void set_num_threads(int n);     // like torch.set_num_threads; n >= 1

}  // namespace tg
