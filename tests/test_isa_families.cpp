// The kernel families of grid_sample (2-D and 3-D, and affine_grid), ms_deform_attn, upsample, group_norm and
// pooling on every instruction-set path (framework/isa.h): each path's forward, backward and
// (grid_sample, ms_deform_attn) double backward against the generic path's, float32 and
// float64, on ragged sizes (no dimension a multiple of a vector's lanes).
//
// Tolerances (testing::expect_same_on_every_isa: |x - x_generic| <= tol * max|x_generic|):
//   grid_sample, affine_grid  bit-identical. Their kernel files turn off FMA contraction and
//                             auto-vectorisation (a coordinate one ulp off can pick another
//                             pixel) and the one fused step is an explicit std::fma, so every
//                             path runs the same scalar arithmetic.
//   pooling                   bit-identical. Max pooling only compares; the average sums run in
//                             double in a fixed order (vector lanes are output columns, or the
//                             eight fixed lanes of run_sum), never reordered by the vector width.
//   upsample                  float32 1e-6, float64 2e-14: the same sums in the same order, but
//                             the AVX2 and AVX-512 copies fuse a * b + c into one rounding where
//                             the generic copy (no FMA) rounds twice. Measured: 1.1e-7, 1.8e-15.
//   group_norm                float32 1e-6, float64 2e-15: the 32 double lanes of every
//                             statistic are summed in the same order on every path (each path
//                             holds them in registers of its width), but FMA contraction
//                             differs: the float backward's short float partial sums, and the
//                             normalisation (one rounding or two per element). Measured: 8.7e-8,
//                             2.3e-16. (Groups of one or two elements are left out: their grad_x
//                             is rounding noise around 0, which no bound relative to it fits.)
//   ms_deform_attn            float32 5e-6, float64 1e-14: the channel dots are summed in
//                             vectors of the path's width (16, 32 or 64 bytes), so in another
//                             order on each path, and contraction differs as above. Measured:
//                             7.3e-7, 1.1e-15 (sums of up to 40 products and their gradients).
#include "isa_test_util.h"

#include <tapegrad/tapegrad.h>

#include <limits>
#include <string>
#include <vector>

namespace tg {
namespace {

double tol_for(DType dt, double f32, double f64) { return dt == DType::Float32 ? f32 : f64; }

// The first-order gradients of <y, r> with respect to the inputs (kept differentiable), then
// the second-order ones: the gradients of sum_i <grad_i, v_i> with respect to the inputs and to
// r (the backward's own backward: for pooling, whose gradient is linear in r alone, that is the
// only one). Returns y and the defined first-order and (when `second`) second-order
// gradients. The directions r and v are made once, outside the paths. No reduction op is used, so
// that only the kernels under test can make the paths differ.
std::vector<Tensor> first_and_second(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                     const std::vector<Tensor>& inputs, const Tensor& r,
                                     const std::vector<Tensor>& v, bool second) {
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(x.detach().requires_grad_());
  Tensor rr = r.detach().requires_grad_(second);
  Tensor y = f(xs);
  std::vector<Tensor> g = grad({y}, xs, {rr}, /*retain_graph=*/true, /*allow_unused=*/true,
                               /*create_graph=*/second);
  std::vector<Tensor> out = {y.detach()};
  for (const Tensor& gi : g)
    if (gi.defined()) out.push_back(gi.detach());
  if (second) {
    std::vector<Tensor> wrt = xs;
    wrt.push_back(rr);
    for (const Tensor& t : grad(g, wrt, v, false, true, false))
      if (t.defined()) out.push_back(t);
  }
  return out;
}

std::vector<Tensor> randn_like_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(randn(t.shape(), t.dtype()));
  return out;
}

const DType kTypes[] = {DType::Float32, DType::Float64};

TEST(IsaFamilies, GridSampleEveryModeAndPaddingMatchesGeneric) {
  for (DType dt : kTypes) {
    for (int mode = 0; mode < 3; ++mode) {
      for (int padding = 0; padding < 3; ++padding) {
        for (bool align : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " mode " + std::to_string(mode) + " padding " +
                       std::to_string(padding) + (align ? " align_corners" : ""));
          manual_seed(11);
          // (2, 5, 9, 13) sampled on a 7 x 11 grid; coordinates reach past the borders.
          Tensor x = randn({2, 5, 9, 13}, dt), grid = randn({2, 7, 11, 2}, dt) * 0.7;
          Tensor r = randn({2, 5, 7, 11}, dt);
          std::vector<Tensor> v = randn_like_all({x, grid});
          auto f = [&](const std::vector<Tensor>& a) {
            return grid_sampler_2d(a[0], a[1], mode, padding, align);
          };
          // The second order runs the double backward kernel (gg_grid) and, through the
          // recorded ops, the forward and backward again.
          testing::expect_same_on_every_isa([&] { return first_and_second(f, {x, grid}, r, v, true); },
                                            0.0);
        }
      }
    }
  }
}

