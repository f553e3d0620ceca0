// The convolution kernels' paths seen through the API: the same bits for any thread count (the
// batch split, GEMM chunks, the direct weight-gradient tilings) and grad_weight against its
// definition, and Inf and NaN on every kernel path against the definition (only taps inside the
// image contribute).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <tapegrad/ops/conv/conv_kernels.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;

// A case big enough for every parallel path (batch split, GEMM chunks, bias reduction).
struct BigCase {
  Tensor x, w, b, g;
};
BigCase big_case(bool transposed) {
  manual_seed(21);
  BigCase c;
  c.x = randn({3, 16, 20, 20});
  c.w = transposed ? randn({16, 8, 3, 3}) : randn({24, 8, 3, 3});
  c.b = randn({transposed ? 16 : 24});
  Tensor y = convolution(c.x, c.w, c.b, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  c.g = randn(y.shape());
  return c;
}

std::vector<Tensor> run_big(const BigCase& c, bool transposed) {
  Tensor y = convolution(c.x, c.w, c.b, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  ConvolutionGrads r =
      convolution_backward(c.g, c.x, c.w, {c.b.size(0)}, {2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
  return {y, r.grad_input, r.grad_weight, r.grad_bias};
}

TEST(Conv, SameInputsSameBitsForAnyThreadCount) {
  const int saved = num_threads();
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "transposed" : "normal");
    BigCase c = big_case(transposed);
    set_num_threads(2);
    std::vector<Tensor> a = run_big(c, transposed), b = run_big(c, transposed);
    set_num_threads(1);
    std::vector<Tensor> one = run_big(c, transposed);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i], b[i])) << "run to run, result " << i;
      EXPECT_TRUE(same_bits(a[i], one[i])) << "1 vs 2 threads, result " << i;
    }
  }
  set_num_threads(saved);
}

// grad_weight by its definition, in double, for stride 1, dilation 1 and padding `pad` on every
// side: dw[co, ci, t] = sum_{n, o} g[n, co, o] * x[n, group(co) * Cig + ci, o + t - pad].
// 2-D tensors are taken as 3-D ones with D = 1.
std::vector<double> grad_weight_by_definition(const Tensor& x, const Tensor& g, const Shape& wshape, int64_t groups,
                                              int64_t pad, int64_t stride = 1) {
  const bool d3 = x.dim() == 5;
  const int64_t N = x.size(0), Ci = x.size(1), Di = d3 ? x.size(2) : 1, Hi = x.size(-2), Wi = x.size(-1);
  const int64_t Co = g.size(1), Do = d3 ? g.size(2) : 1, Ho = g.size(-2), Wo = g.size(-1);
  const int64_t Cig = wshape[1], kd = d3 ? wshape[2] : 1, kh = wshape[wshape.size() - 2], kw = wshape.back();
  const int64_t pd = d3 ? pad : 0;
  std::vector<double> xv = x.to(DType::Float64).to_vector<double>(), gv = g.to(DType::Float64).to_vector<double>();
  std::vector<double> dw(Co * Cig * kd * kh * kw, 0.0);
  for (int64_t co = 0; co < Co; ++co)
    for (int64_t ci = 0; ci < Cig; ++ci)
      for (int64_t a = 0; a < kd; ++a)
        for (int64_t b = 0; b < kh; ++b)
          for (int64_t e = 0; e < kw; ++e) {
            double sum = 0;
            for (int64_t n = 0; n < N; ++n)
              for (int64_t od = 0; od < Do; ++od)
                for (int64_t oh = 0; oh < Ho; ++oh)
                  for (int64_t ow = 0; ow < Wo; ++ow) {
                    const int64_t iz = od * stride + a - pd, iy = oh * stride + b - pad, ix = ow * stride + e - pad;
                    if (iz < 0 || iz >= Di || iy < 0 || iy >= Hi || ix < 0 || ix >= Wi) continue;
                    const int64_t c = co / (Co / groups) * Cig + ci;
                    sum += gv[(((n * Co + co) * Do + od) * Ho + oh) * Wo + ow] *
                           xv[(((n * Ci + c) * Di + iz) * Hi + iy) * Wi + ix];
                  }
            dw[(((co * Cig + ci) * kd + a) * kh + b) * kw + e] = sum;
          }
  return dw;
}

