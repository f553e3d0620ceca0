#include "checkpoint.h"

#include <cstdlib>

namespace tg::detr {
namespace {
const std::string kModel = "model.", kOptimizer = "optimizer.";
}

void save_checkpoint(const std::string& path, const Detector& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  StateDict all;
  for (const auto& [name, t] : model.state_dict()) all.emplace_back(kModel + name, t);
  for (const auto& [name, t] : optimizer.state_dict()) all.emplace_back(kOptimizer + name, t);
  SafetensorsMetadata meta = {{"format", kCheckpointFormat},
                              {"epoch", std::to_string(info.epoch)},
                              {"model_config", info.model_config},
                              {"history", history_csv(info.history)}};
  save_safetensors(path, all, meta);
}

CheckpointInfo load_checkpoint(const std::string& path, Detector& model, Optimizer& optimizer) {
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const std::exception& e) {
    throw Error("checkpoint " + path + " cannot be read: " + e.what());
  }
  auto meta = [&](const char* key) -> std::string {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      throw Error("checkpoint " + path + " is not a train_detr checkpoint (no '" + key + "' in its metadata)");
    return it->second;
  };
  if (meta("format") != kCheckpointFormat)
    throw Error("checkpoint " + path + " has format '" + meta("format") + "', expected '" + kCheckpointFormat + "'");
  if (meta("model_config") != model.config())
    throw Error("checkpoint " + path + " holds a different model: '" + meta("model_config") + "', this run builds '" +
                model.config() + "' (use the flags it was trained with, or another --out)");
  CheckpointInfo info;
  info.model_config = meta("model_config");
  char* end = nullptr;
  const std::string epoch = meta("epoch");
  const long e = std::strtol(epoch.c_str(), &end, 10);
  if (epoch.empty() || *end != '\0' || e < 0 || e > 1000000)
    throw Error("checkpoint " + path + " has a bad epoch '" + epoch + "'");
  info.epoch = static_cast<int>(e);
  try {
    info.history = parse_history_csv(meta("history"));
  } catch (const Error& err) {
    throw Error("checkpoint " + path + ": " + err.what());
  }

  StateDict model_part, optimizer_part;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kModel, 0) == 0)
      model_part.emplace_back(name.substr(kModel.size()), t);
    else if (name.rfind(kOptimizer, 0) == 0)
      optimizer_part.emplace_back(name.substr(kOptimizer.size()), t);
    else
      throw Error("checkpoint " + path + " has an unexpected tensor '" + name + "'");
  }
  try {  // strict: every name, shape and dtype must match (the model copies nothing otherwise)
    model.load_state_dict(model_part, /*strict=*/true);
    optimizer.load_state_dict(optimizer_part);
  } catch (const std::exception& err) {
    throw Error("checkpoint " + path + " does not fit this model and optimizer: " + err.what());
  }
  return info;
}

}  // namespace tg::detr
