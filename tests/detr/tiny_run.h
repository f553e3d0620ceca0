// Shared by the detector demo's training tests: a fresh temporary output folder, and options
// small enough to train in seconds (the Deformable DETR on a 32x32 canvas, 64 scenes per epoch,
// the fashion_mnist_subset fixture as data).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "detr/trainer.h"
#include "golden.h"

namespace tg::detr {

// An empty folder path under the temp directory, unique to this process.
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("tapegrad_detr_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

inline TrainOptions tiny_options(const std::string& out) {
  TrainOptions o;
  o.data_dir = tg::testing::data_path("fashion_mnist_subset");
  o.out = out;
  o.epochs = 3;
  o.batch_size = 8;
  o.threads = 1;
  o.train_scenes = 64;
  o.val_scenes = 16;
  o.sheet_scenes = 4;
  o.scenes.canvas = 32;
  o.scenes.min_side = 10;
  o.scenes.max_side = 18;
  o.model = "deformable";  // the demo's model, at a small size
  o.num_queries = 8;
  o.lr = 1e-3;
  o.progress = false;
  return o;
}

}  // namespace tg::detr
