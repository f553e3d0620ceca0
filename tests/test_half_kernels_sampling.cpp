// The native 16-bit kernels of grid_sample (forward and first-order backward, every mode, padding
// and align_corners; ops/grid_sample/grid_sample_kernels.h) and of multi-scale deformable
// attention (forward and backward; ops/ms_deform_attn/ms_deform_attn_kernels.h) in T = BFloat16
// and Float16, against the float32 kernel run on the same 16-bit-exact inputs (widened to float,
// which is exact) with each output rounded once to the 16-bit type: what the bindings computed
// before these kernels existed, and what PyTorch's CPU rule asks for.
//
// Tolerance: 1 ulp of the 16-bit type, elementwise (half_kernel_test_util.h). The 16-bit kernels
// run the float32 arithmetic itself on the widened values (same order of summation, gradients
// summed in float32 and rounded once), so today they give the rounded float32 result bit for
// bit; the ulp leaves room for the compiler contracting a multiply-add differently in the two
// instantiations of the AVX2 / AVX-512 copies (a float result an ulp away can round to the
// neighbouring 16-bit value, never further).
//
// The shapes reach every work split: grid_sample's fused and split backward passes, and MSDA's
// per-slice copies, its uncopied path (one head) and its chunked grad_value (fewer than 8 slices),
// each at one and two threads (the bits must not depend on the thread count). Cross-path
// (expect_same_on_every_isa): one 16-bit ulp of the largest value, as in test_half_kernels.cpp.
#include "half_kernel_test_util.h"
#include "isa_test_util.h"
#include "test_util.h"

#include <tapegrad/ops/grid_sample/grid_sample_kernels.h>
#include <tapegrad/ops/ms_deform_attn/ms_deform_attn_kernels.h>

#include <array>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace tg {
namespace {

using kernels::GridSampleMode;
using kernels::GridSamplePadding;
using testing::expect_within_one_ulp;
using testing::random_half;
using testing::ulp_fraction;
using testing::widen;

// Runs fn at one thread and at two, checks both give the same bits, and returns the result.
template <class Fn>
auto at_one_and_two_threads(Fn&& fn) {
  const int saved = num_threads();
  set_num_threads(1);
  auto one = fn();
  set_num_threads(2);
  auto two = fn();
  set_num_threads(saved);
  EXPECT_TRUE(one == two) << "the result depends on the thread count";
  return one;
}

// The bits of a 16-bit vector (so that == compares bits, NaN included).
template <class H>
std::vector<uint16_t> bits_of(const std::vector<H>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t k = 0; k < v.size(); ++k) b[k] = v[k].bits;
  return b;
}

// ----- grid_sample -----

struct GsCase {
  int64_t N, C, H, W, Ho, Wo;
};

const std::vector<GsCase> kGsCases = {
    {1, 3, 5, 7, 4, 6},      // small, odd channel count (the single-channel step)
    {2, 4, 9, 8, 11, 10},    // fused backward at 1 and 2 threads
    {3, 5, 16, 16, 24, 20},  // N = 3: split passes at 2 threads
    {4, 8, 32, 32, 48, 48},  // more than one block of positions (kBlock = 2048)
};

template <class T>
struct GsOut {
  std::vector<T> out, grad_input, grad_grid;
  bool operator==(const GsOut& o) const {
    if constexpr (std::is_same_v<T, float>)
      return out == o.out && grad_input == o.grad_input && grad_grid == o.grad_grid;
    else
      return bits_of(out) == bits_of(o.out) && bits_of(grad_input) == bits_of(o.grad_input) &&
             bits_of(grad_grid) == bits_of(o.grad_grid);
  }
};

// want: 0 both gradients, 1 grad_input only, 2 grad_grid only.
template <class T>
GsOut<T> run_gs(const GsCase& c, GridSampleMode mode, GridSamplePadding pad, bool ac, int want,
                const std::vector<T>& x, const std::vector<T>& grid, const std::vector<T>& gy) {
  GsOut<T> r;
  r.out.resize(c.N * c.C * c.Ho * c.Wo);
  r.grad_input.resize(want == 2 ? 0 : c.N * c.C * c.H * c.W);
  r.grad_grid.resize(want == 1 ? 0 : c.N * c.Ho * c.Wo * 2);
  kernels::grid_sample_2d_forward<T>(x.data(), grid.data(), r.out.data(), c.N, c.C, c.H, c.W, c.Ho, c.Wo, mode, pad,
                                     ac);
  kernels::grid_sample_2d_backward<T>(gy.data(), x.data(), grid.data(), want == 2 ? nullptr : r.grad_input.data(),
                                      want == 1 ? nullptr : r.grad_grid.data(), c.N, c.C, c.H, c.W, c.Ho, c.Wo, mode,
                                      pad, ac);
  return r;
}

