// Stops a training run that has diverged: with too high a learning rate the loss overflows to
// inf or NaN within a few steps, every later step computes NaN, and the run would end with
// "train loss nan" and exit 0. As train_detr's trainer does, a loss that is not finite ends the
// run with a tg::Error naming where it happened and what to try.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <tapegrad/tapegrad.h>

namespace tg::examples {

// Throws tg::Error when `loss` (of the step `step`, counted from 1, of the epoch `epoch`) is not
// finite. `what` names the model when a program trains several ("" when it trains one).
inline void check_loss_finite(double loss, int epoch, int64_t step, const std::string& what = "") {
  TG_CHECK(std::isfinite(loss), "training diverged", what.empty() ? "" : " (" + what + ")", ": the loss is ", loss,
           " at epoch ", epoch, " step ", step, "; try a lower --lr");
}

// Throws tg::Error when a parameter holds an inf or a NaN after epoch `epoch`: the last step of
// an epoch can diverge after its loss was checked, and the test accuracy of such a model means
// nothing. (x * 0 is 0 for every finite x and NaN for inf and NaN, so one sum says it.)
inline void check_parameters_finite(Module& model, int epoch, const std::string& what = "") {
  NoGradGuard no_grad;
  for (const Tensor& p : model.parameters())
    TG_CHECK(std::isfinite(sum(mul(p, 0.0)).item()), "training diverged", what.empty() ? "" : " (" + what + ")",
             ": a parameter is not finite after epoch ", epoch, "; try a lower --lr");
}

}  // namespace tg::examples
