#include "checkpoint.h"

#include "../framework/safetensors.h"

namespace tg {

namespace {
const std::string kReserved = "tapegrad.";
const std::string kFormatKey = "tapegrad.format", kOptimizerKey = "tapegrad.optimizer",
                  kSchedulerKey = "tapegrad.scheduler";
const char* const kParts[] = {"model.", "optimizer.", "scheduler.", "generator."};

void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& part) {
  for (const auto& [name, t] : part) out.emplace_back(prefix + name, t);
}

// The file's tensors split by part ("model", "optimizer", ...), prefixes removed.
std::map<std::string, StateDict> split_parts(const StateDict& tensors, const std::string& path) {
  std::map<std::string, StateDict> parts;
  for (const auto& [name, t] : tensors) {
    bool known = false;
    for (const char* prefix : kParts) {
      const std::string p = prefix;
      if (name.rfind(p, 0) == 0) {
        parts[p.substr(0, p.size() - 1)].emplace_back(name.substr(p.size()), t);
        known = true;
      }
    }
    TG_CHECK(known, "load_checkpoint: ", path, " has an unexpected tensor \"", name, "\"");
  }
  return parts;
}

const Tensor* find(const StateDict& part, const std::string& key) {
  for (const auto& e : part)
    if (e.first == key) return &e.second;
  return nullptr;
}

// The type name the file recorded for a part ("Adam", "OneCycleLR"), which must be `expected`.
void check_type(const SafetensorsMetadata& meta, const std::string& key, const std::string& what,
                const std::string& expected, const std::string& path) {
  auto it = meta.find(key);
  TG_CHECK(it != meta.end(), "load_checkpoint: ", path, " holds no ", what, " state (it was saved without one), but a ",
           expected, " was given to restore");
  TG_CHECK(it->second == expected, "load_checkpoint: ", path, " holds the state of a ", it->second, " ", what,
           ", not of a ", expected);
}
}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  TG_CHECK(ck.model != nullptr, "save_checkpoint: Checkpoint.model is null (the model is required)");
  SafetensorsMetadata meta;
  for (const auto& [key, value] : ck.metadata) {
    TG_CHECK(key.rfind(kReserved, 0) != 0, "save_checkpoint: metadata key \"", key, "\" starts with \"", kReserved,
             "\", which is reserved");
    meta[key] = value;
  }
  meta[kFormatKey] = kCheckpointFormat;
  StateDict all;
  add_prefixed(all, "model.", ck.model->state_dict());
  if (ck.optimizer) {
    add_prefixed(all, "optimizer.", ck.optimizer->state_dict());
    meta[kOptimizerKey] = ck.optimizer->name();
  }
  if (ck.scheduler) {
    add_prefixed(all, "scheduler.", ck.scheduler->state_dict());
    meta[kSchedulerKey] = ck.scheduler->name();
  }
  for (const auto& [name, gen] : ck.generators) {
    TG_CHECK(gen != nullptr, "save_checkpoint: generator \"", name, "\" is null");
    all.emplace_back("generator." + name, gen->get_state());
  }
  save_safetensors(path, all, meta);
}

void load_checkpoint(const std::string& path, Checkpoint& ck) {
  TG_CHECK(ck.model != nullptr, "load_checkpoint: Checkpoint.model is null (the model is required)");
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const std::exception& e) {
    throw Error("load_checkpoint: " + path + " cannot be read: " + e.what());
  }
  auto format = file.metadata.find(kFormatKey);
  TG_CHECK(format != file.metadata.end(), "load_checkpoint: ", path, " is not a tapegrad checkpoint (no \"",
           kFormatKey, "\" in its metadata)");
  TG_CHECK(format->second == kCheckpointFormat, "load_checkpoint: ", path, " has format \"", format->second,
           "\", expected \"", kCheckpointFormat, "\"");
  std::map<std::string, StateDict> parts = split_parts(file.tensors, path);

  // Everything checked that can be checked without changing anything.
  if (ck.optimizer) check_type(file.metadata, kOptimizerKey, "optimizer", ck.optimizer->name(), path);
  if (ck.scheduler) check_type(file.metadata, kSchedulerKey, "scheduler", ck.scheduler->name(), path);
  std::map<std::string, Generator> generators;
  for (const auto& [name, gen] : ck.generators) {
    TG_CHECK(gen != nullptr, "load_checkpoint: generator \"", name, "\" is null");
    const Tensor* state = find(parts["generator"], name);
    TG_CHECK(state != nullptr, "load_checkpoint: ", path, " has no state for generator \"", name, "\" (key \"generator.",
             name, "\")");
    try {
      generators[name].set_state(*state);
    } catch (const std::exception& e) {
      throw Error("load_checkpoint: " + path + ", generator." + name + ": " + e.what());
    }
  }
  StateDict optimizer_backup, scheduler_backup;
  if (ck.optimizer) {
    optimizer_backup = ck.optimizer->state_dict();
    // Optimizer::load_state_dict keeps hyperparameters the dict lacks; a checkpoint must have them all.
    for (const auto& [key, value] : optimizer_backup)
      TG_CHECK(key.rfind("param_groups.", 0) != 0 || find(parts["optimizer"], key), "load_checkpoint: ", path,
               " lacks the optimizer's \"optimizer.", key, "\"");
  }
  if (ck.scheduler) scheduler_backup = ck.scheduler->state_dict();

  // Each load checks its part before changing anything; the model, whose load is the largest,
  // comes last, and a failure rolls the optimizer and the scheduler back.
  const char* stage = "optimizer";
  try {
    if (ck.optimizer) ck.optimizer->load_state_dict(parts["optimizer"]);
    stage = "scheduler";
    if (ck.scheduler) ck.scheduler->load_state_dict(parts["scheduler"]);
    stage = "model";
    ck.model->load_state_dict(parts["model"], /*strict=*/true);
  } catch (const std::exception& e) {
    if (ck.scheduler) ck.scheduler->load_state_dict(scheduler_backup);
    if (ck.optimizer) ck.optimizer->load_state_dict(optimizer_backup);
    throw Error("load_checkpoint: " + path + " does not fit the " + stage + " (nothing was changed): " + e.what());
  }
  for (const auto& [name, gen] : ck.generators) *gen = generators.at(name);
  ck.metadata.clear();
  for (const auto& [key, value] : file.metadata)
    if (key.rfind(kReserved, 0) != 0) ck.metadata[key] = value;
}

}  // namespace tg