template <class H>
void check_grid_sample() {
  for (const GsCase& c : kGsCases) {
    const auto x = random_half<H>(c.N * c.C * c.H * c.W, 21);
    // Grid points past the borders too (scale 0.7: about 15% of coordinates outside [-1, 1]).
    const auto grid = random_half<H>(c.N * c.Ho * c.Wo * 2, 22, 0.7);
    const auto gy = random_half<H>(c.N * c.C * c.Ho * c.Wo, 23);
    for (int m = 0; m < 3; ++m)
      for (int p = 0; p < 3; ++p)
        for (bool ac : {false, true})
          for (int want : {0, 1, 2}) {
            const auto mode = static_cast<GridSampleMode>(m);
            const auto pad = static_cast<GridSamplePadding>(p);
            SCOPED_TRACE("N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " mode " + std::to_string(m) +
                         " padding " + std::to_string(p) + (ac ? " align_corners" : "") + " want " +
                         std::to_string(want));
            const auto h = at_one_and_two_threads([&] { return run_gs<H>(c, mode, pad, ac, want, x, grid, gy); });
            const auto f = run_gs<float>(c, mode, pad, ac, want, widen(x), widen(grid), widen(gy));
            expect_within_one_ulp(h.out, f.out, "output");
            expect_within_one_ulp(h.grad_input, f.grad_input, "grad_input");
            expect_within_one_ulp(h.grad_grid, f.grad_grid, "grad_grid");
          }
  }
}

TEST(HalfKernels, GridSampleBFloat16MatchesFloat32RoundedOnce) { check_grid_sample<BFloat16>(); }
TEST(HalfKernels, GridSampleFloat16MatchesFloat32RoundedOnce) { check_grid_sample<Float16>(); }

// Bilinear in bfloat16 is exactly the float32 kernels rounded once, bit for bit: the AVX-512
// path reads the bfloat16 planes in place (two taps per 32-bit gather lane) for the output and
// the grid gradient, and must do the float32 arithmetic operation for operation. Shapes:
// one-pixel-wide and one-pixel planes (a row's word starts one element before its only inside
// tap, or the plane is too small for a word and takes the float32 copies), position counts
// that are not a multiple of 16 and more than one block, fused and split backward passes,
// every padding; inputs with infinities, subnormals and zeros of both signs, grid points far
// outside, on the borders, infinite and NaN.
TEST(HalfKernels, GridSampleBilinearBFloat16IsFloat32RoundedOnceBitForBit) {
  const std::vector<GsCase> cases = {{2, 3, 5, 1, 7, 9},  {1, 2, 1, 1, 3, 5},   {2, 3, 1, 2, 6, 5},
                                     {1, 3, 1, 9, 4, 13}, {3, 5, 7, 6, 11, 10}, {2, 3, 33, 17, 50, 47}};
  auto rounded = [](const std::vector<float>& f) { return bits_of(std::vector<BFloat16>(f.begin(), f.end())); };
  for (const GsCase& c : cases) {
    auto x = random_half<BFloat16>(c.N * c.C * c.H * c.W, 31);
    const float special[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             1e-39f, -1e-39f, 0.0f, -0.0f, 3e38f};
    for (size_t k = 0; k < x.size(); k += 7) x[k] = BFloat16(special[(k / 7) % 7]);
    auto grid = random_half<BFloat16>(c.N * c.Ho * c.Wo * 2, 32, 0.8);
    // Grid points the tap tables must place as the scalar code does (the AVX-512 path computes
    // them 16 at a time): NaN, infinities, far outside, exactly on the borders and a pixel centre.
    const float odd_points[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 1.0f, -1.0f, 0.0f};
    for (size_t k = 5; k < grid.size(); k += 11) grid[k] = BFloat16(odd_points[(k / 22) % 8]);  // each kind in x and in y
    const auto gy = random_half<BFloat16>(c.N * c.C * c.Ho * c.Wo, 33);
    for (int p = 0; p < 3; ++p)
      for (bool ac : {false, true})
        for (int want : {0, 2}) {
          SCOPED_TRACE("N" + std::to_string(c.N) + " H" + std::to_string(c.H) + " W" + std::to_string(c.W) +
                       " padding " + std::to_string(p) + (ac ? " align_corners" : "") + " want " +
                       std::to_string(want));
          const auto pad = static_cast<GridSamplePadding>(p);
          const auto h = at_one_and_two_threads(
              [&] { return run_gs<BFloat16>(c, GridSampleMode::Bilinear, pad, ac, want, x, grid, gy); });
          const auto f = run_gs<float>(c, GridSampleMode::Bilinear, pad, ac, want, widen(x), widen(grid), widen(gy));
          EXPECT_EQ(bits_of(h.out), rounded(f.out));
          EXPECT_EQ(bits_of(h.grad_input), rounded(f.grad_input));
          EXPECT_EQ(bits_of(h.grad_grid), rounded(f.grad_grid));
        }
  }
}