// Bilinear float32 on AVX-512 builds its tap tables 16 grid points at a time (a vector copy of
// the scalar steps): grid points that are NaN, infinite, far outside, exactly on the borders or
// on a pixel centre must be placed as the generic path's scalar code places them, in every
// padding mode, on position counts that end in a partial vector (9 x 13 = 117 per sample).
TEST(IsaFamilies, GridSampleBilinearOddGridPointsMatchGeneric) {
  const float odd_points[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 1.0f, -1.0f, 0.0f};
  for (int padding = 0; padding < 3; ++padding) {
    for (bool align : {false, true}) {
      SCOPED_TRACE("padding " + std::to_string(padding) + (align ? " align_corners" : ""));
      manual_seed(12);
      Tensor x = randn({2, 3, 6, 10}), r = randn({2, 3, 9, 13});
      std::vector<float> g = (randn({2, 9, 13, 2}) * 0.8).to_vector<float>();
      for (size_t k = 5; k < g.size(); k += 11) g[k] = odd_points[(k / 22) % 8];  // each kind in x and in y
      Tensor grid = from_vector(g, {2, 9, 13, 2});
      std::vector<Tensor> v = randn_like_all({x, grid});
      auto f = [&](const std::vector<Tensor>& a) { return grid_sampler_2d(a[0], a[1], 0, padding, align); };
      testing::expect_same_on_every_isa([&] { return first_and_second(f, {x, grid}, r, v, false); }, 0.0);
    }
  }
}

TEST(IsaFamilies, GridSample3dEveryModeAndPaddingMatchesGeneric) {
  for (DType dt : kTypes) {
    for (int mode = 0; mode < 2; ++mode) {
      for (int padding = 0; padding < 3; ++padding) {
        for (bool align : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " mode " + std::to_string(mode) + " padding " +
                       std::to_string(padding) + (align ? " align_corners" : ""));
          manual_seed(14);
          // (2, 3, 5, 7, 6) sampled on a 3 x 5 x 4 grid; coordinates reach past the borders.
          Tensor x = randn({2, 3, 5, 7, 6}, dt), grid = randn({2, 3, 5, 4, 3}, dt) * 0.7;
          Tensor r = randn({2, 3, 3, 5, 4}, dt);
          std::vector<Tensor> v = randn_like_all({x, grid});
          auto f = [&](const std::vector<Tensor>& a) {
            return grid_sampler_3d(a[0], a[1], mode, padding, align);
          };
          testing::expect_same_on_every_isa([&] { return first_and_second(f, {x, grid}, r, v, true); },
                                            0.0);
        }
      }
    }
  }
}

TEST(IsaFamilies, AffineGridMatchesGeneric) {
  for (DType dt : kTypes) {
    for (bool align : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (align ? " align_corners" : ""));
      manual_seed(12);
      Tensor theta = randn({3, 2, 3}, dt), r = randn({3, 7, 13, 2}, dt);
      auto f = [&](const std::vector<Tensor>& a) { return affine_grid(a[0], {3, 4, 7, 13}, align); };
      testing::expect_same_on_every_isa([&] { return first_and_second(f, {theta}, r, {}, false); },
                                        0.0);
      Tensor theta3 = randn({2, 3, 4}, dt), r3 = randn({2, 3, 5, 7, 3}, dt);  // volumes
      auto f3 = [&](const std::vector<Tensor>& a) { return affine_grid(a[0], {2, 1, 3, 5, 7}, align); };
      testing::expect_same_on_every_isa([&] { return first_and_second(f3, {theta3}, r3, {}, false); },
                                        0.0);
    }
  }
}

TEST(IsaFamilies, MsDeformAttnMatchesGeneric) {
  struct Case {
    int64_t bs, heads, channels, queries, points;
  };
  // 2 slices: the backward cuts them into query chunks; 2 x 5 = 10 slices: whole slices.
  // Channels 13 and 37: no multiple of any path's lanes; 40: vectors and a tail.
  const Case cases[] = {{1, 2, 13, 29, 3}, {2, 5, 37, 17, 4}, {2, 5, 40, 70, 2}};
  const std::vector<std::pair<int64_t, int64_t>> levels = {{9, 11}, {5, 6}, {3, 3}};
  for (DType dt : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " bs " + std::to_string(c.bs) + " heads " +
                   std::to_string(c.heads) + " channels " + std::to_string(c.channels));
      std::vector<int64_t> shapes, starts;
      int64_t keys = 0;
      for (auto [h, w] : levels) {
        shapes.push_back(h);
        shapes.push_back(w);
        starts.push_back(keys);
        keys += h * w;
      }
      const int64_t L = static_cast<int64_t>(levels.size());
      Tensor ss = from_vector(shapes, {L, 2}), lsi = from_vector(starts, {L});
      manual_seed(13);
      Tensor value = randn({c.bs, keys, c.heads, c.channels}, dt);
      // Locations a little past [0, 1] on both sides: corners outside the maps too.
      Tensor loc = rand({c.bs, c.queries, c.heads, L, c.points, 2}, dt) * 1.2 - 0.1;
      Tensor attn = rand({c.bs, c.queries, c.heads, L, c.points}, dt);
      Tensor r = randn({c.bs, c.queries, c.heads * c.channels}, dt);
      std::vector<Tensor> v = randn_like_all({value, loc, attn});
      auto f = [&](const std::vector<Tensor>& a) { return ms_deform_attn(a[0], ss, lsi, a[1], a[2]); };
      testing::expect_same_on_every_isa(
          [&] { return first_and_second(f, {value, loc, attn}, r, v, true); }, tol_for(dt, 5e-6, 1e-14));
    }
  }
}

