// train_detr's run-level checks, on checkpoints written directly (no training) and the MLP
// detector: a resume with nothing to train reports the checkpoint's evaluation; a resume with
// other training flags is refused, naming each; a checkpoint with a NaN is refused; a second run
// on the same --out is refused; a refused run creates no --out; --train-scenes and --canvas
// follow the rules train_detr's help states.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "detr/checkpoint.h"
#include "detr/trainer.h"
#include "tiny_run.h"

namespace tg::detr {
namespace {
namespace fs = std::filesystem;

TrainOptions mlp_options(const std::string& out) {
  TrainOptions o = tiny_options(out);
  o.model = "tiny";
  o.hidden = 16;
  o.epochs = 1;
  o.train_scenes = 16;
  o.val_scenes = 8;
  return o;
}

std::string checkpoint_path(const TrainOptions& o) { return (fs::path(o.out) / "checkpoint.safetensors").string(); }

// A checkpoint of o's model at `epoch` with `history`, as train_detr writes it (flags included
// unless `flags` is false: a checkpoint of an earlier version). `nan_weight`: element 2 of the
// second parameter (the second state_dict entry) is a NaN.
void write_checkpoint(const TrainOptions& o, int epoch, const std::vector<EpochRecord>& history, bool flags = true,
                      bool nan_weight = false) {
  std::unique_ptr<Detector> model = make_detector(o);
  if (nan_weight) {
    NoGradGuard no_grad;
    model->parameters()[1].data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  }
  AdamW optimizer(model->parameters());
  fs::create_directories(o.out);
  save_checkpoint(checkpoint_path(o), *model, optimizer,
                  {epoch, model->config(), history, flags ? training_flags(o) : decltype(training_flags(o)){}});
}

std::string error_of(const TrainOptions& o, std::ostream& log) {
  try {
    run_training(o, log);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_of(const TrainOptions& o) {
  std::ostringstream log;
  return error_of(o, log);
}

TEST(DetrTrainChecks, NothingToTrainReportsTheCheckpointsEvaluation) {
  TrainOptions o = mlp_options(fresh_dir("nothing_to_train"));
  write_checkpoint(o, 2, {{1, 7.0, 0.25, 0.125, 1, 10}, {2, 6.0, 0.5, 0.375, 1, 10}});
  o.resume = true;
  o.epochs = 1;
  std::ostringstream log;
  TrainResult r = run_training(o, log);
  EXPECT_EQ(r.first_epoch, 3);
  ASSERT_EQ(r.history.size(), 2u);
  EXPECT_EQ(r.last_eval.map50, 0.5);  // epoch 2's, not a default 0
  EXPECT_EQ(r.last_eval.map50_95, 0.375);
  EXPECT_NE(log.str().find("nothing to train"), std::string::npos) << log.str();
  fs::remove_all(o.out);
}

TEST(DetrTrainChecks, ResumeRefusesOtherTrainingFlagsNamingEach) {
  const TrainOptions saved = mlp_options(fresh_dir("flags"));
  write_checkpoint(saved, 1, {{1, 7.0, 0.25, 0.125, 1, 10}});
  TrainOptions o = saved;
  o.resume = true;
  o.epochs = 2;
  auto refused = [&](TrainOptions changed, const std::string& expected) {
    const std::string msg = error_of(changed);
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
    EXPECT_NE(msg.find(checkpoint_path(saved)), std::string::npos) << msg;
  };
  TrainOptions c = o;
  c.lr = 0.002;
  refused(c, "--lr 0.001 (given 0.002)");
  c = o;
  c.seed = 7;
  refused(c, "--seed 0 (given 7)");
  c = o;
  c.batch_size = 16;
  refused(c, "--batch-size 8 (given 16)");
  c = o;
  c.train_scenes = 32;
  refused(c, "--train-scenes 16 (given 32)");
  c = o;
  c.precision = "bf16";
  refused(c, "--precision float32 (given bf16)");
  c = o;
  c.lr = 0.002;
  c.seed = 7;
  refused(c, "--lr 0.001 (given 0.002), --seed 0 (given 7)");  // every difference at once
  // What does not change the trajectory stays free: the length, threads, the validation set.
  c = o;
  c.threads = 2;
  c.val_scenes = 4;
  std::ostringstream log;
  EXPECT_EQ(error_of(c, log), "");
  EXPECT_EQ(log.str().find("unchecked"), std::string::npos) << log.str();
  fs::remove_all(saved.out);
}

TEST(DetrTrainChecks, ACheckpointWithoutRecordedFlagsStillResumes) {
  const TrainOptions saved = mlp_options(fresh_dir("old_checkpoint"));
  write_checkpoint(saved, 1, {{1, 7.0, 0.25, 0.125, 1, 10}}, /*flags=*/false);
  TrainOptions o = saved;
  o.resume = true;
  o.epochs = 2;
  o.lr = 0.002;  // cannot be compared: nothing was recorded
  std::ostringstream log;
  TrainResult r = run_training(o, log);
  EXPECT_EQ(r.history.size(), 2u);
  EXPECT_NE(log.str().find("does not record its training flags"), std::string::npos) << log.str();
  fs::remove_all(saved.out);
}

TEST(DetrTrainChecks, ACheckpointWithANanIsRefusedNamingFileAndTensor) {
  TrainOptions o = mlp_options(fresh_dir("nan_checkpoint"));
  write_checkpoint(o, 1, {{1, 7.0, 0.25, 0.125, 1, 10}}, true, /*nan_weight=*/true);
  const std::string name = "model." + make_detector(o)->state_dict()[1].first;
  for (bool eval_only : {true, false}) {
    TrainOptions c = o;
    (eval_only ? c.eval_only : c.resume) = true;
    c.epochs = 2;
    const std::string msg = error_of(c);
    EXPECT_NE(msg.find(checkpoint_path(o)), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + name + "' holds a non-finite value (nan at element 2)"), std::string::npos) << msg;
  }
  fs::remove_all(o.out);
}

TEST(DetrTrainChecks, ASecondRunOnTheSameOutIsRefused) {
  TrainOptions o = mlp_options(fresh_dir("locked"));
  fs::create_directories(o.out);
  // Another train_detr holds the folder (a flock on another open file description conflicts
  // even within one process).
  const std::string lock = (fs::path(o.out) / ".train_detr.lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string msg = error_of(o);
  EXPECT_NE(msg.find("--out " + o.out + " is in use by another train_detr"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(checkpoint_path(o)));
  ::close(fd);  // the other run ended: the folder is free
  EXPECT_EQ(error_of(o), "");
  EXPECT_TRUE(fs::exists(checkpoint_path(o)));
  fs::remove_all(o.out);
}

TEST(DetrTrainChecks, ARefusedRunCreatesNoOutFolder) {
  const TrainOptions base = mlp_options(fresh_dir("never_created"));
  TrainOptions c = base;
  c.resume = true;
  EXPECT_NE(error_of(c).find("no checkpoint"), std::string::npos);
  c = base;
  c.eval_only = true;
  EXPECT_NE(error_of(c).find("no checkpoint"), std::string::npos);
  c = base;
  c.data_dir = "/nonexistent/fashion";
  EXPECT_NE(error_of(c).find("dataset-fashion-mnist"), std::string::npos);
  EXPECT_FALSE(fs::exists(base.out));
}

TEST(DetrTrainChecks, TrainScenesMustBeWholeBatches) {
  TrainOptions o = mlp_options("unused");
  o.batch_size = 16;
  o.train_scenes = 31;  // one step of 16 would have run, 15 scenes unused
  try {
    validate_options(o);
    ADD_FAILURE() << "31 scenes in batches of 16 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--train-scenes: expected a multiple of --batch-size (16), got 31");
  }
  o.train_scenes = 32;
  EXPECT_NO_THROW(validate_options(o));
}

// The help's numbers are the check's: every canvas from 1 to 600 is accepted exactly when the
// help's rule for its model says so, and the help states the rule for the default scenes.
TEST(DetrTrainChecks, CanvasCheckAgreesWithTheHelp) {
  const SceneOptions defaults;
  EXPECT_EQ(canvas_help(defaults),
            "scene side in pixels, up to 512: deformable from 48 in steps of 16, patch from 40 in steps of 8, "
            "tiny from 36 (items are up to 36 pixels)");
  for (const char* model : {"deformable", "patch", "tiny"}) {
    TrainOptions o = mlp_options("unused");
    o.model = model;
    o.scenes = defaults;
    const int64_t least = min_canvas(model, defaults), step = canvas_multiple(model);
    for (int64_t canvas = 1; canvas <= 600; ++canvas) {
      o.scenes.canvas = canvas;
      const bool stated = canvas >= least && canvas <= kMaxCanvas && canvas % step == 0;
      bool accepted = true;
      try {
        validate_options(o);
      } catch (const Error&) {
        accepted = false;
      }
      ASSERT_EQ(accepted, stated) << model << " canvas " << canvas;
    }
    // The smallest stated canvas builds the model.
    o.scenes.canvas = least;
    EXPECT_NO_THROW(make_detector(o)) << model;
  }
}

}  // namespace
}  // namespace tg::detr
