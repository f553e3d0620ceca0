// One-call checkpoints of a whole training run: the model, the optimizer, the LR scheduler, the
// random generators and your own metadata, in ONE safetensors file written atomically, so that
// a run stopped and resumed from it continues to the same bits as one that never stopped.
//
//   tg::Checkpoint ck;
//   ck.model = net.get();          // required
//   ck.optimizer = &opt;           // optional, as is ck.scheduler
//   ck.scheduler = &sched;
//   ck.metadata["epoch"] = "3";
//   tg::save_checkpoint("run.safetensors", ck);
//   ...
//   tg::load_checkpoint("run.safetensors", ck);   // into the same kind of objects, made afresh
//   int epoch = std::stoi(ck.metadata.at("epoch"));
//
// The file: tensors "model.<name>" (Module::state_dict), "optimizer.<key>"
// (Optimizer::state_dict), "scheduler.<key>" (LRScheduler::state_dict), "generator.<name>"
// (Generator::get_state); metadata: yours, plus "tapegrad.format" and the optimizer's and the
// scheduler's type names under "tapegrad.optimizer" and "tapegrad.scheduler". Any safetensors
// reader opens it (PyTorch: safetensors.torch.load_file).
//
// It lives in models/ (not framework/) because it takes a Module.
#pragma once

#include <map>
#include <string>

#include "../framework/lr_scheduler.h"
#include "../framework/optim.h"
#include "../framework/random.h"
#include "module.h"

namespace tg {

inline constexpr const char* kCheckpointFormat = "tapegrad-checkpoint/1";

struct Checkpoint {
  Module* model = nullptr;            // required
  Optimizer* optimizer = nullptr;     // optional
  LRScheduler* scheduler = nullptr;   // optional
  // The generators whose state is saved and restored, by name. By default the default
  // generator: what dropout, the initialisers, rand/randn/randperm draw from unless given one.
  // Add your own (the one that shuffles your batches): ck.generators["data"] = &shuffle_gen;
  std::map<std::string, Generator*> generators = {{"default", &default_generator()}};
  // Yours, saved as the file's string metadata; load_checkpoint replaces it with the file's.
  // Keys starting with "tapegrad." are reserved.
  std::map<std::string, std::string> metadata;
};

// Writes everything `checkpoint` points at to `path` atomically (a temporary file beside it,
// flushed, then renamed: a crash leaves the previous file or the new one, never half of one).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Restores what `checkpoint` points at from `path`. The file is validated first (readable,
// the format tag, every part asked for present and fitting: the model's keys, shapes and
// dtypes, the optimizer's type and parameter count, the scheduler's type and groups, each
// generator named); a problem throws tg::Error naming the file and the key, and leaves the
// model, the optimizer, the scheduler and the generators as they were. Parts the file holds but
// `checkpoint` does not ask for (an optimizer when loading weights to evaluate) are ignored.
void load_checkpoint(const std::string& path, Checkpoint& checkpoint);

}  // namespace tg