// Grids large enough for the direct kernels (the weight gradient's needs slices of >= 64
// positions), grouped and depthwise, stride 1 and 2, and column channels that fill one, two and
// four vectors of a weight-gradient tile (with a partial last tile): grad_weight against its
// definition, and the same bits for 1 and 2 threads (2 threads share the tiles out otherwise).
TEST(Conv, DirectPathsSameBitsForAnyThreadCount) {
  const int saved = num_threads();
  // the direct kernels: the float32 3x3 stride-1 shapes would take the Winograd path
  // (test_conv_winograd.cpp checks its thread-count independence)
  const bool winograd = kernels::set_conv_winograd(false);
  struct Shape3 {
    Shape x, w;
    int64_t groups, stride;
  };
  for (const Shape3& s : {Shape3{{3, 8, 24, 26}, {12, 4, 3, 3}, 2, 1}, Shape3{{2, 6, 30, 30}, {6, 1, 3, 3}, 6, 1},
                          Shape3{{2, 5, 9, 10, 12}, {7, 5, 3, 3, 3}, 1, 1}, Shape3{{2, 8, 14, 14}, {20, 8, 3, 3}, 1, 1},
                          Shape3{{3, 6, 12, 16}, {70, 6, 3, 3}, 1, 1}, Shape3{{2, 16, 28, 28}, {40, 16, 3, 3}, 1, 2},
                          Shape3{{2, 16, 28, 28}, {64, 16, 3, 3}, 1, 2},  // row-block forward
                          // grouped column tiles (two per group, the second partial); image
                          // channels in two steps (their boxes exceed one step's budget)
                          Shape3{{2, 40, 20, 20}, {140, 20, 3, 3}, 2, 1}, Shape3{{1, 96, 64, 64}, {40, 96, 3, 3}, 1, 1}}) {
    SCOPED_TRACE(format_shape(s.x));
    manual_seed(5);
    Tensor x = randn(s.x), w = randn(s.w);
    const IntList pad{1};
    const IntList stride{s.stride};
    Tensor y = convolution(x, w, Tensor(), stride, pad, {1}, false, {0}, s.groups);
    Tensor g = randn(y.shape());
    auto run = [&] {
      ConvolutionGrads r =
          convolution_backward(g, x, w, {}, stride, pad, {1}, false, {0}, s.groups, {true, true, false});
      return std::vector<Tensor>{convolution(x, w, Tensor(), stride, pad, {1}, false, {0}, s.groups), r.grad_input,
                                 r.grad_weight};
    };
    set_num_threads(2);
    std::vector<Tensor> a = run(), b = run();
    set_num_threads(3);
    std::vector<Tensor> three = run();
    set_num_threads(1);
    std::vector<Tensor> one = run();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i], b[i])) << "run to run, result " << i;
      EXPECT_TRUE(same_bits(a[i], one[i])) << "1 vs 2 threads, result " << i;
      EXPECT_TRUE(same_bits(three[i], one[i])) << "1 vs 3 threads, result " << i;
    }
    // float32: sums of N * positions products of unit normals (|dw| ~ 50 for 2000 of them), each
    // element summed in float32 over a pass: a rounding error that grows with the count
    const Tensor expected = from_vector(grad_weight_by_definition(x, g, s.w, s.groups, 1, s.stride), s.w);
    const double terms = double(y.size(0)) * double(y.numel() / (y.size(0) * y.size(1)));
    expect_close(a[2], expected, 1e-4, std::max(1e-4, 2e-7 * terms), "grad_weight float32");
    // float64 through the same kernel: exact up to rounding
    ConvolutionGrads r64 = convolution_backward(g.to(DType::Float64), x.to(DType::Float64), w.to(DType::Float64), {},
                                                stride, pad, {1}, false, {0}, s.groups, {false, true, false});
    expect_close(r64.grad_weight, expected, 1e-10, 1e-10, "grad_weight float64");
  }
  set_num_threads(saved);
  kernels::set_conv_winograd(winograd);
}