TEST(IsaFamilies, UpsampleBilinearMatchesGeneric) {
  struct Case {
    Shape in;
    std::array<int64_t, 2> out;
  };
  const Case cases[] = {{{2, 3, 7, 9}, {17, 23}}, {{1, 5, 13, 11}, {6, 5}}, {{3, 2, 1, 33}, {5, 67}}};
  for (DType dt : kTypes) {
    for (const Case& c : cases) {
      for (bool align : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + format_shape(c.in) + (align ? " align_corners" : ""));
        manual_seed(14);
        Tensor x = randn(c.in, dt), r = randn({c.in[0], c.in[1], c.out[0], c.out[1]}, dt);
        auto f = [&](const std::vector<Tensor>& a) { return upsample_bilinear2d(a[0], c.out, align); };
        testing::expect_same_on_every_isa([&] { return first_and_second(f, {x}, r, {}, false); },
                                          tol_for(dt, 1e-6, 2e-14));
      }
    }
  }
}

TEST(IsaFamilies, GroupNormMatchesGeneric) {
  struct Case {
    Shape in;
    int64_t groups;
    bool affine;
  };
  // An offset mean (x = 3 + N(0, 1)) exercises the centred sums; (1, 4, 150, 130) has groups of
  // 19500 elements: more than one chunk, and fewer groups than threads on two cores.
  const Case cases[] = {{{2, 6, 7, 9}, 3, true},
                        {{3, 10, 37}, 5, false},
                        {{2, 12, 8, 8}, 4, true},
                        {{1, 4, 150, 130}, 1, true},
                        {{4, 24}, 3, true}};
  for (DType dt : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + format_shape(c.in) + " groups " + std::to_string(c.groups));
      manual_seed(15);
      Tensor x = randn(c.in, dt) + 3.0, r = randn(c.in, dt);
      Tensor w = randn({c.in[1]}, dt), b = randn({c.in[1]}, dt);
      auto f = [&](const std::vector<Tensor>& a) {
        return c.affine ? group_norm(a[0], c.groups, a[1], a[2]) : group_norm(a[0], c.groups);
      };
      testing::expect_same_on_every_isa([&] { return first_and_second(f, {x, w, b}, r, {}, false); },
                                        tol_for(dt, 1e-6, 2e-15));
    }
  }
}

TEST(IsaFamilies, PoolingMatchesGeneric) {
  struct Case {
    std::string name;
    Shape in;
    std::function<Tensor(const Tensor&)> pool;
  };
  const std::vector<Case> cases = {
      {"max k3 s2 p1", {2, 5, 13, 17}, [](const Tensor& x) { return max_pool2d(x, {3}, {2}, {1}); }},
      {"max k(3,2) s1 dilation (2,1) ceil", {1, 3, 11, 10},
       [](const Tensor& x) { return max_pool2d(x, {3, 2}, {1}, {1, 0}, {2, 1}, true); }},
      {"avg k3 s2 p1", {2, 5, 13, 17}, [](const Tensor& x) { return avg_pool2d(x, {3}, {2}, {1}); }},
      {"avg k2 s2 ceil, count_include_pad false, divisor 3", {3, 4, 9, 11},
       [](const Tensor& x) { return avg_pool2d(x, {2}, {2}, {1}, true, false, 3); }},
      {"avg k3 s1 (overlapping)", {2, 3, 10, 21}, [](const Tensor& x) { return avg_pool2d(x, {3}, {1}); }},
      {"adaptive 7x7 -> 1", {4, 9, 7, 7}, [](const Tensor& x) { return adaptive_avg_pool2d(x, {1}); }},
      {"adaptive 13x11 -> 1 (49+ elements, a tail)", {2, 3, 13, 11},
       [](const Tensor& x) { return adaptive_avg_pool2d(x, {1}); }},
      {"adaptive 14x12 -> 7x4 (tiles)", {2, 3, 14, 12},
       [](const Tensor& x) { return adaptive_avg_pool2d(x, {7, 4}); }},
      {"adaptive 9x11 -> 4x5 (overlapping)", {2, 3, 9, 11},
       [](const Tensor& x) { return adaptive_avg_pool2d(x, {4, 5}); }},
  };
  for (DType dt : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + c.name);
      manual_seed(16);
      Tensor x = randn(c.in, dt);
      Tensor r = randn(c.pool(x).shape(), dt);
      std::vector<Tensor> v = {randn(c.in, dt)};
      auto f = [&](const std::vector<Tensor>& a) { return c.pool(a[0]); };
      // The second order runs the backward's own backward (max: the gather kernel).
      testing::expect_same_on_every_isa([&] { return first_and_second(f, {x}, r, v, true); }, 0.0);
    }
  }
}

}  // namespace
}  // namespace tg
