// The training loop's smoke test: a few steps on tiny scenes, a resume from the checkpoint, the loss
// falls; resuming gives exactly the run that never stopped; and every kind of bad input gives a
// clear tg::Error without touching a good checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "detr/checkpoint.h"
#include "detr/trainer.h"
#include "golden.h"
#include "io_test_util.h"
#include "tiny_run.h"

namespace tg::detr {
namespace {
namespace fs = std::filesystem;

using tg::testing::read_bytes;

std::string error_of(const TrainOptions& o) {
  std::ostringstream log;
  try {
    run_training(o, log);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DetrTrainSmoke, LossFallsAndResumeEqualsTheUninterruptedRun) {
  std::ostringstream log;
  // Straight through 3 epochs.
  TrainOptions straight = tiny_options(fresh_dir("straight"));
  TrainResult a = run_training(straight, log);
  ASSERT_EQ(a.history.size(), 3u);
  // Two epochs, then --resume to 3.
  TrainOptions first = tiny_options(fresh_dir("resumed"));
  first.epochs = 2;
  TrainResult b1 = run_training(first, log);
  ASSERT_EQ(b1.history.size(), 2u);
  TrainOptions second = first;
  second.epochs = 3;
  second.resume = true;
  TrainResult b2 = run_training(second, log);
  EXPECT_EQ(b2.first_epoch, 3);
  ASSERT_EQ(b2.history.size(), 3u);  // the history travels in the checkpoint
  // Model, optimizer state and scenes are restored exactly, and the run is deterministic: the
  // resumed epoch's loss is the uninterrupted run's, bit for bit.
  EXPECT_EQ(b2.history[2].train_loss, a.history[2].train_loss);
  EXPECT_EQ(b2.history[0].train_loss, a.history[0].train_loss);
  EXPECT_EQ(b2.last_eval.map50, a.last_eval.map50);
  // The loss falls: from ~7.8 by ~25% in 24 steps (measured 7.76 -> 5.86 and 6.02 on two
  // builds); asserted at 10% so that only a broken loop fails.
  EXPECT_LT(a.history[2].train_loss, 0.9 * a.history[0].train_loss)
      << a.history[0].train_loss << " -> " << a.history[2].train_loss;
  std::cout << "smoke loss per epoch: " << a.history[0].train_loss << " " << a.history[1].train_loss << " "
            << a.history[2].train_loss << "\n";
  // The files a user looks at.
  for (const char* f : {"checkpoint.safetensors", "history.csv", "val_scenes.png"})
    EXPECT_TRUE(fs::exists(fs::path(straight.out) / f)) << f;
  std::vector<EpochRecord> csv = parse_history_csv(read_bytes((fs::path(straight.out) / "history.csv").string()));
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[2].train_loss, a.history[2].train_loss);  // %.17g round-trips
  // --eval-only reproduces the last epoch's mAP from the checkpoint.
  TrainOptions eval = straight;
  eval.eval_only = true;
  TrainResult e = run_training(eval, log);
  EXPECT_EQ(e.last_eval.map50, a.last_eval.map50);
  EXPECT_EQ(e.last_eval.map50_95, a.last_eval.map50_95);
  fs::remove_all(straight.out);
  fs::remove_all(first.out);
}

// --precision bf16: the same loop with the forward and the loss under AutocastGuard(BFloat16).
// The run trains (the loss falls as the float32 run's does) and stays near the float32 run: the
// first epoch's mean loss, 8 steps from the same initial weights, within 2% (measured: 0.03%; the loss falls 7.88 -> 7.30, float32 7.88 -> 7.27).
TEST(DetrTrainSmoke, Bf16PrecisionTrainsLikeFloat32) {
  std::ostringstream log;
  TrainOptions f32 = tiny_options(fresh_dir("f32"));
  f32.epochs = 2;
  TrainOptions bf16 = tiny_options(fresh_dir("bf16"));
  bf16.epochs = 2;
  bf16.precision = "bf16";
  TrainResult a = run_training(f32, log), b = run_training(bf16, log);
  ASSERT_EQ(b.history.size(), 2u);
  EXPECT_NE(log.str().find("precision bf16"), std::string::npos);
  EXPECT_LT(b.history[1].train_loss, 0.95 * b.history[0].train_loss)
      << b.history[0].train_loss << " -> " << b.history[1].train_loss;
  EXPECT_NEAR(b.history[0].train_loss, a.history[0].train_loss, 0.02 * a.history[0].train_loss);
  std::cout << "smoke loss per epoch, float32: " << a.history[0].train_loss << " " << a.history[1].train_loss
            << "; bf16: " << b.history[0].train_loss << " " << b.history[1].train_loss << "\n";
  fs::remove_all(f32.out);
  fs::remove_all(bf16.out);
}

TEST(DetrTrainSmoke, BadInputGivesClearErrorsAndKeepsTheCheckpoint) {
  TrainOptions o = tiny_options(fresh_dir("bad"));
  o.epochs = 1;
  std::ostringstream log;
  run_training(o, log);
  const std::string ckpt = (fs::path(o.out) / "checkpoint.safetensors").string();
  const std::string good = read_bytes(ckpt);
  ASSERT_FALSE(good.empty());

  // A fresh run into a folder with a checkpoint refuses instead of overwriting it.
  EXPECT_NE(error_of(o).find("already holds a checkpoint"), std::string::npos);
  // Resuming into a different model.
  TrainOptions other = o;
  other.resume = true;
  other.epochs = 2;
  other.num_queries = 12;
  EXPECT_NE(error_of(other).find("different model"), std::string::npos) << error_of(other);
  EXPECT_EQ(read_bytes(ckpt), good);
  // Nonsensical flags.
  TrainOptions bad = o;
  bad.batch_size = 0;
  EXPECT_NE(error_of(bad).find("--batch-size"), std::string::npos);
  bad = o;
  bad.epochs = 0;
  EXPECT_NE(error_of(bad).find("--epochs"), std::string::npos);
  bad = o;
  bad.precision = "fp8";
  EXPECT_EQ(error_of(bad), "--precision: expected 'float32' or 'bf16', got 'fp8'");
  bad = o;
  bad.resume = bad.eval_only = true;
  EXPECT_NE(error_of(bad).find("--eval-only"), std::string::npos);
  // Missing dataset: the message says how to install it.
  bad = o;
  bad.resume = true;
  bad.data_dir = "/nonexistent/fashion";
  EXPECT_NE(error_of(bad).find("apt-get install dataset-fashion-mnist"), std::string::npos) << error_of(bad);
  // Corrupt dataset files: the reader names the file.
  const std::string broken = fresh_dir("broken_data");
  fs::create_directories(broken);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"})
    write_file_atomically(broken + "/" + f, "\x1f\x8b garbage, not a gzip stream");
  bad = o;
  bad.resume = true;
  bad.data_dir = broken;
  EXPECT_NE(error_of(bad).find("train-images-idx3-ubyte.gz"), std::string::npos) << error_of(bad);
  fs::remove_all(broken);
  // Unwritable output folder (a path under a regular file).
  bad = tiny_options(ckpt + "/sub");
  EXPECT_NE(error_of(bad).find("--out"), std::string::npos) << error_of(bad);
  // --resume with no checkpoint.
  bad = tiny_options(fresh_dir("empty"));
  bad.resume = true;
  EXPECT_NE(error_of(bad).find("no checkpoint"), std::string::npos);
  fs::remove_all(bad.out);
  EXPECT_EQ(read_bytes(ckpt), good);

  // A corrupt checkpoint (truncated, then garbage): a clear error, and the file is left as is.
  TrainOptions resume = o;
  resume.resume = true;
  resume.epochs = 2;
  for (const std::string& corrupt : {good.substr(0, good.size() / 2), std::string("not a checkpoint at all")}) {
    write_file_atomically(ckpt, corrupt);
    const std::string msg = error_of(resume);
    EXPECT_NE(msg.find("checkpoint"), std::string::npos) << msg;
    EXPECT_NE(msg.find(ckpt), std::string::npos) << msg;
    EXPECT_EQ(read_bytes(ckpt), corrupt);
  }
  fs::remove_all(o.out);
}

TEST(DetrCheckpoint, RoundTripsModelOptimizerAndHistory) {
  TinyDetectorOptions t;
  t.canvas = 16;
  t.hidden = 8;
  Generator g(1);
  TinyDetector a(t, &g), b(t, &g);  // different weights (the generator advanced)
  AdamW oa(a.parameters()), ob(b.parameters());
  // One step so that the optimizer has state.
  DetectorOutput out = a.detect(rand({2, 1, 16, 16}));
  (sum(out.logits) + sum(out.boxes)).backward();
  oa.step();
  const std::string path = fresh_dir("ckpt") + ".safetensors";
  save_checkpoint(path, a, oa, {4, a.config(), {{1, 2.5, 0.1, 0.05, 3, 9}}, {{"--lr", "0.001"}}});
  CheckpointInfo info = load_checkpoint(path, b, ob);
  EXPECT_EQ(info.epoch, 4);
  ASSERT_EQ(info.history.size(), 1u);
  EXPECT_EQ(info.history[0].train_loss, 2.5);
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>());
  EXPECT_EQ(ob.state_dict().size(), oa.state_dict().size());
  EXPECT_EQ(ob.state(0).at("exp_avg").to_vector<float>(), oa.state(0).at("exp_avg").to_vector<float>());
  fs::remove(path);
}

}  // namespace
}  // namespace tg::detr
