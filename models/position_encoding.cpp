// Computed in double and rounded once to the requested dtype: the values are fixed inputs, so
// float32 results are within one rounding of the exact values. PyTorch's float32 arithmetic is
// not: it differs by up to 1e-5 on large images, and on a fully padded row with normalize its
// arguments reach 3e6, where float32 is spaced 0.25 apart (both are then meaningless).
#include "position_encoding.h"

#include <vector>

namespace tg {

PositionEmbeddingSine::PositionEmbeddingSine(int64_t num_pos_feats_, double temperature_, bool normalize_,
                                             double scale_)
    : num_pos_feats(num_pos_feats_), temperature(temperature_), normalize(normalize_), scale(scale_) {
  TG_CHECK(num_pos_feats > 0 && num_pos_feats % 2 == 0,
           "PositionEmbeddingSine: expected a positive even num_pos_feats, got ", num_pos_feats);
  TG_CHECK(temperature > 0, "PositionEmbeddingSine: expected a positive temperature, got ", temperature);
}

Tensor PositionEmbeddingSine::forward(const Tensor& mask, DType dtype) {
  TG_CHECK(mask.defined() && mask.dim() == 3, "PositionEmbeddingSine: expected mask of shape (B, H, W), got ",
           describe_shape(mask));
  TG_CHECK(dtype == DType::Float32 || dtype == DType::Float64,
           "PositionEmbeddingSine: expected a floating dtype");
  const int64_t B = mask.size(0), H = mask.size(1), W = mask.size(2), F = num_pos_feats;
  const std::vector<double> m = mask.to(DType::Float64).to_vector<double>();
  // y_embed, x_embed: running counts of valid pixels down each column and along each row.
  std::vector<double> ye(m.size()), xe(m.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        const size_t k = static_cast<size_t>((b * H + i) * W + j);
        const double valid = m[k] != 0 ? 0.0 : 1.0;
        ye[k] = valid + (i > 0 ? ye[k - static_cast<size_t>(W)] : 0.0);
        xe[k] = valid + (j > 0 ? xe[k - 1] : 0.0);
      }
  if (normalize) {
    const double eps = 1e-6;
    std::vector<double> yn(ye), xn(xe);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j) {
          const size_t k = static_cast<size_t>((b * H + i) * W + j);
          yn[k] = (ye[k] - 0.5) / (ye[static_cast<size_t>((b * H + H - 1) * W + j)] + eps) * scale;
          xn[k] = (xe[k] - 0.5) / (xe[static_cast<size_t>((b * H + i) * W + W - 1)] + eps) * scale;
        }
    ye.swap(yn);
    xe.swap(xn);
  }
  std::vector<double> dim_t(static_cast<size_t>(F));
  for (int64_t c = 0; c < F; ++c)
    dim_t[static_cast<size_t>(c)] = std::pow(temperature, 2.0 * static_cast<double>(c / 2) / static_cast<double>(F));
  std::vector<double> out(static_cast<size_t>(B * 2 * F * H * W));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < F; ++c) {
      const double d = dim_t[static_cast<size_t>(c)];
      for (int64_t k = 0; k < H * W; ++k) {
        const size_t src = static_cast<size_t>(b * H * W + k);
        const double y = ye[src] / d, x = xe[src] / d;
        out[static_cast<size_t>(((b * 2 * F) + c) * H * W + k)] = c % 2 == 0 ? std::sin(y) : std::cos(y);
        out[static_cast<size_t>(((b * 2 * F) + F + c) * H * W + k)] = c % 2 == 0 ? std::sin(x) : std::cos(x);
      }
    }
  return from_vector(out, {B, 2 * F, H, W}).to(dtype);
}

}  // namespace tg
