// interpolate: PyTorch 1.13's F.interpolate, the front end of every resampling mode. It picks
// the kernel from the mode and the input's rank, and the output size and the scales it is
// given from size / scale_factor / recompute_scale_factor, by PyTorch's rules:
//
//   input rank     3 (N, C, L), 4 (N, C, H, W) or 5 (N, C, D, H, W): 1, 2 or 3 spatial dims
//   modes          Nearest, NearestExact, Area: any of the three ranks; Linear: 3 only;
//                  Bilinear, Bicubic: 4 only; Trilinear: 5 only
//   size           one value per spatial dim (size(n): n for every dim)
//   scale_factor   one value per spatial dim, or one for all: output = floor(in * scale)
//   exactly one of size and scale_factor
//   scales passed  the user's scale factors reach the kernel (which then steps by 1 / scale,
//                  not in / out) unless recompute_scale_factor is true, or the mode is Area
//                  (adaptive average pooling to the output size, which has no scales)
//   align_corners  only with Linear, Bilinear, Bicubic, Trilinear (default false); setting it,
//                  to either value, with another mode is an error, as in PyTorch
//   recompute_scale_factor(true) with size is an error
//
//   Tensor y = tg::interpolate(x, tg::InterpolateOptions().scale_factor(2).mode(tg::InterpolateMode::Nearest));
//
// Every mode is differentiable (and twice) in input. Dtypes: float32, float64, bfloat16, float16.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "../../framework/tensor.h"

namespace tg {

enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear, Bicubic, Trilinear, Area };

// PyTorch's name of the mode: "nearest", "nearest-exact", "linear", ...
const char* interpolate_mode_name(InterpolateMode mode);

class InterpolateOptions {
 public:
  InterpolateOptions& size(std::vector<int64_t> s) {
    size_ = std::move(s);
    size_is_scalar_ = false;
    return *this;
  }
  InterpolateOptions& size(int64_t s) { size_ = std::vector<int64_t>{s}; size_is_scalar_ = true; return *this; }
  InterpolateOptions& scale_factor(std::vector<double> s) {
    scale_ = std::move(s);
    scale_is_scalar_ = false;
    return *this;
  }
  InterpolateOptions& scale_factor(double s) { scale_ = std::vector<double>{s}; scale_is_scalar_ = true; return *this; }
  InterpolateOptions& mode(InterpolateMode m) { mode_ = m; return *this; }
  InterpolateOptions& align_corners(bool on) { align_corners_ = on; return *this; }
  InterpolateOptions& recompute_scale_factor(bool on) { recompute_scale_factor_ = on; return *this; }

  const std::optional<std::vector<int64_t>>& size() const { return size_; }
  const std::optional<std::vector<double>>& scale_factor() const { return scale_; }
  InterpolateMode mode() const { return mode_; }
  const std::optional<bool>& align_corners() const { return align_corners_; }
  const std::optional<bool>& recompute_scale_factor() const { return recompute_scale_factor_; }
  // Whether size / scale_factor was given as one value for every spatial dim.
  bool size_is_scalar() const { return size_is_scalar_; }
  bool scale_factor_is_scalar() const { return scale_is_scalar_; }

 private:
  std::optional<std::vector<int64_t>> size_;
  std::optional<std::vector<double>> scale_;
  bool size_is_scalar_ = false, scale_is_scalar_ = false;
  InterpolateMode mode_ = InterpolateMode::Nearest;  // PyTorch's default
  std::optional<bool> align_corners_;
  std::optional<bool> recompute_scale_factor_;
};

Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

// The two short calls, bilinear (4-D input): to a size, or by a scale factor (output size
// floor(in * scale), the scale itself passed on: recompute_scale_factor false).
Tensor interpolate(const Tensor& input, std::array<int64_t, 2> size, bool align_corners = false);
Tensor interpolate(const Tensor& input, double scale_factor, bool align_corners = false);

}  // namespace tg