template <class H>
void check_grid_sample_on_every_isa() {
  const GsCase c = kGsCases[2];
  const auto x = random_half<H>(c.N * c.C * c.H * c.W, 24);
  const auto grid = random_half<H>(c.N * c.Ho * c.Wo * 2, 25, 0.7);
  const auto gy = random_half<H>(c.N * c.C * c.Ho * c.Wo, 26);
  for (int m = 0; m < 3; ++m)
    for (int p = 0; p < 3; ++p) {
      SCOPED_TRACE("mode " + std::to_string(m) + " padding " + std::to_string(p));
      testing::expect_same_on_every_isa(
          [&] {
            auto o = run_gs<H>(c, static_cast<GridSampleMode>(m), static_cast<GridSamplePadding>(p), false, 0, x,
                               grid, gy);
            return std::vector<Tensor>{from_vector(o.out, {c.N, c.C, c.Ho, c.Wo}),
                                       from_vector(o.grad_input, {c.N, c.C, c.H, c.W}),
                                       from_vector(o.grad_grid, {c.N, c.Ho, c.Wo, 2})};
          },
          ulp_fraction<H>());
    }
}

TEST(HalfKernels, GridSampleSameOnEveryIsa) {
  check_grid_sample_on_every_isa<BFloat16>();
  check_grid_sample_on_every_isa<Float16>();
}

// ----- multi-scale deformable attention -----

struct MsdaCase {
  const char* what;
  int64_t bs, heads, channels, queries, points;
  std::vector<int64_t> shapes;  // (H_l, W_l) per level
  int64_t levels() const { return static_cast<int64_t>(shapes.size()) / 2; }
  int64_t keys() const {
    int64_t k = 0;
    for (int64_t l = 0; l < levels(); ++l) k += shapes[2 * l] * shapes[2 * l + 1];
    return k;
  }
  std::vector<int64_t> starts() const {
    std::vector<int64_t> s(levels());
    for (int64_t l = 1; l < levels(); ++l) s[l] = s[l - 1] + shapes[2 * l - 2] * shapes[2 * l - 1];
    return s;
  }
};

const std::vector<MsdaCase> kMsdaCases = {
    {"copied slices, one chunk", 2, 4, 32, 60, 2, {6, 5, 3, 2}},
    {"copied slices, chunked grad_value", 1, 2, 16, 400, 2, {4, 5, 2, 3}},
    {"one head: not copied, chunked", 1, 1, 8, 300, 3, {5, 4, 3, 3}},
    {"ragged channels, not copied", 3, 3, 5, 7, 2, {9, 8, 4, 4, 2, 2}},
};

template <class T>
struct MsdaOut {
  std::vector<T> out, grad_value, grad_loc, grad_attn;
  bool operator==(const MsdaOut& o) const {
    if constexpr (std::is_same_v<T, float>)
      return out == o.out && grad_value == o.grad_value && grad_loc == o.grad_loc && grad_attn == o.grad_attn;
    else
      return bits_of(out) == bits_of(o.out) && bits_of(grad_value) == bits_of(o.grad_value) &&
             bits_of(grad_loc) == bits_of(o.grad_loc) && bits_of(grad_attn) == bits_of(o.grad_attn);
  }
};

