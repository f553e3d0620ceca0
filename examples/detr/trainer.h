// The detector demo's training run as a library call (train_detr's main parses flags into
// TrainOptions and calls run_training; the smoke test calls it directly).
//
// Scenes: training scene i of epoch e is scene e * train_scenes + i of the train split's
// generator (fresh scenes every epoch, identical on resume); validation scenes are the first
// val_scenes of the test split's generator, the same every epoch.
// Files in `out`: checkpoint.safetensors (each epoch, atomic), history.csv, curves.png (gnuplot),
// val_scenes.png (predicted and true boxes), and .train_detr.lock, locked (flock) while a run
// uses the folder so that a second run on it is refused. The folder is created only once the
// run's checks (flags, checkpoint, data) have passed.
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
#include <utility>
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

// --canvas: the one source of the rule, for the check and for train_detr's help. A canvas
// holds the largest item (scenes.max_side), is a multiple of canvas_multiple(model) (the
// deformable model's coarsest stride, the patch model's patch side; 1 for tiny) and lies in
// [kMinCanvas, kMaxCanvas].
inline constexpr int64_t kMinCanvas = 16, kMaxCanvas = 512;
int64_t canvas_multiple(const std::string& model);
int64_t min_canvas(const std::string& model, const SceneOptions& scenes);
std::string canvas_help(const SceneOptions& scenes);  // "scene side in pixels, up to 512: deformable from 48 ..."

// The flags that decide a run's trajectory, as ("--lr", "0.001") pairs in a fixed order, with
// values that round-trip exactly. The checkpoint stores them; --resume refuses other values.
std::vector<std::pair<std::string, std::string>> training_flags(const TrainOptions& options);

// Throws tg::Error naming the flag when options make no sense (epochs < 1, batch_size < 1,
// threads < 1, resume with eval_only, an unknown model, scene sizes the canvas cannot hold, ...).
void validate_options(const TrainOptions& options);

// Builds the detector options name (options.model); throws on an unknown name.
std::unique_ptr<Detector> make_detector(const TrainOptions& options);

struct TrainResult {
  std::vector<EpochRecord> history;  // every epoch so far (including those before a resume)
  MeanAP last_eval;                  // the last epoch's; when nothing was trained, the checkpoint's
  int first_epoch = 1;               // the first epoch this call trained
};

// The whole run. Progress and messages go to `log`. Throws tg::Error with a clear message on
// bad input: missing or corrupt dataset, corrupt or mismatched checkpoint (model, training flags,
// non-finite values), unwritable out or out in use by another run.
TrainResult run_training(const TrainOptions& options, std::ostream& log);

// mAP of a model on validation scenes (no grad, eval mode), and their predictions.
MeanAP evaluate(Detector& model, const SceneGenerator& val, int64_t count, int64_t batch_size,
                std::vector<DetectionBox>* detections = nullptr);

}  // namespace tg::detr
