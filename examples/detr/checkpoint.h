// The demo's checkpoint: one safetensors file holding the model ("model.<name>"), the
// optimizer ("optimizer.<key>", Optimizer::state_dict) and, in the metadata, the format tag,
// the last finished epoch, the model's config string, the training history (CSV text) and the
// flags that decide the training trajectory ("training_flags": one "<flag> <value>" a line).
// It is written atomically (temporary file + rename), so a crash or a failed write leaves the
// previous checkpoint intact; loading validates everything and throws tg::Error with the path.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "curves.h"
#include "detector.h"

namespace tg::detr {

inline constexpr const char* kCheckpointFormat = "tapegrad-detr-demo/1";

struct CheckpointInfo {
  int epoch = 0;
  std::string model_config;
  std::vector<EpochRecord> history;
  // (flag, value) pairs, e.g. ("--lr", "0.001"). Empty when loaded from a checkpoint written
  // before train_detr stored them; an empty list is not written.
  std::vector<std::pair<std::string, std::string>> training_flags;
};

void save_checkpoint(const std::string& path, const Detector& model, const Optimizer& optimizer,
                     const CheckpointInfo& info);

// Loads into model and optimizer after checking the format tag, that the checkpoint's model
// config equals model.config() and that every floating tensor is finite (a NaN weight would
// evaluate to mAP 0 or fail deep in the matching). The training flags are returned, not
// checked: only the caller knows which run it continues. The model copies nothing unless all its tensors fit; after a
// throw the caller discards both (train_detr exits), since the optimizer may have failed after
// the model loaded.
CheckpointInfo load_checkpoint(const std::string& path, Detector& model, Optimizer& optimizer);

}  // namespace tg::detr
