// BatchNorm1d and BatchNorm2d over tg::batch_norm, as torch.nn.BatchNorm1d / BatchNorm2d.
//
// Parameters weight (ones) and bias (zeros) when affine; buffers running_mean (zeros),
// running_var (ones) and num_batches_tracked (int64, 0-d) when track_running_stats, registered
// in PyTorch's state_dict names and order: weight, bias, running_mean, running_var,
// num_batches_tracked.
//
// train(): normalises with the batch's statistics; with track_running_stats each forward adds 1
// to num_batches_tracked and moves the running statistics by momentum (momentum = std::nullopt:
// a cumulative average, factor 1 / num_batches_tracked, PyTorch's momentum=None).
// eval(): normalises with the running statistics; without track_running_stats there are none,
// and the batch's statistics are used in eval() too.
#pragma once

#include <optional>

#include "module.h"

namespace tg {

// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm); they differ in the input
// ranks they accept.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // A state without num_batches_tracked loads it as 0 (PyTorch's rule for dicts without version
  // metadata).
  void complete_state(const std::string& prefix, StateDict& state) const override;

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias;                                   // undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined without track_running_stats

 protected:
  BatchNormBase(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats, DType dtype, const char* type_name);
  // Throws a tg::Error naming the module and the shape when x's rank is not one it accepts.
  virtual void check_input_dim(const Tensor& x) const = 0;
};

// Input (N, C) or (N, C, L).
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, DType dtype = DType::Float32)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats, dtype, "BatchNorm1d") {}
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

// Input (N, C, H, W).
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, DType dtype = DType::Float32)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats, dtype, "BatchNorm2d") {}
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

}  // namespace tg
