// A spatial-transformer classifier (Jaderberg et al., 2015) for 28x28 single-channel images,
// the network of PyTorch's spatial transformer tutorial: a convolutional localisation network
// predicts an affine theta per image, affine_grid + grid_sample resample the image with it,
// and a small CNN classifies the result. (No dropout, unlike the tutorial: the example and its
// tests stay deterministic.)
#pragma once

#include "../framework/random.h"
#include "conv.h"
#include "linear.h"
#include "module.h"
#include "pool.h"
#include "sequential.h"

namespace tg {

// The tutorial's classifier: Conv2d(1, 10, 5) MaxPool2d(2) ReLU Conv2d(10, 20, 5) MaxPool2d(2)
// ReLU -> (B, 20, 4, 4) flattened to 320 -> Linear(320, hidden) ReLU Linear(hidden, 10).
class ConvClassifier : public Module {
 public:
  explicit ConvClassifier(int64_t hidden = 50, DType dtype = DType::Float32, Generator* gen = nullptr);
  std::string name() const override { return "ConvClassifier"; }
  // images (B, 28, 28), (B, 1, 28, 28) or (B, 784) -> logits (B, 10).
  Tensor forward(const Tensor& images) override;

  std::shared_ptr<Sequential> features;
  std::shared_ptr<MLP> head;
};

class SpatialTransformerClassifier : public Module {
 public:
  // localisation: Conv2d(1, 8, 7) MaxPool2d(2) ReLU Conv2d(8, 10, 5) MaxPool2d(2) ReLU ->
  // (B, 10, 3, 3) flattened to 90 -> Linear(90, loc_hidden) ReLU Linear(loc_hidden, 6).
  // The last layer starts at weight 0 and bias (1, 0, 0, 0, 1, 0), so training starts from
  // the identity transform (as the tutorial does): the classifier first sees the images
  // unchanged. classifier: ConvClassifier(hidden).
  SpatialTransformerClassifier(int64_t loc_hidden = 32, int64_t hidden = 50, DType dtype = DType::Float32,
                               Generator* gen = nullptr);
  std::string name() const override { return "SpatialTransformerClassifier"; }
  // images (B, 28, 28), (B, 1, 28, 28) or (B, 784) -> logits (B, 10).
  Tensor forward(const Tensor& images) override;
  Tensor theta(const Tensor& images);    // (B, 2, 3)
  Tensor rectify(const Tensor& images);  // (B, 1, 28, 28): the images the classifier reads
  // The localisation network's parameters (features and fc_loc), e.g. for their own learning rate.
  std::vector<Tensor> localisation_parameters() const;

  std::shared_ptr<Sequential> localization;  // the tutorial's names
  std::shared_ptr<MLP> fc_loc;
  std::shared_ptr<Linear> fc_loc_out;  // fc_loc's last layer, the one that starts at the identity
  std::shared_ptr<ConvClassifier> classifier;
};

// Random affine distortions of images (B, H, W) (float32 or float64), with zeros outside:
// each image is rotated by an angle uniform in [-max_degrees, max_degrees], scaled by a factor
// uniform in [min_scale, max_scale] and shifted by up to max_shift (in [-1, 1] image units)
// along each axis. Not recorded. Deterministic for a given generator state.
Tensor random_affine_distort(const Tensor& images, Generator& gen, double max_degrees = 45, double min_scale = 0.6,
                             double max_scale = 1.0, double max_shift = 0.25);

}  // namespace tg
