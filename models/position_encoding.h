// PositionEmbeddingSine: DETR's fixed sine/cosine encoding of pixel positions, in
// Deformable-DETR's variant (models/position_encoding.py): with normalize, the cumulative
// counts of valid pixels are shifted by -0.5 and divided by the image's valid extent, so
// padding does not stretch the encoding. No parameters; nothing is recorded on the tape.
#pragma once

#include <cmath>

#include "module.h"

namespace tg {

class PositionEmbeddingSine : public Module {
 public:
  // scale defaults to 2 pi (used only with normalize), as DETR.
  explicit PositionEmbeddingSine(int64_t num_pos_feats = 64, double temperature = 10000, bool normalize = false,
                                 double scale = 2 * M_PI);
  std::string name() const override { return "PositionEmbeddingSine"; }

  // mask (B, H, W), non-zero marks padding -> (B, 2 * num_pos_feats, H, W) in `dtype`: the
  // y encoding in the first num_pos_feats channels, then x; within each, sin and cos
  // interleaved (channel 2i is sin(pos / T^(2i/F)), 2i + 1 its cos).
  Tensor forward(const Tensor& mask, DType dtype);

  int64_t num_pos_feats;
  double temperature;
  bool normalize;
  double scale;

 private:
  using Module::forward;  // the single-tensor forward does not apply (see Module::forward)
};

}  // namespace tg
