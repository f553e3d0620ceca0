// The test accuracy of a classifier, for the Fashion-MNIST examples (train_mlp, train_cnn).
#pragma once

#include <tapegrad/tapegrad.h>

#include <cstdint>
#include <vector>

namespace tg::examples {

// Fraction of the loader's samples whose arg-max logit is the label, in eval mode (train mode is
// restored after). flatten: the model takes [B, 784] rows instead of [B, 1, 28, 28] images.
inline double accuracy(Module& model, data::DataLoader& loader, bool flatten = false) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, seen = 0;
  for (const std::vector<Tensor>& batch : loader) {  // {images, labels [B]}
    Tensor logits = model.forward(flatten ? batch[0].flatten(1) : batch[0]);
    correct += sum(eq(argmax(logits, 1), batch[1])).item<int64_t>();
    seen += batch[1].size(0);
  }
  model.train();
  return seen == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(seen);
}

}  // namespace tg::examples
