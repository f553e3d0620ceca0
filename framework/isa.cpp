#include "isa.h"

#include "check.h"

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tg {

namespace {

// What cpuid (and the OS, through XCR0) says this CPU can do.
struct Features {
  std::string model;
  std::vector<std::string> flags;
  bool v3 = false;  // x86-64-v3 complete and AVX state enabled by the OS
  bool v4 = false;  // x86-64-v4 complete and AVX-512 state enabled by the OS
  bool bf16 = false;  // v4 and AVX512_BF16 (cpuid 7.1 EAX bit 5)
  bool amd = false;   // vendor "AuthenticAMD"
};

#if defined(__x86_64__)
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

Features detect() {
  Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  {
    char vendor[13] = {};
    __get_cpuid(0, &a, &b, &c, &d);
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  }
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    f.model = brand;
    size_t first = f.model.find_first_not_of(' ');
    f.model = first == std::string::npos ? "" : f.model.substr(first);
  }
  if (f.model.empty()) f.model = "unknown x86-64";
  unsigned c1 = 0, d1 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, c81 = 0;
  if (max_leaf >= 1) __get_cpuid(1, &a, &b, &c1, &d1);
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b7, &c7, &d7);
    __get_cpuid_count(7, 1, &a71, &b, &c, &d);
  }
  if (max_ext >= 0x80000001u) __get_cpuid(0x80000001u, &a, &b, &c81, &d);
  // XCR0: which register states the OS saves. AVX needs XMM|YMM (bits 1, 2); AVX-512 also
  // needs the opmask and the upper ZMM states (bits 5, 6, 7).
  uint64_t xcr0 = 0;
  if (bit(c1, 27)) {  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  struct Flag {
    const char* name;
    bool has;
  };
  const Flag flags[] = {
      {"sse4_2", bit(c1, 20)},       {"popcnt", bit(c1, 23)},       {"avx", bit(c1, 28) && os_avx},
      {"avx2", bit(b7, 5) && os_avx}, {"fma", bit(c1, 12) && os_avx}, {"f16c", bit(c1, 29)},
      {"bmi1", bit(b7, 3)},          {"bmi2", bit(b7, 8)},          {"lzcnt", bit(c81, 5)},
      {"movbe", bit(c1, 22)},        {"avx512f", bit(b7, 16) && os_avx512},
      {"avx512dq", bit(b7, 17) && os_avx512},   {"avx512cd", bit(b7, 28) && os_avx512},
      {"avx512bw", bit(b7, 30) && os_avx512},   {"avx512vl", bit(b7, 31) && os_avx512},
      {"avx512_vnni", bit(c7, 11) && os_avx512}, {"avx512_bf16", bit(a71, 5) && os_avx512},
      {"avx512_fp16", bit(d7, 23) && os_avx512}, {"amx_bf16", bit(d7, 22)},
      {"amx_tile", bit(d7, 24)},     {"amx_int8", bit(d7, 25)},
  };
  auto has = [&](const char* name) {
    for (const Flag& fl : flags)
      if (std::strcmp(fl.name, name) == 0) return fl.has;
    return false;
  };
  for (const Flag& fl : flags)
    if (fl.has) f.flags.push_back(fl.name);
  const bool v2 = has("sse4_2") && has("popcnt");
  f.v3 = v2 && has("avx2") && has("fma") && has("f16c") && has("bmi1") && has("bmi2") &&
         has("lzcnt") && has("movbe");
  f.v4 = f.v3 && has("avx512f") && has("avx512dq") && has("avx512cd") && has("avx512bw") &&
         has("avx512vl");
  f.bf16 = f.v4 && has("avx512_bf16");
  return f;
}
#else
Features detect() {
  Features f;
  f.model = "non-x86-64 CPU";
  return f;
}
#endif

const Features& features() {
  static const Features f = detect();
  return f;
}

// Whether this build holds the AVX2 / AVX-512 copies of the kernels (CMake: x86-64 targets).
#if defined(TAPEGRAD_ISA_X86)
constexpr bool kBuiltX86 = true;
#else
constexpr bool kBuiltX86 = false;
#endif
// Whether it holds the AVX512-BF16 kernels (the compiler knew -mavx512bf16).
#if defined(TAPEGRAD_ISA_AVX512BF16)
constexpr bool kBuiltBf16 = true;
#else
constexpr bool kBuiltBf16 = false;
#endif

constexpr Isa kAllIsas[] = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16};

