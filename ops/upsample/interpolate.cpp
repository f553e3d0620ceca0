// interpolate: the rules of PyTorch 1.13's F.interpolate (torch/nn/functional.py), then one
// kernel call. The kernels check their own arguments; this file checks what only the front end
// knows (the options, the mode against the rank) and names them as the user set them.
#include "interpolate.h"

#include <cmath>
#include <sstream>
#include <string>

#include "../../framework/check.h"
#include "../pool/pool.h"
#include "upsample.h"
#include "upsample_nearest.h"

namespace tg {

const char* interpolate_mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest: return "nearest";
    case InterpolateMode::NearestExact: return "nearest-exact";
    case InterpolateMode::Linear: return "linear";
    case InterpolateMode::Bilinear: return "bilinear";
    case InterpolateMode::Bicubic: return "bicubic";
    case InterpolateMode::Trilinear: return "trilinear";
    case InterpolateMode::Area: return "area";
  }
  return "?";
}

namespace {

constexpr const char* kOp = "interpolate";

// The one rank a mode needs, or 0 for the modes of every rank.
int rank_of(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Linear: return 3;
    case InterpolateMode::Bilinear:
    case InterpolateMode::Bicubic: return 4;
    case InterpolateMode::Trilinear: return 5;
    default: return 0;
  }
}

const char* dims_of(int64_t rank) {
  return rank == 3 ? "(N, C, L)" : rank == 4 ? "(N, C, H, W)" : "(N, C, D, H, W)";
}

// format_shape's brackets for scale factors
std::string list_str(const std::vector<double>& v) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  return s.str() + "]";
}
std::string list_str(const std::vector<int64_t>& v) { return format_shape(v); }

// One value per spatial dim: `scalar` values expand, lists must have K.
template <class V>
std::vector<V> per_dim(const char* what, const std::vector<V>& v, bool scalar, int K, const Shape& in) {
  if (scalar) return std::vector<V>(K, v[0]);
  TG_CHECK(v.size() == size_t(K), kOp, ": expected ", what, " to have ", K, K == 1 ? " value" : " values",
           " (one per spatial dim of input ", format_shape(in), "), got ", v.size(), " values ", list_str(v));
  return v;
}