// ---- Inf and NaN ----
//
// What a convolution does with Inf and NaN, checked element by element against its definition
// summed term by term in double: only the taps that fall inside the image contribute, the
// padding adds nothing (never 0 * Inf). Classes (NaN, +Inf, -Inf, finite) do not depend on the
// order of a sum, so the class check is exact; finite values get the tolerances above.
//
// The kernels (conv_kernels.cpp) write everything as three pieces in the geometry of a normal
// convolution: the image (the input, or a transposed convolution's output), the columns (one
// value per window: the output, or a transposed convolution's input) and the weight:
//   correlate          columns[o] = sum_t w[t] * image[o * s - p + t * d]  normal forward,
//                                                                          transposed grad_input
//   correlate_adjoint  image[i] = sum_{o, t hitting i} w[t] * columns[o]   normal grad_input,
//                                                                          transposed forward
//   weight_grad        dw[t] = sum_o columns[o] * image[o * s - p + t * d]  grad_weight
// Their direct paths read zero padding and garbage grid positions; only a non-finite value
// multiplied by one of those zeros can go wrong. The garbage positions and the adjoint's
// padding of y are covered by the kernels' non-finite fallbacks (InfAndNaNPropagateAsDefined).
// The image's padding meets a non-finite value only in correlate (a non-finite weight) and in
// weight_grad (a non-finite column value at a border window): NonFiniteWeightOrColumnsAtThePadding.
//
// PyTorch 1.13 (/usr/bin/python3, F.conv2d / F.conv_transpose2d and autograd, 10x10 images,
// 3x3, pad 1) splits exactly there, by backend:
//   - oneDNN (aten::mkldnn_convolution: float32, not transposed, batch 2) follows the
//     definition: w[0,0,0,0] = inf leaves y[:, 0, 0, :] finite, and grad_output[0,0,0,0] = inf
//     leaves grad_weight[0,0,0,0] finite.
//   - the slow im2col path (aten::_slow_conv2d_*: float64, batch 1, mkldnn disabled, and every
//     transposed convolution) multiplies the padding's zeros in: y[:, 0, 0, :] = nan and
//     grad_weight[0,0,0,0] = nan; conv_transpose2d's grad_input gets NaN at the border.
//   - both sum only the taps inside the image in col2im (correlate_adjoint): an inf weight
//     leaves grad_input (and conv_transpose2d's forward) free of NaN.
// On case "narrow" below (this file's weight spots; grad_output spots at a corner and borders),
// oneDNN's classes equal the definition's everywhere, the slow path's differ in 52 of 300
// outputs and 112 of 315 weight gradients, all at the border.

struct RefGeom {
  int64_t N, Ci, Co, G;
  std::array<int64_t, 3> in, out, k, s, p, d;  // image, columns, kernel, ... (right-aligned)
};