// The highest path this CPU and build can run.
Isa top_isa() {
  if (kBuiltX86 && kBuiltBf16 && features().bf16) return Isa::Avx512Bf16;
  if (kBuiltX86 && features().v4) return Isa::Avx512;
  if (kBuiltX86 && features().v3) return Isa::Avx2;
  return Isa::Generic;
}

// The path taken by default: the highest, except that Avx512Bf16 is taken by default only on
// AMD CPUs. Its one kernel of its own, the vdpbf16ps bf16 GEMM, is slower than the AVX-512
// float32 kernel on the Intel CPUs that have AVX512_BF16 (measured on a Xeon with
// AVX512_BF16/FP16, issue 23: 2.3x the time per k in the micro-kernel, 1.75x on a 1024^3
// product), whose fast bf16 unit is AMX; Zen 4 executes vdpbf16ps at its FMA rate with two
// products per lane: on an AMD EPYC (Zen 4) a bf16 1024^3 product takes 11.3-11.5 ms on this
// path against 20.9-21.0 on Avx512 (186 against 102 GFLOP/s, one thread; the linear layer's
// forward + backward 17.2-17.7 against 31.6-33.9 ms). A fixed rule from cpuid, so the path (and
// the bits) never depend on a timing. TAPEGRAD_ISA=avx512bf16 or set_isa chooses it anywhere it
// runs.
Isa best_isa() { return default_isa(top_isa(), features().amd); }

std::string supported_list() {
  std::string s;
  for (Isa isa : supported_isas()) s += std::string(s.empty() ? "" : ", ") + isa_name(isa);
  return s;
}

Isa isa_from_environment() {
  const char* env = std::getenv("TAPEGRAD_ISA");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return best_isa();
  for (Isa isa : kAllIsas) {
    if (std::strcmp(env, isa_name(isa)) != 0) continue;
    TG_CHECK(isa_supported(isa), "TAPEGRAD_ISA: expected a path this CPU and build support (",
             supported_list(), "), got '", env, "' on ", features().model);
    return isa;
  }
  TG_ERROR("TAPEGRAD_ISA: expected one of auto, generic, avx2, avx512, avx512bf16, got '", env, "'");
}

// -1 until the first call decides; then the active path. Relaxed: every thread reads the same
// value once set, and a kernel reads it once per call.
std::atomic<int> g_active{-1};

}  // namespace

Isa default_isa(Isa top, bool amd_cpu) { return top == Isa::Avx512Bf16 && !amd_cpu ? Isa::Avx512 : top; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512bf16";
  }
  return "unknown";
}

bool isa_supported(Isa isa) { return int(isa) <= int(top_isa()); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa active_isa() {
  int v = g_active.load(std::memory_order_relaxed);
  if (v >= 0) return Isa(v);
  Isa chosen = isa_from_environment();  // throws on a bad TAPEGRAD_ISA; nothing is stored then
  int expected = -1;
  g_active.compare_exchange_strong(expected, int(chosen), std::memory_order_relaxed);
  return Isa(g_active.load(std::memory_order_relaxed));
}

void set_isa(Isa isa) {
  TG_CHECK(isa_supported(isa), "set_isa: expected a path this CPU and build support (",
           supported_list(), "), got ", isa_name(isa), " on ", features().model);
  g_active.store(int(isa), std::memory_order_relaxed);
}

IsaGuard::IsaGuard(Isa isa) : previous_(active_isa()) { set_isa(isa); }
IsaGuard::~IsaGuard() { g_active.store(int(previous_), std::memory_order_relaxed); }

CpuInfo cpu_info() {
  CpuInfo info;
  info.model = features().model;
  info.flags = features().flags;
  info.best = best_isa();
  info.active = active_isa();
#if defined(TAPEGRAD_NATIVE_BUILD)
  info.native_build = true;
#endif
  return info;
}

std::string info() {
  CpuInfo c = cpu_info();
  std::ostringstream s;
  s << "tapegrad " << TAPEGRAD_VERSION_STRING << ": CPU " << c.model << "; flags";
  for (const std::string& f : c.flags) s << ' ' << f;
  s << "; kernels " << isa_name(c.active) << " (best " << isa_name(c.best) << ", supported "
    << supported_list() << (c.native_build ? ", built with -march=native" : "") << "); OpenMP "
    << omp_get_max_threads() << " thread" << (omp_get_max_threads() == 1 ? "" : "s");
  return s.str();
}

}  // namespace tg
