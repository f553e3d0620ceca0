// Instruction-set paths (framework/isa.h): detection, forcing a path, and each dispatched
// kernel family giving the generic path's results on every path this CPU has. The whole suite
// also runs once per path (ctest isa_path_*).
#include "isa_test_util.h"
#include "test_util.h"

#include <cstdlib>
#include <iostream>

namespace tg {
namespace {

// A run forced onto a path (TAPEGRAD_ISA, ctest isa_path_*) that this CPU lacks, or that is its
// best path (the main run covers that one), is skipped as a whole: exit code 77, which ctest
// reports as "skipped", with the reason in the test's output.
class IsaPathEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("TAPEGRAD_ISA");
    if (env == nullptr) return;
    for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
      if (std::string(env) == isa_name(isa) && !isa_supported(isa)) {
        std::cout << "skipped: TAPEGRAD_ISA=" << env << " but this CPU (" << cpu_info().model
                  << ") lacks that path\n";
        std::exit(77);
      }
    }
    if (std::string(env) == isa_name(cpu_info().best) && std::getenv("TAPEGRAD_ISA_RERUN_BEST") == nullptr) {
      std::cout << "skipped: TAPEGRAD_ISA=" << env << " is this CPU's best path, which the main run of "
                << "the suite already covers (set TAPEGRAD_ISA_RERUN_BEST=1 to run it anyway)\n";
      std::exit(77);
    }
    std::cout << info() << "\n";
  }
};
const auto* const kIsaPathEnvironment = ::testing::AddGlobalTestEnvironment(new IsaPathEnvironment);

TEST(Isa, InfoNamesTheCpuAndTheActivePath) {
  CpuInfo c = cpu_info();
  EXPECT_FALSE(c.model.empty());
  std::string s = info();
  EXPECT_NE(s.find(c.model), std::string::npos) << s;
  EXPECT_NE(s.find(std::string("kernels ") + isa_name(active_isa())), std::string::npos) << s;
  auto has = [&](const char* f) { return std::find(c.flags.begin(), c.flags.end(), f) != c.flags.end(); };
  if (c.best >= Isa::Avx512) {
    EXPECT_TRUE(has("avx512f") && has("avx512bw") && has("avx512vl"));
  }
  if (isa_supported(Isa::Avx512Bf16)) {
    EXPECT_TRUE(has("avx512_bf16") && has("avx512f"));
  }
  if (c.best >= Isa::Avx2) {
    EXPECT_TRUE(has("avx2") && has("fma"));
  }
  std::cout << s << "\n";
}

TEST(Isa, GenericIsAlwaysSupportedAndPathsAreOrdered) {
  std::vector<Isa> paths = supported_isas();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), Isa::Generic);
  // The default is the highest path, or the one below it when that is Avx512Bf16 on a CPU
  // whose vdpbf16ps is slow (framework/isa.cpp).
  const Isa best = cpu_info().best;
  EXPECT_TRUE(paths.back() == best || (paths.back() == Isa::Avx512Bf16 && best == Isa::Avx512))
      << isa_name(paths.back()) << " " << isa_name(best);
}

// The vendor rule of the README: avx512bf16 is the default on AMD CPUs only (Intel's
// vdpbf16ps is slower than its AVX-512 float32 GEMM); every other top path is its own default.
TEST(Isa, Avx512Bf16IsTheDefaultOnAmdOnly) {
  for (bool amd : {false, true}) {
    EXPECT_EQ(default_isa(Isa::Generic, amd), Isa::Generic);
    EXPECT_EQ(default_isa(Isa::Avx2, amd), Isa::Avx2);
    EXPECT_EQ(default_isa(Isa::Avx512, amd), Isa::Avx512);
  }
  EXPECT_EQ(default_isa(Isa::Avx512Bf16, true), Isa::Avx512Bf16);
  EXPECT_EQ(default_isa(Isa::Avx512Bf16, false), Isa::Avx512);
  // and this machine's default follows it, from its cpuid vendor
  const bool amd = cpu_info().model.find("AMD") != std::string::npos;
  EXPECT_EQ(cpu_info().best, default_isa(supported_isas().back(), amd)) << cpu_info().model;
}

TEST(Isa, GuardSetsAndRestoresThePath) {
  const Isa before = active_isa();
  for (Isa isa : supported_isas()) {
    IsaGuard guard(isa);
    EXPECT_EQ(active_isa(), isa);
  }
  EXPECT_EQ(active_isa(), before);
}

TEST(Isa, UnsupportedPathIsAnError) {
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (isa_supported(isa)) continue;
    std::string msg = error_of([&] { set_isa(isa); });
    EXPECT_NE(msg.find("set_isa: expected a path this CPU and build support"), std::string::npos) << msg;
  }
  if (supported_isas().size() == 4) GTEST_SKIP() << "this CPU supports every path";
}

// Convolutions: 1D/2D/3D, strided, dilated, grouped, depthwise, transposed, ragged sizes, in
// float32 and float64; forward and every gradient.
TEST(IsaPaths, ConvolutionMatchesGeneric) {
  struct Case {
    Shape x, w;
    IntList stride, padding, dilation;
    int64_t groups;
    bool transposed;
  };
  const std::vector<Case> cases = {
      {{2, 8, 17, 19}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},
      {{2, 8, 17, 19}, {16, 8, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
      {{1, 6, 13, 11}, {6, 2, 5, 3}, {1, 2}, {2, 1}, {2, 1}, 3, false},
      {{2, 12, 9, 9}, {12, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 12, false},
      {{2, 5, 31}, {7, 5, 5}, {1}, {2}, {1}, 1, false},
      {{1, 4, 5, 6, 7}, {3, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, false},
      {{2, 8, 7, 9}, {8, 4, 4, 4}, {2, 2}, {1, 1}, {1, 1}, 1, true},
      {{2, 3, 1, 1}, {5, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE("x " + format_shape(c.x) + " w " + format_shape(c.w) + " " + dtype_name(dt));
      manual_seed(7);
      Tensor x = randn(c.x, dt), w = randn(c.w, dt);
      const int64_t out_ch = c.transposed ? c.w[1] * c.groups : c.w[0];
      Tensor b = randn({out_ch}, dt);
      testing::expect_same_on_every_isa(
          [&] {
            Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_(),
                   bi = b.detach().requires_grad_();
            IntList out_pad(c.stride.size(), c.transposed ? 1 : 0);
            Tensor y = convolution(xi, wi, bi, c.stride, c.padding, c.dilation, c.transposed, out_pad, c.groups);
            sum(y * y).backward();
            return std::vector<Tensor>{y, xi.grad(), wi.grad(), bi.grad()};
          },
          dt == DType::Float32 ? 2e-5 : 1e-12);
    }
  }
}

}  // namespace
}  // namespace tg