// f(n, co, c, o, t, i): every (sample, column channel, image channel, window, tap), with i the
// image position the tap reads (flat index into one image plane) or -1 outside the image.
template <class F>
void for_each_term(const RefGeom& r, F&& f) {
  const int64_t Cog = r.Co / r.G, Cig = r.Ci / r.G;
  const int64_t K = r.k[0] * r.k[1] * r.k[2];
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t co = 0; co < r.Co; ++co)
      for (int64_t ci = 0; ci < Cig; ++ci)
        for (int64_t o = 0; o < r.out[0] * r.out[1] * r.out[2]; ++o)
          for (int64_t t = 0; t < K; ++t) {
            const int64_t oz = o / (r.out[1] * r.out[2]), oy = o / r.out[2] % r.out[1], ox = o % r.out[2];
            const int64_t a = t / (r.k[1] * r.k[2]), b = t / r.k[2] % r.k[1], e = t % r.k[2];
            const int64_t iz = oz * r.s[0] - r.p[0] + a * r.d[0], iy = oy * r.s[1] - r.p[1] + b * r.d[1],
                          ix = ox * r.s[2] - r.p[2] + e * r.d[2];
            const bool inside = iz >= 0 && iz < r.in[0] && iy >= 0 && iy < r.in[1] && ix >= 0 && ix < r.in[2];
            f(n, co, co / Cog * Cig + ci, o, t, inside ? (iz * r.in[1] + iy) * r.in[2] + ix : int64_t(-1));
          }
}

struct RefResults {
  std::vector<double> columns, image, weight;  // correlate, correlate_adjoint, weight_grad
};

RefResults conv_reference(const RefGeom& r, const std::vector<double>& image, const std::vector<double>& columns,
                          const std::vector<double>& w) {
  const int64_t Li = r.in[0] * r.in[1] * r.in[2], Lo = r.out[0] * r.out[1] * r.out[2];
  const int64_t Cig = r.Ci / r.G, K = r.k[0] * r.k[1] * r.k[2];
  RefResults res{std::vector<double>(r.N * r.Co * Lo, 0.0), std::vector<double>(r.N * r.Ci * Li, 0.0),
                 std::vector<double>(r.Co * Cig * K, 0.0)};
  for_each_term(r, [&](int64_t n, int64_t co, int64_t c, int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;  // outside the image: nothing, whatever w or the column value is
    const double wv = w[(co * Cig + c % Cig) * K + t], cv = columns[(n * r.Co + co) * Lo + o];
    const double iv = image[(n * r.Ci + c) * Li + i];
    res.columns[(n * r.Co + co) * Lo + o] += wv * iv;
    res.weight[(co * Cig + c % Cig) * K + t] += cv * iv;
    res.image[(n * r.Ci + c) * Li + i] += wv * cv;
  });
  return res;
}

