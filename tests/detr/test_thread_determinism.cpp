// The README's claim: a training run gives the same bits at any thread count. Two steps of the
// demo's detector at its real size (64x64 scenes, batch 8: products large enough that matmul
// cuts them into tiles, every kernel on its parallel path) at 1, 2 and 3 threads; the weights,
// the AdamW state and the loss must agree bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <tapegrad/framework/safetensors.h>
#include "test_util.h"
#include "tiny_run.h"

namespace tg::detr {
namespace {

struct RunResult {
  double loss;
  StateDict tensors;  // the checkpoint: model and optimizer
};

RunResult train_two_steps(int threads) {
  TrainOptions o = tiny_options(fresh_dir("threads" + std::to_string(threads)));
  o.scenes = SceneOptions{};  // the demo's 64x64 canvas
  o.epochs = 1;
  o.train_scenes = 16;        // two steps of 8
  o.val_scenes = 4;
  o.sheet_scenes = 1;
  o.threads = threads;
  std::ostringstream log;
  TrainResult r = run_training(o, log);
  SafetensorsFile file = load_safetensors((std::filesystem::path(o.out) / "checkpoint.safetensors").string());
  std::filesystem::remove_all(o.out);
  return {r.history.at(0).train_loss, file.tensors};
}

TEST(DetrDeterminism, TrainingStepsGiveTheSameBitsAtOneTwoAndThreeThreads) {
  const int saved = num_threads();
  RunResult one = train_two_steps(1);
  for (int threads : {2, 3}) {
    RunResult other = train_two_steps(threads);
    EXPECT_EQ(other.loss, one.loss) << threads << " threads";
    ASSERT_EQ(other.tensors.size(), one.tensors.size());
    int differing = 0;
    for (size_t i = 0; i < one.tensors.size(); ++i) {
      ASSERT_EQ(other.tensors[i].first, one.tensors[i].first);
      if (!same_bits(other.tensors[i].second, one.tensors[i].second)) {
        ++differing;
        ADD_FAILURE() << one.tensors[i].first << " differs at " << threads << " threads";
      }
    }
    EXPECT_EQ(differing, 0) << "of " << one.tensors.size() << " tensors";
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace tg::detr
