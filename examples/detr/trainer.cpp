#include "trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <vector>

#include "checkpoint.h"
#include "common/busy_machine.h"
#include "deformable_detector.h"
#include "image_sheet.h"
#include "patch_detr.h"

namespace tg::detr {
namespace fs = std::filesystem;

void validate_options(const TrainOptions& o) {
  TG_CHECK(o.epochs >= 1, "--epochs: expected at least 1, got ", o.epochs);
  TG_CHECK(o.batch_size >= 1, "--batch-size: expected at least 1, got ", o.batch_size);
  TG_CHECK(o.threads >= 1 && o.threads <= 1024, "--threads: expected 1 to 1024, got ", o.threads);
  TG_CHECK(o.batch_size % dist::world_size() == 0, "--batch-size: expected a multiple of the ", dist::world_size(),
           " processes (each takes an equal share), got ", o.batch_size);
  TG_CHECK(!(o.resume && o.eval_only), "--resume and --eval-only: choose one (--eval-only already loads the checkpoint)");
  TG_CHECK(!o.out.empty(), "--out: expected a folder, got an empty path");
  // Every step takes a full batch and the scenes left over would never be trained on (DETR's
  // training sampler drops the last partial batch too). Here the count is a flag, not a dataset's
  // size, so a remainder is a mistake: refuse it instead of logging scenes that are not used.
  TG_CHECK(o.train_scenes >= o.batch_size && o.train_scenes % o.batch_size == 0,
           "--train-scenes: expected a multiple of --batch-size (", o.batch_size, "), got ", o.train_scenes);
  TG_CHECK(o.val_scenes >= 1, "--val-scenes: expected at least 1, got ", o.val_scenes);
  TG_CHECK(o.num_queries >= o.scenes.max_items, "--queries: expected at least ", o.scenes.max_items,
           " (the most objects a scene holds), got ", o.num_queries);
  TG_CHECK(o.lr > 0 && o.weight_decay >= 0 && o.clip >= 0, "--lr must be positive, weight decay and clip non-negative");
  TG_CHECK(o.model == "tiny" || o.model == "patch" || o.model == "deformable",
           "--model: expected 'deformable', 'patch' or 'tiny', got '", o.model, "'");
  TG_CHECK(o.precision == "float32" || o.precision == "bf16", "--precision: expected 'float32' or 'bf16', got '",
           o.precision, "'");
  const int64_t step = canvas_multiple(o.model), least = min_canvas(o.model, o.scenes);
  TG_CHECK(o.scenes.canvas >= least && o.scenes.canvas <= kMaxCanvas && o.scenes.canvas % step == 0,
           "--canvas: the ", o.model, " model expects ", least, " to ", kMaxCanvas, " pixels",
           step > 1 ? " in steps of " + std::to_string(step) : std::string(), " (items are up to ", o.scenes.max_side,
           " pixels), got ", o.scenes.canvas);
}

int64_t canvas_multiple(const std::string& model) {
  // The models' own constraints, from their default options: the deformable backbone's coarsest
  // stride (4, doubled per further level), the patch model's patch side.
  if (model == "deformable") return int64_t{4} << (DeformableDetectorOptions{}.channels.size() - 1);
  if (model == "patch") return PatchDetrOptions{}.patch;
  return 1;
}

int64_t min_canvas(const std::string& model, const SceneOptions& scenes) {
  const int64_t step = canvas_multiple(model);
  const int64_t least = std::max(kMinCanvas, scenes.max_side);  // the largest item must fit
  return (least + step - 1) / step * step;
}

std::string canvas_help(const SceneOptions& scenes) {
  std::string help = "scene side in pixels, up to " + std::to_string(kMaxCanvas) + ":";
  for (const char* model : {"deformable", "patch", "tiny"}) {
    const int64_t step = canvas_multiple(model);
    help += std::string(" ") + model + " from " + std::to_string(min_canvas(model, scenes)) +
            (step > 1 ? " in steps of " + std::to_string(step) : std::string()) + ",";
  }
  help.back() = ' ';
  return help + "(items are up to " + std::to_string(scenes.max_side) + " pixels)";
}

namespace {
// The shortest text that reads back as the same double (%.17g always does, but prints 0.001
// as 0.0010000000000000000208).
std::string exact_text(double v) {
  char text[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> training_flags(const TrainOptions& o) {
  // What a resumed epoch computes depends on these: the scenes (--seed, --train-scenes,
  // --batch-size), the arithmetic (--precision) and the step size (--lr; the optimizer state
  // restores the saved lr, so a new one would be silently ignored). The model's flags (--model,
  // --canvas, --queries) are in its config, checked by load_checkpoint. Free to change: --epochs
  // (the run's length), --threads and the number of processes (results do not depend on them),
  // --val-scenes (evaluation only), --data-dir (the same files may move), --bucket-mb and the
  // output options.
  return {{"--batch-size", std::to_string(o.batch_size)},
          {"--lr", exact_text(o.lr)},
          {"--precision", o.precision},
          {"--seed", std::to_string(o.seed)},
          {"--train-scenes", std::to_string(o.train_scenes)}};
}

std::unique_ptr<Detector> make_detector(const TrainOptions& o) {
  Generator gen(o.seed);
  if (o.model == "patch") {
    PatchDetrOptions p;
    p.canvas = o.scenes.canvas;
    p.num_queries = o.num_queries;
    return std::make_unique<PatchDetr>(p, &gen);
  }
  if (o.model == "deformable") {
    DeformableDetectorOptions d;
    d.canvas = o.scenes.canvas;
    d.num_queries = o.num_queries;
    return std::make_unique<DeformableDetector>(d, &gen);
  }
  TG_CHECK(o.model == "tiny", "--model: expected 'deformable', 'patch' or 'tiny', got '", o.model, "'");
  TinyDetectorOptions t;
  t.canvas = o.scenes.canvas;
  t.num_queries = o.num_queries;
  t.hidden = o.hidden;
  return std::make_unique<TinyDetector>(t, &gen);
}

MeanAP evaluate(Detector& model, const SceneGenerator& val, int64_t count, int64_t batch_size,
                std::vector<DetectionBox>* detections) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<GroundTruthBox> truth;
  std::vector<DetectionBox> dets;
  for (int64_t first = 0; first < count; first += batch_size) {
    SceneBatch batch = make_batch(val, first, std::min(batch_size, count - first));
    for (size_t i = 0; i < batch.scenes.size(); ++i)
      for (size_t k = 0; k < batch.scenes[i].classes.size(); ++k)
        truth.push_back({first + static_cast<int64_t>(i), batch.scenes[i].classes[k], batch.scenes[i].boxes[k]});
    std::vector<DetectionBox> d = postprocess(model.detect(batch.images), val.options().canvas, first);
    dets.insert(dets.end(), d.begin(), d.end());
  }
  model.train(was_training);
  if (detections) *detections = dets;
  return mean_average_precision(truth, dets);
}

namespace {

// --precision bf16: on for the scope of the guard this decides (the forward and the loss, the
// evaluation); float32: a guard that keeps autocast off.
bool autocast_bf16(const TrainOptions& o) { return o.precision == "bf16"; }

// The path of one of the run's files in `out`.
std::string out_file(const TrainOptions& o, const char* name) { return (fs::path(o.out) / name).string(); }

// Fails early, before any training, when `out` cannot be written.
void prepare_out_dir(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw Error("--out " + out + ": cannot create the folder (" + (ec ? ec.message() : "not a folder") + ")");
  const std::string probe = (fs::path(out) / ".write_test").string();
  try {
    write_file_atomically(probe, "ok");
  } catch (const std::exception& e) {
    throw Error("--out " + out + " is not writable: " + e.what());
  }
  fs::remove(probe, ec);
}

// An exclusive flock on out/.train_detr.lock for as long as the run lives: a second train_detr
// on the same --out would overwrite this run's files. The kernel drops the lock when the process
// ends, however it ends, so a crash leaves no stale lock; the file itself stays (removing it
// would let a third run lock a new file while the second still holds the old one).
class OutDirLock {
 public:
  explicit OutDirLock(const std::string& out) : path_((fs::path(out) / ".train_detr.lock").string()) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    TG_CHECK(fd_ >= 0, "--out ", out, ": cannot open the lock file ", path_, " (", std::strerror(errno), ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_holder();
      ::close(fd_);
      TG_CHECK(err != EWOULDBLOCK, "--out ", out, " is in use by another train_detr", holder,
               ": wait for it to end, or choose another --out");
      TG_ERROR("--out ", out, ": cannot lock ", path_, " (", std::strerror(err), ")");
    }
    // Who holds it, for the message of a run that is refused (best effort).
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
    }
  }
  ~OutDirLock() { ::close(fd_); }
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

 private:
  std::string read_holder() const {
    char text[32] = {};
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    const long pid = n > 0 ? std::strtol(text, nullptr, 10) : 0;
    return pid > 0 ? " (process " + std::to_string(pid) + ")" : std::string();
  }

  std::string path_;
  int fd_ = -1;
};

void write_sheet(const std::string& path, const SceneGenerator& val, const std::vector<DetectionBox>& dets,
                 int64_t count, double min_score) {
  std::vector<SheetScene> sheet;
  for (int64_t i = 0; i < count; ++i) {
    Scene s = val.scene(i);
    SheetScene ss{s.image, {}, {}};
    for (size_t k = 0; k < s.classes.size(); ++k) ss.truth.push_back({s.classes[k], 1.0, s.boxes[k]});
    for (const DetectionBox& d : dets)
      if (d.image == i && d.score >= min_score) ss.predictions.push_back({d.label, d.score, d.xyxy});
    sheet.push_back(std::move(ss));
  }
  save_png(path, render_sheet(sheet, 4, std::max<int64_t>(2, 256 / val.options().canvas)));
}

// out/val_scenes.png: the first validation scenes with their true and predicted boxes.
void write_val_sheet(const TrainOptions& o, const SceneGenerator& val, const std::vector<DetectionBox>& dets) {
  write_sheet(out_file(o, "val_scenes.png"), val, dets, std::min(o.sheet_scenes, o.val_scenes), o.sheet_score);
}

// --resume and --eval-only need the checkpoint in `out`; a fresh run refuses a folder that holds
// one, which it would overwrite. Checked before `out` is created.
void check_checkpoint_presence(const TrainOptions& o) {
  const std::string ckpt = out_file(o, "checkpoint.safetensors");
  if (o.resume || o.eval_only) {
    if (!fs::exists(ckpt))
      throw Error(std::string(o.resume ? "--resume" : "--eval-only") + ": no checkpoint at " + ckpt);
  } else if (fs::exists(ckpt)) {
    // A fresh run would overwrite a good checkpoint: refuse rather than destroy it.
    throw Error("--out " + o.out + " already holds a checkpoint: pass --resume to continue it, or choose another --out");
  }
}

// --resume continues the checkpoint's run only with the flags it was trained with (README: a
// resumed run is bit-identical to one that never stopped). Names every flag that differs.
void check_training_flags(const TrainOptions& o, const std::string& ckpt, const CheckpointInfo& info,
                          std::ostream& log) {
  if (info.training_flags.empty()) {
    // Written before checkpoints stored their flags: nothing to compare, so it still resumes.
    log << "note: " << ckpt << " does not record its training flags (an older checkpoint): resuming with the "
        << "given ones, unchecked\n";
    return;
  }
  std::string differ;
  for (const auto& [flag, given] : training_flags(o))
    for (const auto& [saved_flag, saved] : info.training_flags)
      if (saved_flag == flag && saved != given)
        differ += std::string(differ.empty() ? "" : ", ") + flag + " " + saved + " (given " + given + ")";
  TG_CHECK(differ.empty(), "--resume: ", ckpt, " was trained with ", differ,
           "; resume with the flags it was trained with, or start a new run in another --out");
}

// --resume and --eval-only start from the checkpoint in `out`: its weights, optimizer state,
// history and epoch. Until an epoch is trained, the last evaluation is the one the checkpoint
// recorded (a run with nothing left to train reports it).
void load_run(const TrainOptions& o, Detector& model, Optimizer& optimizer, TrainResult& result, std::ostream& log) {
  const std::string ckpt = out_file(o, "checkpoint.safetensors");
  CheckpointInfo info = load_checkpoint(ckpt, model, optimizer);
  if (o.resume) check_training_flags(o, ckpt, info, log);
  result.history = info.history;
  result.first_epoch = info.epoch + 1;
  if (!info.history.empty()) {
    result.last_eval.map50 = info.history.back().map50;
    result.last_eval.map50_95 = info.history.back().map50_95;
  }
  log << "loaded " << ckpt << " (epoch " << info.epoch << ")\n";
}

// --eval-only: the loaded model's mAP and its sheet; nothing is trained or saved.
void evaluate_checkpoint(const TrainOptions& o, Detector& model, const SceneGenerator& val, TrainResult& result,
                         std::ostream& log) {
  std::vector<DetectionBox> dets;
  {
    AutocastGuard autocast(DType::BFloat16, autocast_bf16(o));
    result.last_eval = evaluate(model, val, o.val_scenes, o.batch_size, &dets);
  }
  write_val_sheet(o, val, dets);
  char line[160];
  std::snprintf(line, sizeof line, "validation (%lld scenes): mAP@0.5 %.4f, mAP@0.5:0.95 %.4f\n",
                static_cast<long long>(o.val_scenes), result.last_eval.map50, result.last_eval.map50_95);
  log << line;
}

// What the gradient reduction cost beyond backward, per step. The process whose backward ended
// last waits only for the reductions backward did not hide; the others wait for it too. So each
// step's exposed communication is the wait of the process that arrived last (the processes'
// steady clocks agree on one machine; across machines this is an estimate). Collective: every
// rank calls it.
void log_communication(DistributedDataParallel& ddp, const std::vector<double>& ends_and_waits, std::ostream& log) {
  const int64_t steps = int64_t(ends_and_waits.size()) / 2;
  std::vector<std::vector<double>> all;  // each rank's ends_and_waits
  for (const Tensor& t : dist::all_gather(from_vector(ends_and_waits, {2 * steps})))
    all.push_back(t.to_vector<double>());
  double waited = 0, exposed = 0;
  for (int64_t step = 0; step < steps; ++step) {
    double last_end = -1, last_wait = 0;
    for (const std::vector<double>& rank : all) {
      const double end = rank[size_t(2 * step)], wait = rank[size_t(2 * step + 1)];
      if (end > last_end) last_end = end, last_wait = wait;
    }
    exposed += last_wait;
    waited += ends_and_waits[size_t(2 * step + 1)];
  }
  const double blocking = ddp.blocking_reduction_seconds();
  const double per_step = steps > 0 ? exposed / double(steps) : 0;
  const double hidden = blocking > 0 ? std::max(0.0, 1.0 - per_step / blocking) : 1.0;
  char line[320];
  std::snprintf(line, sizeof line,
                "communication: %.2f ms per step waited after backward, %.2f ms of it not hidden by backward "
                "(the last process's wait; the rest waits for the slowest process); reducing all gradients alone "
                "takes %.2f ms: %.0f%% hidden\n",
                steps > 0 ? 1e3 * waited / double(steps) : 0.0, 1e3 * per_step, 1e3 * blocking, 100 * hidden);
  log << line;
}

// One epoch of optimisation steps. Returns the epoch's record with its loss, time and speed; the
// validation mAP is filled in by end_epoch.
// Data parallel: this process's share of every batch (see trainer.h); DistributedDataParallel's
// hooks average the gradients during backward.
EpochRecord train_epoch(const TrainOptions& o, int epoch, Detector& model, Optimizer& optimizer,
                        const SceneGenerator& train, DistributedDataParallel* ddp, std::ostream& log) {
  const int64_t steps = o.train_scenes / o.batch_size;
  const int64_t world = dist::world_size(), share = o.batch_size / world;
  std::ostringstream sink;  // the progress bar draws nowhere when off (and on ranks other than 0)
  ProgressBar bar(steps, "epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs),
                  o.progress && dist::rank() == 0 ? static_cast<std::ostream&>(std::cerr) : sink);
  double loss_sum = 0;
  std::vector<double> ends_and_waits;  // per step: when backward ended here, and how long it waited
  for (int64_t step = 0; step < steps; ++step) {
    SceneBatch batch = make_batch(train, (epoch - 1) * o.train_scenes + step * o.batch_size + dist::rank() * share,
                                  share);
    DetrLossOptions loss_options = o.loss;
    if (world > 1) {  // the global batch's objects per process
      int64_t objects = 0;
      for (const Target& t : batch.targets) objects += int64_t(t.classes.size());
      Tensor count = from_vector(std::vector<int64_t>{objects}, {1});
      dist::all_reduce(count);
      loss_options.num_boxes = std::max(1.0, double(count.item<int64_t>()) / double(world));
    }
    DetrLoss loss;
    {
      AutocastGuard autocast(DType::BFloat16, autocast_bf16(o));
      DetectorOutput out = model.detect(batch.images);
      loss = detr_loss(out.logits, out.boxes, batch.targets, loss_options);
    }
    optimizer.zero_grad();
    loss.total.backward();
    if (ddp) {
      const std::chrono::duration<double> end = ddp->last_backward_end().time_since_epoch();
      ends_and_waits.insert(ends_and_waits.end(), {end.count(), ddp->last_wait_seconds()});
    }
    if (o.clip > 0) clip_grad_norm_(model.parameters(), o.clip);
    optimizer.step();
    Tensor reported = loss.total.detach().to(DType::Float64);  // the mean over the processes, for the log
    if (world > 1) dist::all_reduce(reported, dist::ReduceOp::Avg);
    const double value = reported.item();
    TG_CHECK(std::isfinite(value), "training diverged: the loss is ", value, " at epoch ", epoch, " step ", step);
    loss_sum += value;
    bar.update(step + 1, o.batch_size, {{"loss", loss_sum / (step + 1)}});
  }
  bar.finish();
  if (ddp) log_communication(*ddp, ends_and_waits, log);
  EpochRecord rec;
  rec.epoch = epoch;
  rec.train_loss = loss_sum / steps;
  rec.seconds = bar.elapsed_seconds();
  rec.images_per_second = rec.seconds > 0 ? steps * o.batch_size / rec.seconds : 0;
  return rec;
}

// The end of an epoch: its validation mAP completes the record, which joins the history; then
// the checkpoint, history.csv, the sheet and the curves are written and the epoch is logged.
void end_epoch(const TrainOptions& o, EpochRecord rec, Detector& model, const Optimizer& optimizer,
               const SceneGenerator& val, TrainResult& result, std::ostream& log) {
  const std::string ckpt = out_file(o, "checkpoint.safetensors");
  const std::string csv = out_file(o, "history.csv");
  std::vector<DetectionBox> dets;
  {
    AutocastGuard autocast(DType::BFloat16, autocast_bf16(o));
    result.last_eval = evaluate(model, val, o.val_scenes, o.batch_size, &dets);
  }
  rec.map50 = result.last_eval.map50;
  rec.map50_95 = result.last_eval.map50_95;
  result.history.push_back(rec);

  save_checkpoint(ckpt, model, optimizer, {rec.epoch, model.config(), result.history, training_flags(o)});
  write_history_csv(csv, result.history);
  write_val_sheet(o, val, dets);
  const std::string plot = plot_history(result.history, csv, out_file(o, "curves.png"));
  char line[200];
  std::snprintf(line, sizeof line, "epoch %d: loss %.4f, val mAP@0.5 %.4f, mAP@0.5:0.95 %.4f, %.1f s (%.0f images/s)\n",
                rec.epoch, rec.train_loss, rec.map50, rec.map50_95, rec.seconds, rec.images_per_second);
  log << line;
  if (!plot.empty()) log << plot << "\n";
  log << std::flush;  // a redirected log shows each epoch as it ends
}

}  // namespace

TrainResult run_training(const TrainOptions& o, std::ostream& log_all) {
  validate_options(o);
  set_num_threads(o.threads);
  const bool lead = dist::rank() == 0;
  std::ostringstream quiet;
  std::ostream& log = lead ? log_all : quiet;  // rank 0 speaks for all
  log << info() << "\n";  // the CPU, its vector features and the kernels' path, for the log
  // Everything that can refuse the run comes before --out is created: a refused run leaves no
  // empty folder behind.
  check_checkpoint_presence(o);
  data::ImageDataset train_items = data::load_fashion_mnist("train", o.data_dir);
  data::ImageDataset val_items = data::load_fashion_mnist("test", o.data_dir);
  SceneGenerator train(train_items, o.scenes, o.seed), val(val_items, o.scenes, o.seed + 1);

  std::optional<OutDirLock> lock;  // rank 0 writes the files, so rank 0 holds the folder
  if (lead) {
    prepare_out_dir(o.out);
    lock.emplace(o.out);
  }
  dist::barrier();  // the others read the checkpoint only after rank 0 has checked the folder

  std::unique_ptr<Detector> model = make_detector(o);
  AdamOptions adam;
  adam.lr = o.lr;
  adam.weight_decay = o.weight_decay;
  AdamW optimizer(model->parameters(), adam);

  TrainResult result;
  if (o.resume || o.eval_only) load_run(o, *model, optimizer, result, log);
  if (o.eval_only) {
    if (lead) evaluate_checkpoint(o, *model, val, result, log);
    return result;
  }

  std::optional<DistributedDataParallel> ddp;
  if (dist::world_size() > 1) ddp.emplace(*model, o.ddp);
  log << "model " << model->config() << ", " << model->num_parameters() << " parameters; " << o.train_scenes
      << " training scenes per epoch, " << o.val_scenes << " validation scenes; " << o.threads << " threads";
  if (dist::world_size() > 1) log << " in each of " << dist::world_size() << " processes (MPI)";
  log << "; precision " << o.precision << "\n";
  if (result.first_epoch > o.epochs)
    log << "nothing to train: the checkpoint is at epoch " << result.first_epoch - 1 << " and --epochs is " << o.epochs
        << " (--epochs is the total, not the number of extra epochs)\n";
  if (result.first_epoch <= o.epochs) warn_if_machine_busy(o.threads, log);
  model->train();
  for (int epoch = result.first_epoch; epoch <= o.epochs; ++epoch) {
    EpochRecord rec = train_epoch(o, epoch, *model, optimizer, train, ddp ? &*ddp : nullptr, log);
    if (lead) end_epoch(o, rec, *model, optimizer, val, result, log);
  }
  dist::barrier();  // every process returns after rank 0's last files
  return result;
}

}  // namespace tg::detr
