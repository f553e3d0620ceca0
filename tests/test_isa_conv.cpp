// Convolutions on every instruction-set path against the generic path, for the shapes that reach
// each register tiling (ops/conv/internal/conv_direct.h, conv_kernels_weight_grad.cpp): their
// sizes follow the path's vector registers (kVecBytes, kAccRegs), so each path runs different
// blocks. test_isa.cpp's IsaPaths.ConvolutionMatchesGeneric has the general cases.
#include <tapegrad/ops/conv/conv_kernels.h>

#include "isa_test_util.h"
#include "test_util.h"

#include <limits>

namespace tg {
namespace {

struct Case {
  const char* what;
  Shape x, w;
  IntList stride, padding;
  int64_t groups;
  bool transposed;
};

void expect_conv_same_on_every_isa(const Case& c, DType dt, double inf_in_x = 0) {
  SCOPED_TRACE(std::string(c.what) + ": x " + format_shape(c.x) + " w " + format_shape(c.w) + " " +
               dtype_name(dt));
  manual_seed(11);
  Tensor x = randn(c.x, dt), w = randn(c.w, dt);
  if (inf_in_x != 0) {  // at x[0, 0, 1, 1]
    std::vector<double> v = x.to(DType::Float64).to_vector<double>();
    v[c.x.back() + 1] = inf_in_x;
    x = from_vector(v, c.x).to(dt);
  }
  const int64_t out_ch = c.transposed ? c.w[1] * c.groups : c.w[0];
  Tensor b = randn({out_ch}, dt);
  const IntList ones(c.stride.size(), 1), out_pad(c.stride.size(), c.transposed ? 1 : 0);
  auto conv = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
    return convolution(xi, wi, bi, c.stride, c.padding, ones, c.transposed, out_pad, c.groups);
  };
  const Tensor gy = randn(conv(x, w, b).shape(), dt);  // random: no symmetry hides a wrong tap
  testing::expect_same_on_every_isa(
      [&] {
        Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_(),
               bi = b.detach().requires_grad_();
        Tensor y = conv(xi, wi, bi);
        y.backward(gy);
        return std::vector<Tensor>{y, xi.grad(), wi.grad(), bi.grad()};
      },
      dt == DType::Float32 ? 2e-5 : 1e-12);
}

// Output / input channel counts that pick each direct block (12, 8, 6, 4, 2, 1 channels) in the
// forward and the input gradient, and each weight-gradient tiling: column channels in the lanes
// (4 or 2 vectors of them, depending on the path's registers) on slices >= 64 positions,
// positions in the lanes (few column channels, slices >= 512).
TEST(IsaPaths, ConvolutionRegisterTilingsMatchGeneric) {
  const std::vector<Case> cases = {
      {"36 channels: blocks of 12 / 6, outer tiles of 4 / 2 vectors", {2, 36, 10, 11}, {36, 36, 3, 3}, {1, 1}, {1, 1}, 1, false},
      {"64 channels: blocks of 8 / 4", {1, 64, 9, 12}, {64, 64, 3, 3}, {1, 1}, {1, 1}, 1, false},
      {"20 channels, 5 per group: padded blocks", {2, 20, 12, 9}, {20, 4, 3, 3}, {1, 1}, {1, 1}, 5, false},
      {"8 column channels on long slices: dot tiles", {2, 8, 24, 24}, {8, 8, 3, 3}, {1, 1}, {1, 1}, 1, false},
      {"2 and 1 channels: thin blocks", {2, 1, 23, 30}, {2, 1, 3, 3}, {1, 1}, {1, 1}, 1, false},
      {"stride 2: phase-split boxes", {2, 24, 20, 21}, {24, 24, 3, 3}, {2, 2}, {1, 1}, 1, false},
      {"conv1d, long rows", {2, 40, 300}, {40, 40, 5}, {1}, {2}, 1, false},
      {"conv3d, 16 channels", {1, 16, 6, 10, 12}, {16, 16, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, false},
      {"transposed, stride 2", {2, 36, 9, 10}, {36, 20, 4, 4}, {2, 2}, {1, 1}, 1, true},
  };
  // the direct tilings: the float32 3x3 stride-1 cases would take the Winograd path
  // (test_conv_winograd.cpp has its own every-path test)
  const bool winograd = kernels::set_conv_winograd(false);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) expect_conv_same_on_every_isa(c, dt);
  }
  kernels::set_conv_winograd(winograd);
}

// An infinite input value: the fast weight gradients meet it at garbage grid positions and
// redo the sum exactly; every path must give the same Inf and NaN entries.
TEST(IsaPaths, ConvolutionNonFiniteInputMatchesGeneric) {
  const Case wide{"36 channels", {2, 36, 10, 11}, {36, 36, 3, 3}, {1, 1}, {1, 1}, 1, false};
  const Case narrow{"8 channels, dot tiles", {2, 8, 24, 24}, {8, 8, 3, 3}, {1, 1}, {1, 1}, 1, false};
  for (const Case& c : {wide, narrow}) {
    expect_conv_same_on_every_isa(c, DType::Float32, std::numeric_limits<double>::infinity());
  }
}

}  // namespace
}  // namespace tg
