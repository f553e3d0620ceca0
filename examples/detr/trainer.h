// The detector demo's training run as a library call (train_detr's main parses flags into
// TrainOptions and calls run_training; the smoke test calls it directly).
//
// Scenes: training scene i of epoch e is scene e * train_scenes + i of the train split's
// generator (fresh scenes every epoch, identical on resume); validation scenes are the first
// val_scenes of the test split's generator, the same every epoch.
// Files in `out`: checkpoint.safetensors (each epoch, atomic), history.csv, curves.png (gnuplot),
// val_scenes.png (predicted and true boxes).
//
// Data parallel (started by mpirun after tg::dist::init()): every process trains the same model
// (DistributedDataParallel) on its share of each global batch of batch_size scenes (rank r takes
// scenes r * batch_size / P onward), so the batches, the learning rate and the scenes are those of
// one process; the box losses are normalised by the global batch's objects (as DETR). Only rank 0
// shows progress, evaluates and writes files; every rank reads the checkpoint on --resume (the
// folder must be visible to all: one machine, or a shared file system), so a run can resume with
// any number of processes.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "curves.h"
#include "detector.h"
#include "detr_loss.h"
#include "scenes.h"

namespace tg::detr {

struct TrainOptions {
  int epochs = 30;
  int64_t batch_size = 16;
  int threads = 2;
  uint64_t seed = 0;
  std::string data_dir = data::kFashionMnistDir;
  std::string out = "detr_run";
  bool resume = false;     // continue from out/checkpoint.safetensors
  bool eval_only = false;  // evaluate out/checkpoint.safetensors; write no checkpoint
  std::string model = "deformable";  // "patch" (plain DETR) and "tiny" (an MLP, for tests) too
  // "float32", or "bf16": the forward and the loss of each step, and the evaluation, under
  // AutocastGuard(BFloat16) (framework/autocast.h), as a PyTorch user wraps them in
  // torch.autocast("cpu", dtype=torch.bfloat16); backward and the optimizer step outside it.
  std::string precision = "float32";
  int64_t train_scenes = 4096;  // per epoch
  int64_t val_scenes = 256;
  int64_t num_queries = 16;
  int64_t hidden = 256;         // TinyDetector's width
  double lr = 3e-4, weight_decay = 1e-4, clip = 0.1;  // DETR's AdamW decay and clip; a higher lr for a small model
  double sheet_score = 0.5;     // predictions drawn on the sheet when their score reaches this
  int64_t sheet_scenes = 16;
  SceneOptions scenes;
  DetrLossOptions loss;
  bool progress = true;         // the progress bar (stderr)
  // Data parallel (mpirun): DistributedDataParallel's bucket sizes. The detector's gradients are
  // 2.7 MB: in PyTorch's 25 MB buckets all but the first MB form one bucket that is ready only
  // when backward ends, so nothing overlaps (0-12% hidden measured); 0.25 MB buckets start as
  // backward goes and hide 83-97% (bench/README.md). The first bucket stays PyTorch's 1 MB.
  DistributedDataParallelOptions ddp{/*bucket_cap_mb=*/0.25};
};

// Throws tg::Error naming the flag when options make no sense (epochs < 1, batch_size < 1,
// threads < 1, resume with eval_only, an unknown model, scene sizes the canvas cannot hold, ...).
void validate_options(const TrainOptions& options);

// Builds the detector options name (options.model); throws on an unknown name.
std::unique_ptr<Detector> make_detector(const TrainOptions& options);

struct TrainResult {
  std::vector<EpochRecord> history;  // every epoch so far (including those before a resume)
  MeanAP last_eval;
  int first_epoch = 1;               // the first epoch this call trained
};

// The whole run. Progress and messages go to `log`. Throws tg::Error with a clear message on
// bad input: missing or corrupt dataset, corrupt or mismatched checkpoint, unwritable out.
TrainResult run_training(const TrainOptions& options, std::ostream& log);

// mAP of a model on validation scenes (no grad, eval mode), and their predictions.
MeanAP evaluate(Detector& model, const SceneGenerator& val, int64_t count, int64_t batch_size,
                std::vector<DetectionBox>* detections = nullptr);

}  // namespace tg::detr
