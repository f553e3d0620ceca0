// What grid_sample.cpp (validation and the tape) and grid_sample_samples.cpp (the registry's
// sample cases) share. Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "../../../framework/registry.h"
#include "../grid_sample.h"

namespace tg::grid_sample_detail {

// What grid_sample's backward needs besides its saved tensors.
struct GridSampleAttrs {
  GridSampleMode mode;
  GridSamplePadding padding;
  bool align_corners;
};

// The sizes of a validated call, 2-D (input [N, C, H, W], grid [N, Ho, Wo, 2]; D = Do = 1) or
// 3-D (input [N, C, D, H, W], grid [N, Do, Ho, Wo, 3]).
struct Sizes {
  bool volume;
  int64_t N, C, D, H, W, Do, Ho, Wo;
  Sizes(const Shape& input, const Shape& grid) : volume(input.size() == 5), N(input[0]), C(input[1]) {
    const size_t o = volume ? 1 : 0;  // the depth's place, when there is one
    D = volume ? input[2] : 1;
    H = input[2 + o];
    W = input[3 + o];
    Do = volume ? grid[1] : 1;
    Ho = grid[1 + o];
    Wo = grid[2 + o];
  }
};

// The registry's sample cases (grid_sample_samples.cpp).
std::vector<SampleCase> grid_sample_samples();
std::vector<SampleCase> grid_sampler_3d_samples();
std::vector<SampleCase> affine_grid_samples();
std::vector<SampleCase> affine_grid_generator_backward_samples();

}  // namespace tg::grid_sample_detail
