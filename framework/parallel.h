// Thread control. Kernels use OpenMP directly; these are the knobs users and benchmarks turn,
// and the two helpers kernels share to plan their work split.
#pragma once

#include <cstdint>

namespace tg {

// Below this many elements of work a kernel runs serially: opening an OpenMP region costs
// microseconds, more than a small loop.
constexpr int64_t kParallelGrain = 32768;

int num_threads();               // threads an OpenMP region will use
void set_num_threads(int n);     // like torch.set_num_threads; 1 <= n <= 4096, else tg::Error

// Like torch.set_flush_denormal: with on, float arithmetic treats denormal (subnormal) inputs as
// zero and flushes denormal results to zero (x86's DAZ and FTZ bits of MXCSR), which avoids
// the 10-100x slower microcode path some CPUs take for them; results change only where a value
// below 2^-126 (float) or 2^-1022 (double) would appear. MXCSR is per thread, so this sets the
// calling thread and every OpenMP worker, and threads started afterwards inherit it (the
// DataLoader's prefetch thread, workers added by set_num_threads); other threads the program
// already runs keep theirs. Returns whether the CPU supports it (false, and nothing changes, on
// a CPU without SSE denormals-are-zero). Off by default, as in PyTorch.
bool set_flush_denormal(bool on);

// The threads a parallel region opened here would actually get, for a kernel sizing its work
// split: num_threads() outside any parallel region, 1 inside one (we never nest, so a kernel
// called from a parallel loop runs serially and should not cut its work for idle threads).
int max_threads();

// ceil(a / b) for a >= 0 and b > 0: how many blocks of b cover a elements. (Not (a + b - 1) / b,
// which overflows for a near 2^63.)
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace tg
