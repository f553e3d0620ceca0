// Instruction sets: which vector path the kernels take on this CPU, chosen at run time.
//
// The library is built for a portable baseline (x86-64-v2 unless TAPEGRAD_NATIVE=ON), and its
// hot kernels are compiled a second and third time for AVX2+FMA (x86-64-v3) and for AVX-512
// with 512-bit vectors (x86-64-v4); kernels that use AVX512-BF16 instructions (the bf16 GEMM)
// have one more copy for that level. The first kernel call picks the best path this CPU and OS
// support, once. TAPEGRAD_ISA=generic|avx2|avx512|avx512bf16 forces one (a path
// the CPU lacks is a tg::Error at that first call), and set_isa / IsaGuard switch it in a
// program, e.g. a test that runs a kernel on every path.
//
// Results: on one path a kernel gives the same bits from run to run and for any thread count.
// Different paths may round differently (vector width changes the order of sums; FMA fuses a
// multiply and an add), within a few float ulps of a sum's magnitude.
#pragma once

#include <string>
#include <vector>

namespace tg {

enum class Isa {
  Generic,  // the baseline the library is built for (x86-64-v2: SSE4.2)
  Avx2,     // x86-64-v3: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE
  Avx512,   // x86-64-v4: AVX-512 F/BW/CD/DQ/VL, 512-bit vectors
  Avx512Bf16,  // Avx512 plus AVX512_BF16 (vdpbf16ps): the bf16 GEMM has its own kernel here,
               // every other kernel runs its Avx512 copy
};

// "generic", "avx2", "avx512", "avx512bf16".
const char* isa_name(Isa isa);

// The path kernels take now: set_isa's, else TAPEGRAD_ISA's, else the best supported one.
// Throws tg::Error when TAPEGRAD_ISA names an unknown or unsupported path.
Isa active_isa();

// The paths this build and this CPU can run, from Generic up. The default (CpuInfo::best) is
// the highest of them, except Avx512Bf16 on CPUs where its bf16 GEMM is slower than the AVX-512
// float32 one (Intel's, see isa.cpp): forced with TAPEGRAD_ISA / set_isa there.
std::vector<Isa> supported_isas();
bool isa_supported(Isa isa);

// That rule: the default path of a CPU whose highest supported path is `top`. It is `top`,
// except Avx512Bf16 on a CPU that is not AMD's, which defaults to Avx512 (CpuInfo::best is
// default_isa(the highest supported path, the cpuid vendor is AuthenticAMD)).
Isa default_isa(Isa top, bool amd_cpu);

// Makes `isa` the path of every later kernel call in the process (all threads). Throws
// tg::Error if this CPU or build cannot run it.
void set_isa(Isa isa);

// Sets a path for a scope and restores the previous one.
class IsaGuard {
 public:
  explicit IsaGuard(Isa isa);
  ~IsaGuard();
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa previous_;
};

// What the machine is: the CPU's name (cpuid brand string), the vector features the kernels
// care about, the best path and the active one.
struct CpuInfo {
  std::string model;
  std::vector<std::string> flags;  // e.g. "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"
  Isa best = Isa::Generic;
  Isa active = Isa::Generic;
  bool native_build = false;       // built with TAPEGRAD_NATIVE=ON (-march=native)
};
CpuInfo cpu_info();

// One paragraph for logs and benchmark tables, e.g.
//   tapegrad 0.1.0: CPU Intel(R) Xeon(R) Processor; flags sse4_2 avx avx2 fma avx512f ...;
//   kernels avx512 (best avx512, supported generic avx2 avx512); OpenMP 2 threads
std::string info();

}  // namespace tg