// floor(in * scale) per dim, as PyTorch sizes the output from a scale factor.
IntList sizes_from_scales(const std::vector<double>& scales, bool scalar, const Shape& in, int K) {
  IntList out(K);
  for (int d = 0; d < K; ++d) {
    const double s = scales[d];
    TG_CHECK(std::isfinite(s) && s > 0, kOp, ": expected scale_factor to be a positive finite number, got ", s);
    const int64_t len = in[2 + d];
    const double size = std::floor(static_cast<double>(len) * s);
    // 2^63 as a double: a larger size (scale_factor 1e30) cannot be converted to int64.
    TG_CHECK(size < 9223372036854775808.0, kOp, ": expected scale_factor * input size to fit in int64, got ", s,
             " * ", len);
    out[d] = static_cast<int64_t>(size);
  }
  std::ostringstream given;
  if (scalar) given << scales[0];
  else given << list_str(scales);
  for (int d = 0; d < K; ++d)
    TG_CHECK(out[d] > 0, kOp, ": scale_factor ", given.str(), " turns the input size ",
             format_shape(Shape(in.begin() + 2, in.end())), " into an empty output ", format_shape(out));
  return out;
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateOptions& o) {
  TG_CHECK(input.defined(), kOp, ": expected a defined input");
  const InterpolateMode mode = o.mode();
  const char* mode_name = interpolate_mode_name(mode);
  const bool interpolating = rank_of(mode) != 0;
  TG_CHECK(interpolating || !o.align_corners(), kOp,
           ": align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, trilinear), "
           "got align_corners with mode '",
           mode_name, "'");
  const bool align_corners = o.align_corners().value_or(false);
  const Shape& in = input.shape();
  const int64_t rank = input.dim();
  TG_CHECK(rank >= 3 && rank <= 5, kOp, ": expected a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input ",
           "for mode '", mode_name, "', got ", format_shape(in));
  const int K = static_cast<int>(rank) - 2;
  TG_CHECK(!(o.size() && o.scale_factor()), kOp, ": expected only one of size and scale_factor, got both");
  TG_CHECK(o.size() || o.scale_factor(), kOp, ": expected size or scale_factor, got neither");
  const bool recompute = o.recompute_scale_factor().value_or(false);
  TG_CHECK(!(recompute && o.size()), kOp,
           ": recompute_scale_factor is not meaningful with an explicit size (set size or scale_factor)");
  TG_CHECK(!interpolating || rank_of(mode) == rank, kOp, ": mode '", mode_name, "' needs a ", rank_of(mode),
           "-D input ", dims_of(rank_of(mode)), ", got a ", rank, "-D input ", format_shape(in));

  IntList out;
  std::vector<std::optional<double>> scales(K);  // what the kernel is given: none by default
  if (o.size()) {
    out = per_dim("size", *o.size(), o.size_is_scalar(), K, in);
    for (int64_t v : out)
      TG_CHECK(v > 0, kOp, ": expected size to be positive, got ", list_str(out));
  } else {
    const std::vector<double> s = per_dim("scale_factor", *o.scale_factor(), o.scale_factor_is_scalar(), K, in);
    out = sizes_from_scales(s, o.scale_factor_is_scalar(), in, K);
    // Area has no scales: PyTorch recomputes for it whatever the option says.
    if (!recompute && mode != InterpolateMode::Area)
      for (int d = 0; d < K; ++d) scales[d] = s[d];
  }

  switch (mode) {
    case InterpolateMode::Nearest:
    case InterpolateMode::NearestExact: {
      const bool exact = mode == InterpolateMode::NearestExact;
      if (K == 1) return exact ? upsample_nearest_exact1d(input, {out[0]}, scales[0])
                               : upsample_nearest1d(input, {out[0]}, scales[0]);
      if (K == 2) return exact ? upsample_nearest_exact2d(input, {out[0], out[1]}, scales[0], scales[1])
                               : upsample_nearest2d(input, {out[0], out[1]}, scales[0], scales[1]);
      return exact ? upsample_nearest_exact3d(input, {out[0], out[1], out[2]}, scales[0], scales[1], scales[2])
                   : upsample_nearest3d(input, {out[0], out[1], out[2]}, scales[0], scales[1], scales[2]);
    }
    case InterpolateMode::Area:
      return K == 1 ? adaptive_avg_pool1d(input, out) : K == 2 ? adaptive_avg_pool2d(input, out)
                                                                : adaptive_avg_pool3d(input, out);
    case InterpolateMode::Bilinear:
      return upsample_bilinear2d(input, {out[0], out[1]}, align_corners, scales[0], scales[1]);
    case InterpolateMode::Linear:
      return upsample_linear1d(input, {out[0]}, align_corners, scales[0]);
    case InterpolateMode::Bicubic:
      return upsample_bicubic2d(input, {out[0], out[1]}, align_corners, scales[0], scales[1]);
    case InterpolateMode::Trilinear:
      return upsample_trilinear3d(input, {out[0], out[1], out[2]}, align_corners, scales[0], scales[1], scales[2]);
  }
  throw Error(std::string(kOp) + ": unknown mode " + std::to_string(static_cast<int>(mode)));
}

Tensor interpolate(const Tensor& input, std::array<int64_t, 2> size, bool align_corners) {
  return interpolate(input, InterpolateOptions()
                                .size({size[0], size[1]})
                                .mode(InterpolateMode::Bilinear)
                                .align_corners(align_corners));
}

Tensor interpolate(const Tensor& input, double scale_factor, bool align_corners) {
  return interpolate(input, InterpolateOptions()
                                .scale_factor(scale_factor)
                                .mode(InterpolateMode::Bilinear)
                                .align_corners(align_corners));
}

}  // namespace tg
