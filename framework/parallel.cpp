#include "parallel.h"

#include <omp.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <xmmintrin.h>
#define TG_HAVE_MXCSR 1
#endif

#include "check.h"

namespace tg {

int num_threads() { return omp_get_max_threads(); }

namespace {

#ifdef TG_HAVE_MXCSR
constexpr unsigned kFlushToZero = 1u << 15;       // MXCSR.FTZ
constexpr unsigned kDenormalsAreZero = 1u << 6;   // MXCSR.DAZ

// DAZ exists when the MXCSR_MASK saved by FXSAVE has bit 6 set (Intel SDM vol. 1, 11.6.3); every
// x86-64 CPU since the Pentium 4's second stepping has it. Setting it where it is missing would
// fault, so check once.
bool cpu_has_daz() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24))) return false;  // no FXSR
  alignas(16) unsigned char area[512] = {};
  __builtin_ia32_fxsave(area);
  unsigned mask = 0;
  __builtin_memcpy(&mask, area + 28, sizeof mask);
  if (mask == 0) mask = 0xFFBF;  // a zero mask means the default, which lacks DAZ
  return (mask & kDenormalsAreZero) != 0;
}

void set_this_thread(bool on) {
  const unsigned bits = kFlushToZero | kDenormalsAreZero;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(on ? (csr | bits) : (csr & ~bits));
}
#endif

// Run set_this_thread on the calling thread and on every worker of an OpenMP team of n threads.
// libgomp keeps its workers, so a team of n reaches the same threads later regions use.
void set_all_threads(bool on, int n) {
#ifdef TG_HAVE_MXCSR
  set_this_thread(on);
#pragma omp parallel num_threads(n)
  set_this_thread(on);
#else
  (void)on;
  (void)n;
#endif
}

// The most threads set_num_threads accepts (parallel.h says 4096). libgomp creates a team's
// threads, each with its own stack, when a region first asks for them and sets no limit of its
// own: 16384 threads took 22 GB, 100000 crashed inside libgomp and 2^31 - 1 died of its
// out-of-memory message, none of them an error the caller could report. 4096 is more than
// twice the hardware threads of the largest shared-memory x86 servers (32 sockets of 28 cores:
// 1792), so no real machine is refused, and an absurd count is a tg::Error before OpenMP sees it.
constexpr int kMaxThreads = 4096;

std::atomic<bool> flush_denormal_on{false};  // what the last successful set_flush_denormal asked for

}  // namespace

void set_num_threads(int n) {
  TG_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: expected a thread count in [1, ", kMaxThreads, "], got ", n);
  omp_set_num_threads(n);
  // New workers are created by the thread that opens the region and inherit its MXCSR, but a
  // region opened from another thread would not give them ours: set them all explicitly.
  if (flush_denormal_on) set_all_threads(true, n);
}

bool set_flush_denormal(bool on) {
#ifdef TG_HAVE_MXCSR
  static const bool supported = cpu_has_daz();
  if (!supported) return false;
  set_all_threads(on, omp_get_max_threads());
  flush_denormal_on = on;
  return true;
#else
  (void)on;
  return false;
#endif
}

int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

}  // namespace tg