// Per element: NaN where the reference is NaN, the same signed Inf where it is Inf, within
// rtol / atol where it is finite. Reports the first few differences with their coordinates.
void expect_same_classes(const Tensor& got, const std::vector<double>& ref, double rtol, double atol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  const std::vector<double> v = got.to(DType::Float64).to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double e = ref[i], x = v[i];
    const bool ok = std::isnan(e)   ? std::isnan(x)
                    : std::isinf(e) ? x == e
                                    : std::isfinite(x) && std::abs(x - e) <= atol + rtol * std::abs(e);
    if (!ok && ++bad <= 5) {
      Shape at(got.dim());
      for (int64_t d = got.dim() - 1, rest = int64_t(i); d >= 0; rest /= got.size(d), --d) at[d] = rest % got.size(d);
      ADD_FAILURE() << what << " at " << format_shape(at) << " of " << format_shape(got.shape()) << ": got " << x
                    << ", expected " << e;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements of the wrong class or value";
}

// Non-finite values at chosen places of an (N, C, spatial...) tensor: where[] holds one letter
// per spatial dim, right-aligned to the tensor's dims (F first, M middle, L last position).
struct Spot {
  int64_t n, c;
  const char* where;
  double value;
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// first corner, last corner, first row, last row, first column, last column, interior
const std::vector<Spot> kImageSpots = {{0, 0, "FFF", kNaN},  {1, 1, "LLL", kInf},  {0, 2, "MFM", -kInf},
                                       {1, 3, "MLM", -kInf}, {0, 4, "LMF", kInf},  {1, 5, "FML", kNaN},
                                       {0, 6, "MMM", kInf}};
// corner taps (they reach the padding at two borders), a middle tap, an edge tap
const std::vector<Spot> kWeightSpots = {{0, 0, "FFF", kInf}, {-1, -1, "LLL", -kInf}, {1, 0, "MMM", kNaN},
                                        {2, -1, "MFL", kInf}};

// Negative n / c count from the end. With keep_last, channels go modulo C - 1: the last channel
// stays finite, so that results summing over channels keep finite elements.
std::vector<double> with_spots(const Tensor& t, const std::vector<Spot>& spots, bool keep_last) {
  std::vector<double> v = t.to(DType::Float64).to_vector<double>();
  const Shape& sh = t.shape();
  const int sd = int(sh.size()) - 2;
  const int64_t nc = keep_last && sh[1] > 1 ? sh[1] - 1 : sh[1];
  for (const Spot& s : spots) {
    const int64_t n = (s.n % sh[0] + sh[0]) % sh[0], c = (s.c % nc + nc) % nc;
    int64_t flat = n * sh[1] + c;
    for (int d = 0; d < sd; ++d) {
      const char w = s.where[3 - sd + d];
      const int64_t len = sh[2 + d];
      flat = flat * len + (w == 'F' ? 0 : w == 'L' ? len - 1 : len / 2);
    }
    v[flat] = s.value;
  }
  return v;
}

bool has_nonfinite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return true;
  return false;
}
bool has_finite(const std::vector<double>& v) {
  for (double x : v)
    if (std::isfinite(x)) return true;
  return false;
}

struct NonFiniteCase {
  const char* name;  // and the kernel paths it runs (see conv_kernels.cpp)
  Shape x, w;
  IntList stride, padding, dilation;
  bool transposed;
  int64_t groups;
};

// Runs one case in float32 and float64, with the non-finite values in one tensor at a time
// (input, weight, grad_output: with all three most of every result would be NaN), and checks
// forward, grad_input and grad_weight against the definition: at_padding picks the results
// where a non-finite weight or column value meets the image's padding (see above), otherwise
// all the others.
void check_nonfinite_case(const NonFiniteCase& c, bool at_padding) {
  SCOPED_TRACE(c.name);
  manual_seed(17);
  const Tensor x0 = randn(c.x, DType::Float64), w0 = randn(c.w, DType::Float64);
  const IntList op(c.x.size() - 2, 0);
  const Tensor y0 = convolution(x0, w0, Tensor(), c.stride, c.padding, c.dilation, c.transposed, op, c.groups);
  const Tensor g0 = randn(y0.shape(), DType::Float64);
  const int dims = int(c.x.size()) - 2;
  auto per_dim = [&](const IntList& l, int d) { return l.size() == 1 ? l[0] : l[d]; };
  // the geometry of the pieces: the image is the output of a transposed convolution
  const Shape& img = c.transposed ? y0.shape() : c.x;
  const Shape& cols = c.transposed ? c.x : y0.shape();
  RefGeom r{c.x[0], img[1], cols[1], c.groups, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  for (int d = 0; d < dims; ++d) {
    const int s = 3 - dims + d;
    r.in[s] = img[2 + d], r.out[s] = cols[2 + d], r.k[s] = c.w[2 + d];
    r.s[s] = per_dim(c.stride, d), r.p[s] = per_dim(c.padding, d), r.d[s] = per_dim(c.dilation, d);
  }
  const std::string columns_tensor = c.transposed ? "input" : "grad_output";
  // one tensor with Inf and NaN, or two, whose non-finite values then meet in the products
  // (an Inf weight times an Inf input is an Inf, where the weight's zeroed stand-in gave NaN)
  for (const std::string where : {"input", "weight", "grad_output", "input and weight", "input and grad_output"}) {
    SCOPED_TRACE("non-finite " + where);
    auto has = [&](const char* name) { return where.find(name) != std::string::npos; };
    const bool pair = has(" and ");
    const std::vector<double> xv = has("input") ? with_spots(x0, kImageSpots, true) : x0.to_vector<double>();
    const std::vector<double> wv = has("weight") ? with_spots(w0, kWeightSpots, false) : w0.to_vector<double>();
    const std::vector<double> gv = has("grad_output") ? with_spots(g0, kImageSpots, true) : g0.to_vector<double>();
    for (DType dt : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(dt == DType::Float32 ? "float32" : "float64");
      const Tensor x = from_vector(xv, c.x).to(dt), w = from_vector(wv, c.w).to(dt);
      const Tensor g = from_vector(gv, y0.shape()).to(dt);
      // the reference from the values the kernels see (float32 rounding included)
      const std::vector<double> xr = x.to(DType::Float64).to_vector<double>();
      const std::vector<double> wr = w.to(DType::Float64).to_vector<double>();
      const std::vector<double> gr = g.to(DType::Float64).to_vector<double>();
      const RefResults ref = c.transposed ? conv_reference(r, gr, xr, wr) : conv_reference(r, xr, gr, wr);
      const Tensor y = convolution(x, w, Tensor(), c.stride, c.padding, c.dilation, c.transposed, op, c.groups);
      const ConvolutionGrads grads =
          convolution_backward(g, x, w, {}, c.stride, c.padding, c.dilation, c.transposed, op, c.groups,
                               {true, true, false});
      struct Result {
        const char* name;
        const Tensor& got;
        const std::vector<double>& ref;
        bool enters;      // the non-finite tensor is one of its operands
        bool at_padding;  // correlate with a non-finite weight, weight_grad with non-finite columns
      };
      const Result results[] = {
          {"forward", y, c.transposed ? ref.image : ref.columns, where != "grad_output",
           !c.transposed && has("weight")},
          {"grad_input", grads.grad_input, c.transposed ? ref.columns : ref.image, where != "input",
           c.transposed && has("weight")},
          {"grad_weight", grads.grad_weight, ref.weight, where != "weight", has(columns_tensor.c_str())},
      };
      // float32: sums of up to ~1000 products of unit normals (|dw| ~ 50), float32 lanes
      const double rtol = dt == DType::Float64 ? 1e-10 : 1e-4, atol = dt == DType::Float64 ? 1e-10 : 1e-4;
      for (const Result& res : results) {
        if (res.at_padding != at_padding) continue;
        // a result the non-finite tensor enters must hold both classes, or it checks nothing
        if (res.enters && !pair) {
          EXPECT_TRUE(has_nonfinite(res.ref) && has_finite(res.ref)) << res.name << ": reference of one class only";
        }
        expect_same_classes(res.got, res.ref, rtol, atol, res.name);
      }
    }
  }
}

// One case per kernel path (traced with prints in a scratch copy of conv_kernels.cpp). Names
// give the normal convolution's pieces: forward = correlate, grad_input = correlate_adjoint,
// grad_weight = weight_grad. The fallbacks these cases reach, each checked by removing it:
//   adjoint: non-finite weights skip the direct path (GEMM + col2im, or the depthwise scatter);
//   weight_grad_direct and the GEMM on a flat grid: a non-finite dw (a garbage position met an
//   Inf or NaN of x) is redone with zeroed garbage columns; depthwise: per tap, on NaN.
const std::vector<NonFiniteCase> kNonFiniteCases = {
    // flat grid (3x3, pad 1, width 26): direct forward; direct adjoint (GEMM + col2im with the
    // non-finite weights); direct weight gradient (24 x 28 = 672 >= 512 grid positions) whose
    // garbage columns meet x's first column, redone by the GEMM
    {"grouped: direct forward, direct adjoint, direct grad_weight", {2, 8, 24, 26}, {8, 4, 3, 3}, {1}, {1}, {1}, false,
     2},
    // 14x14 stride 2: phase-split boxes, flat grid of 7 x 8 (56 positions), weight gradient by
    // GEMM with garbage columns (redone); the phases are too narrow for the direct adjoint
    {"stride 2: direct forward, GEMM adjoint, GEMM grad_weight on a flat grid", {2, 8, 14, 14}, {6, 8, 3, 3}, {2}, {1},
     {1}, false, 1},
    // stride 2, wide: the adjoint runs directly too, one correlation per phase of the image
    {"stride 2 wide: direct forward, direct adjoint by phases, GEMM grad_weight", {2, 8, 10, 40}, {6, 8, 3, 3}, {2},
     {1}, {1}, false, 1},
    // stride 2, 64 channels (a multiple of the row blocks' channel vectors): row-block forward
    // (positions broadcast, no garbage column computed), direct adjoint by phases
    {"stride 2, 64 channels: row-block forward", {2, 8, 28, 28}, {64, 8, 3, 3}, {2}, {1}, {1}, false, 1},
    // stride 2, 32 image channels: the adjoint's phases in row blocks too, each writing every
    // other column of the image: 14 columns per phase (one chunk of AVX-512's 14 positions), and
    // 12 (two of the 6 of AVX2 and the baseline)
    {"stride 2, 32 channels: row-block forward and adjoint", {1, 32, 28, 28}, {32, 32, 3, 3}, {2}, {1}, {1}, false, 1},
    {"stride 2, 32 channels, 12 columns: row blocks of 6", {1, 32, 24, 24}, {32, 32, 3, 3}, {2}, {1}, {1}, false, 1},
    // width 5 with pad 1: too much garbage for a flat grid, everything im2col / col2im + GEMM
    {"narrow: GEMM forward, GEMM adjoint, GEMM grad_weight", {2, 7, 6, 5}, {5, 7, 3, 3}, {1}, {1}, {1}, false, 1},
    // groups == channels on a flat grid: direct forward and adjoint (depthwise scatter with the
    // non-finite weights), flat depthwise weight gradient with its per-tap redo
    {"depthwise: direct forward, depthwise grad_weight", {2, 7, 30, 30}, {7, 1, 3, 3}, {1}, {1}, {1}, false, 7},
    // channel multiplier 2, narrow: depthwise forward, adjoint and weight gradient, row by row
    {"depthwise x2, narrow, stride 2: depthwise loops", {2, 7, 9, 6}, {14, 1, 3, 3}, {2}, {1}, {1}, false, 7},
    // channel multiplier 2 on a flat grid: as the depthwise case above
    {"depthwise x2, flat", {2, 7, 12, 16}, {14, 1, 3, 3}, {1}, {1}, {1}, false, 7},
    // 1x1, stride 1, no padding: the image is the column matrix of every GEMM
    {"unit 1x1", {2, 7, 5, 9}, {6, 7, 1, 1}, {1}, {0}, {1}, false, 1},
    // transposed, stride 2, kernel 4: forward = direct adjoint by phases (GEMM + col2im with the
    // non-finite weights), grad_input = direct correlate, grad_weight = GEMM on a flat grid
    // whose garbage meets grad_output's values (redone)
    {"transposed stride 2 kernel 4", {2, 7, 6, 9}, {7, 3, 4, 4}, {2}, {1}, {1}, true, 1},
    // 1D, direct forward and adjoint: dilation 2 (GEMM weight gradient on a flat grid, redone),
    // and a long row (direct weight gradient, 602 >= 512 positions, redone)
    {"1D dilation 2", {2, 7, 40}, {5, 7, 3}, {1}, {2}, {2}, false, 1},
    {"1D long: direct grad_weight", {2, 7, 600}, {5, 7, 3}, {1}, {1}, {1}, false, 1},
    // 3D, flat: direct forward and adjoint, 6 x 8 x 12 = 576 grid positions: direct weight
    // gradient (redone); and a narrow strided one, all GEMM
    {"3D: direct grad_weight", {2, 7, 6, 8, 10}, {5, 7, 3, 3, 3}, {1}, {1}, {1}, false, 1},
    {"3D stride 2 narrow", {2, 7, 5, 6, 5}, {5, 7, 3, 3, 3}, {2}, {1}, {1}, false, 1},
};

TEST(ConvNonFinite, InfAndNaNPropagateAsDefined) {
  for (const NonFiniteCase& c : kNonFiniteCases) check_nonfinite_case(c, false);
}

// Where a non-finite weight (correlate) or column value (weight_grad) meets the image's zero
// padding, the definition adds nothing; oneDNN agrees, PyTorch's slow im2col path gives NaN.
// Failed on every case with padding (not on the unit one) until 353d29b: correlate and
// weight_grad, on their direct, GEMM and depthwise paths alike, multiplied the padding's zeros
// in, as PyTorch's slow path does.
TEST(ConvNonFinite, NonFiniteWeightOrColumnsAtThePadding) {
  for (const NonFiniteCase& c : kNonFiniteCases) check_nonfinite_case(c, true);
}

// The stride-2 input gradient's row blocks take an image row's two column phases together
// (direct_rows_pair) where row blocks pay (conv_direct.h): even and odd widths (the phases'
// columns equal, or one apart), paddings that start a row on either phase, two chunks per
// row, 2 groups, a 4x4 kernel. grad_input against its definition (summed in double),
// and the same bits for 1 and 2 threads.
TEST(Conv, StrideTwoInputGradientPhasePairsMatchDefinition) {
  const int saved = num_threads();
  struct Case {
    Shape x, w;
    int64_t groups, pad;
  };
  // (which ones pair depends on the row blocks' size: those on 28 and 56 columns, 2 groups and
  // the 4x4 kernel on AVX-512; those on 23 (odd: 12 and 11 columns) and 48 on AVX2)
  for (const Case& c : {Case{{2, 32, 28, 28}, {8, 32, 3, 3}, 1, 1}, Case{{1, 32, 28, 28}, {8, 32, 3, 3}, 1, 0},
                        Case{{1, 32, 28, 28}, {8, 32, 3, 3}, 1, 2}, Case{{1, 32, 28, 56}, {8, 32, 3, 3}, 1, 1},
                        Case{{1, 64, 28, 28}, {16, 32, 3, 3}, 2, 1}, Case{{1, 32, 20, 60}, {8, 32, 4, 4}, 1, 1},
                        Case{{1, 32, 24, 23}, {8, 32, 3, 3}, 1, 0}, Case{{1, 32, 24, 23}, {8, 32, 3, 3}, 1, 1},
                        Case{{1, 32, 24, 23}, {8, 32, 3, 3}, 1, 2}, Case{{1, 32, 24, 48}, {8, 32, 3, 3}, 1, 1}}) {
    SCOPED_TRACE(format_shape(c.x) + " pad " + std::to_string(c.pad) + " kernel " + std::to_string(c.w[2]));
    manual_seed(9);
    Tensor x = randn(c.x), w = randn(c.w);
    const IntList stride{2}, pad{c.pad};
    Tensor g = randn(convolution(x, w, Tensor(), stride, pad, {1}, false, {0}, c.groups).shape());
    auto grad_input = [&] {
      return convolution_backward(g, x, w, {}, stride, pad, {1}, false, {0}, c.groups, {true, false, false})
          .grad_input;
    };
    set_num_threads(1);
    const Tensor one = grad_input();
    set_num_threads(2);
    const Tensor two = grad_input();
    EXPECT_TRUE(same_bits(one, two)) << "1 vs 2 threads";
    const RefGeom r{c.x[0], c.x[1], c.w[0], c.groups, {1, c.x[2], c.x[3]}, {1, g.size(2), g.size(3)},
                    {1, c.w[2], c.w[3]}, {1, 2, 2}, {0, c.pad, c.pad}, {1, 1, 1}};
    const RefResults ref = conv_reference(r, x.to(DType::Float64).to_vector<double>(),
                                          g.to(DType::Float64).to_vector<double>(),
                                          w.to(DType::Float64).to_vector<double>());
    // float32 sums of at most 4 taps x 64 channels of unit normals
    expect_close(one, from_vector(ref.image, c.x), 1e-4, 1e-4, "grad_input");
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace tg
