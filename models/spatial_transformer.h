// A spatial-transformer classifier (Jaderberg et al., 2015) for 28x28 single-channel images,
// built from Linear layers: a localisation network predicts an affine theta per image,
// affine_grid + grid_sample resample the image with it, and a classifier reads the result.
// (An MLP on the pixels where the paper uses convolutions: the pieces are the same.)
#pragma once

#include "../framework/random.h"
#include "linear.h"
#include "module.h"
#include "sequential.h"

namespace tg {

class SpatialTransformerClassifier : public Module {
 public:
  // localisation: Linear(784, loc_hidden), ReLU, Linear(loc_hidden, 6); classifier:
  // MLP({784, hidden, 10}). The last localisation layer starts at weight 0 and bias
  // (1, 0, 0, 0, 1, 0), so training starts from the identity transform (as PyTorch's STN
  // tutorial does): the classifier first sees the images unchanged.
  SpatialTransformerClassifier(int64_t loc_hidden = 64, int64_t hidden = 256, DType dtype = DType::Float32,
                               Generator* gen = nullptr);
  std::string name() const override { return "SpatialTransformerClassifier"; }
  // images (B, 28, 28), (B, 1, 28, 28) or (B, 784) -> logits (B, 10).
  Tensor forward(const Tensor& images) override;
  Tensor theta(const Tensor& images);    // (B, 2, 3)
  Tensor rectify(const Tensor& images);  // (B, 1, 28, 28): the images the classifier reads

  std::shared_ptr<Linear> loc1, loc2;
  std::shared_ptr<MLP> classifier;
};

// Random affine distortions of images (B, H, W) (float32 or float64), with zeros outside:
// each image is rotated by an angle uniform in [-max_degrees, max_degrees], scaled by a factor
// uniform in [min_scale, max_scale] and shifted by up to max_shift (in [-1, 1] image units)
// along each axis. Not recorded. Deterministic for a given generator state.
Tensor random_affine_distort(const Tensor& images, Generator& gen, double max_degrees = 45, double min_scale = 0.6,
                             double max_scale = 1.0, double max_shift = 0.25);

}  // namespace tg