// mask: which of grad_value, grad_loc, grad_attn to ask for.
template <class T>
MsdaOut<T> run_msda(const MsdaCase& c, std::array<bool, 3> mask, const std::vector<T>& value,
                    const std::vector<T>& loc, const std::vector<T>& attn, const std::vector<T>& gy) {
  const int64_t L = c.levels(), K = c.keys();
  const std::vector<int64_t> starts = c.starts();
  MsdaOut<T> r;
  r.out.resize(c.bs * c.queries * c.heads * c.channels);
  r.grad_value.resize(mask[0] ? value.size() : 0);
  r.grad_loc.resize(mask[1] ? loc.size() : 0);
  r.grad_attn.resize(mask[2] ? attn.size() : 0);
  auto ptr = [](std::vector<T>& v) { return v.empty() ? nullptr : v.data(); };
  kernels::ms_deform_attn_forward<T>(value.data(), c.shapes.data(), starts.data(), loc.data(), attn.data(),
                                     r.out.data(), c.bs, K, c.heads, c.channels, L, c.queries, c.points);
  kernels::ms_deform_attn_backward<T>(value.data(), c.shapes.data(), starts.data(), loc.data(), attn.data(),
                                      gy.data(), ptr(r.grad_value), ptr(r.grad_loc), ptr(r.grad_attn), c.bs, K,
                                      c.heads, c.channels, L, c.queries, c.points);
  return r;
}

template <class H>
void check_msda() {
  for (const MsdaCase& c : kMsdaCases) {
    const int64_t L = c.levels(), K = c.keys();
    const int64_t samples = c.bs * c.queries * c.heads * L * c.points;
    const auto value = random_half<H>(c.bs * K * c.heads * c.channels, 31);
    // Locations in [0, 1] and a little outside (corners off the map), weights around 1 / (L P).
    const auto loc = random_half<H>(samples * 2, 32, 0.35, 0.5);
    const auto attn = random_half<H>(samples, 33, 0.1, 0.15);
    const auto gy = random_half<H>(c.bs * c.queries * c.heads * c.channels, 34);
    for (std::array<bool, 3> mask : {std::array<bool, 3>{true, true, true}, std::array<bool, 3>{true, false, false},
                                     std::array<bool, 3>{false, true, true}}) {
      SCOPED_TRACE(std::string(c.what) + ", mask " + std::to_string(mask[0]) + std::to_string(mask[1]) +
                   std::to_string(mask[2]));
      const auto h = at_one_and_two_threads([&] { return run_msda<H>(c, mask, value, loc, attn, gy); });
      const auto f = run_msda<float>(c, mask, widen(value), widen(loc), widen(attn), widen(gy));
      expect_within_one_ulp(h.out, f.out, "output");
      expect_within_one_ulp(h.grad_value, f.grad_value, "grad_value");
      expect_within_one_ulp(h.grad_loc, f.grad_loc, "grad_sampling_locations");
      expect_within_one_ulp(h.grad_attn, f.grad_attn, "grad_attention_weights");
    }
  }
}

TEST(HalfKernels, MsDeformAttnBFloat16MatchesFloat32RoundedOnce) { check_msda<BFloat16>(); }
TEST(HalfKernels, MsDeformAttnFloat16MatchesFloat32RoundedOnce) { check_msda<Float16>(); }

template <class H>
void check_msda_on_every_isa() {
  for (const MsdaCase& c : kMsdaCases) {
    SCOPED_TRACE(c.what);
    const int64_t L = c.levels(), K = c.keys();
    const int64_t samples = c.bs * c.queries * c.heads * L * c.points;
    const auto value = random_half<H>(c.bs * K * c.heads * c.channels, 35);
    const auto loc = random_half<H>(samples * 2, 36, 0.35, 0.5);
    const auto attn = random_half<H>(samples, 37, 0.1, 0.15);
    const auto gy = random_half<H>(c.bs * c.queries * c.heads * c.channels, 38);
    testing::expect_same_on_every_isa(
        [&] {
          auto o = run_msda<H>(c, {true, true, true}, value, loc, attn, gy);
          const int64_t n_value = static_cast<int64_t>(o.grad_value.size());
          return std::vector<Tensor>{from_vector(o.out, {static_cast<int64_t>(o.out.size())}),
                                     from_vector(o.grad_value, {n_value}),
                                     from_vector(o.grad_loc, {samples * 2}), from_vector(o.grad_attn, {samples})};
        },
        ulp_fraction<H>());
  }
}

TEST(HalfKernels, MsDeformAttnSameOnEveryIsa) {
  check_msda_on_every_isa<BFloat16>();
  check_msda_on_every_isa<Float16>();
}

}  // namespace
}  // namespace tg
