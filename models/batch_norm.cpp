#include "batch_norm.h"

#include "../ops/batch_norm/batch_norm.h"

namespace tg {

BatchNormBase::BatchNormBase(int64_t num_features_, double eps_, std::optional<double> momentum_, bool affine_,
                             bool track, DType dtype, const char* type_name)
    : num_features(num_features_), eps(eps_), momentum(momentum_), affine(affine_), track_running_stats(track) {
  TG_CHECK(num_features > 0, type_name, ": expected num_features to be positive, got ", num_features);
  TG_CHECK(eps >= 0, type_name, ": expected eps >= 0, got ", eps);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, dtype));
    bias = register_parameter("bias", zeros({num_features}, dtype));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}, dtype));
    running_var = register_buffer("running_var", ones({num_features}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
}

void BatchNormBase::complete_state(const std::string& prefix, StateDict& state) const {
  if (!track_running_stats) return;
  for (const auto& e : state)
    if (e.first == prefix + "num_batches_tracked") return;
  state.emplace_back(prefix + "num_batches_tracked", zeros({}, DType::Int64));
}

Tensor BatchNormBase::forward(const Tensor& x) {
  TG_CHECK(x.defined(), name(), ": expected a defined input");
  check_input_dim(x);
  TG_CHECK(x.size(1) == num_features, name(), ": expected input with ", num_features,
           " channels (dim 1), got shape ", format_shape(x.shape()));
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    // num_batches_tracked += 1, in place (a buffer: no history, the version bumped).
    num_batches_tracked.data<int64_t>()[0] += 1;
    num_batches_tracked.bump_version();
    if (!momentum) factor = 1.0 / static_cast<double>(num_batches_tracked.data<int64_t>()[0]);
  }
  // Batch statistics while training, and always when there are no running statistics.
  const bool use_batch_stats = is_training() || !track_running_stats;
  const bool pass_running = !is_training() || track_running_stats;
  return batch_norm(x, pass_running ? running_mean : Tensor(), pass_running ? running_var : Tensor(), weight, bias,
                    use_batch_stats, factor, eps);
}

void BatchNorm1d::check_input_dim(const Tensor& x) const {
  TG_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expected 2D (N, C) or 3D (N, C, L) input, got ", x.dim(),
           "D input of shape ", format_shape(x.shape()));
}

void BatchNorm2d::check_input_dim(const Tensor& x) const {
  TG_CHECK(x.dim() == 4, "BatchNorm2d: expected 4D input (N, C, H, W), got ", x.dim(), "D input of shape ",
           format_shape(x.shape()));
}

}  // namespace tg
