#include "checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace tg::detr {
namespace {
const std::string kModel = "model.", kOptimizer = "optimizer.";
const char* const kTrainingFlags = "training_flags";

std::string flags_text(const std::vector<std::pair<std::string, std::string>>& flags) {
  std::string text;
  for (const auto& [flag, value] : flags) text += flag + " " + value + "\n";
  return text;
}

std::vector<std::pair<std::string, std::string>> parse_flags(const std::string& path, const std::string& text) {
  std::vector<std::pair<std::string, std::string>> flags;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string::npos)
      throw Error("checkpoint " + path + " has a bad training flag line '" + line + "', expected '<flag> <value>'");
    flags.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return flags;
}

// A NaN or infinite weight or optimizer buffer cannot come from a healthy run (the trainer
// stops when the loss is not finite), and the model would report mAP 0 or fail in the matching.
void check_finite(const std::string& path, const std::string& name, const Tensor& t) {
  if (!is_floating(t.dtype())) return;
  const std::vector<double> values = t.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw Error("checkpoint " + path + ": tensor '" + name + "' holds a non-finite value (" +
                  std::to_string(values[i]) + " at element " + std::to_string(i) +
                  "): expected finite weights and optimizer state");
}
}  // namespace

void save_checkpoint(const std::string& path, const Detector& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  StateDict all;
  for (const auto& [name, t] : model.state_dict()) all.emplace_back(kModel + name, t);
  for (const auto& [name, t] : optimizer.state_dict()) all.emplace_back(kOptimizer + name, t);
  SafetensorsMetadata meta = {{"format", kCheckpointFormat},
                              {"epoch", std::to_string(info.epoch)},
                              {"model_config", info.model_config},
                              {"history", history_csv(info.history)}};
  if (!info.training_flags.empty()) meta[kTrainingFlags] = flags_text(info.training_flags);
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
  // Checkpoints written before the flags were stored have no such key: they still load (and
  // resume unchecked, see the trainer).
  if (auto it = file.metadata.find(kTrainingFlags); it != file.metadata.end())
    info.training_flags = parse_flags(path, it->second);

  StateDict model_part, optimizer_part;
  for (auto& [name, t] : file.tensors) {
    check_finite(path, name, t);
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
