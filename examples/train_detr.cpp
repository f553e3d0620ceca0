// Trains a small detector on Fashion-MNIST scenes (1 to 4 items pasted on a canvas) with DETR's
// set loss, reporting validation mAP each epoch; see examples/detr/trainer.h for the files it
// writes into --out.
//
//   ./build/examples/train_detr --epochs 20 --batch-size 16 --threads 2 --out detr_run
//   ./build/examples/train_detr --out detr_run --resume --epochs 30   # continue to epoch 30
//   ./build/examples/train_detr --out detr_run --eval-only            # mAP + val_scenes.png
//   mpirun -np 2 ./build/examples/train_detr --threads 1 --out detr_run   # data parallel: each
//       process takes half of every batch; rank 0 logs and writes the files
//
// The data are Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or any
// directory with the four original gzip IDX files (--data-dir).
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <tapegrad/tapegrad.h>

#include "detr/trainer.h"

int main(int argc, char** argv) {
  tg::detr::TrainOptions o;
  CLI::App app{"Train a small detector (DETR's set loss, Hungarian matching) on Fashion-MNIST scenes"};
  app.add_option("--epochs", o.epochs, "train until this epoch (with --resume: the total, not extra)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--batch-size", o.batch_size, "scenes per step")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--threads", o.threads, "OpenMP threads")->check(CLI::Range(1, 1024));
  app.add_option("--seed", o.seed, "seed for initialisation and the scenes");
  app.add_option("--data-dir", o.data_dir, "folder with the Fashion-MNIST gzip IDX files");
  app.add_option("--out", o.out, "output folder: checkpoint, history.csv, curves.png, val_scenes.png");
  app.add_flag("--resume", o.resume, "continue from --out's checkpoint");
  app.add_flag("--eval-only", o.eval_only, "evaluate --out's checkpoint and draw its predictions; no training");
  app.add_option("--model", o.model, "detector architecture")->check(CLI::IsMember({"deformable", "patch", "tiny"}));
  app.add_option("--train-scenes", o.train_scenes, "training scenes per epoch")->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  app.add_option("--val-scenes", o.val_scenes, "validation scenes")->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  app.add_option("--canvas", o.scenes.canvas, tg::detr::canvas_help(o.scenes));  // checked by validate_options
  app.add_option("--queries", o.num_queries, "object queries per image")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--precision", o.precision,
                 "float32, or bf16: forward and loss under autocast to bfloat16 (matmuls and convolutions in bf16)")
      ->check(CLI::IsMember({"float32", "bf16"}));
  app.add_option("--lr", o.lr, "AdamW learning rate")->check(CLI::Range(1e-9, 10.0));
  app.add_option("--bucket-mb", o.ddp.bucket_cap_mb,
                 "under mpirun: gradient bucket size in MB (PyTorch's default is 25; this model hides more with 0.25)")
      ->check(CLI::Range(1e-3, 1e4));
  app.add_option("--first-bucket-mb", o.ddp.first_bucket_mb, "under mpirun: the first bucket's size in MB (1)")
      ->check(CLI::Range(1e-3, 1e4));
  bool quiet = false;
  app.add_flag("--no-progress", quiet, "no progress bar (logs stay)");
  CLI11_PARSE(app, argc, argv);
  o.progress = !quiet;

  try {
    if (tg::dist::launched_by_mpirun()) tg::dist::init();
    tg::detr::TrainResult r = tg::detr::run_training(o, std::cout);
    if (tg::dist::rank() == 0 && !o.eval_only && !r.history.empty()) {
      if (r.first_epoch > o.epochs)  // nothing trained: last_eval is what the checkpoint recorded
        std::printf("done, nothing trained: epoch %d's recorded mAP@0.5 %.4f, mAP@0.5:0.95 %.4f; files in %s\n",
                    r.history.back().epoch, r.last_eval.map50, r.last_eval.map50_95, o.out.c_str());
      else
        std::printf("done: mAP@0.5 %.4f, mAP@0.5:0.95 %.4f; files in %s\n", r.last_eval.map50, r.last_eval.map50_95,
                    o.out.c_str());
    }
    return 0;
  } catch (const tg::detr::Interrupted& e) {
    // gnuplot was killed by SIGINT or SIGTERM (Ctrl-C, kill). train_detr installs no handler, so
    // such a signal ends it by the default action; end the same way, so that the shell, mpirun
    // or a script sees an interrupted run (status 128 + signal), not an error. The checkpoint of
    // the last finished epoch is already written (atomically).
    std::fprintf(stderr, "train_detr (rank %d): %s\n", tg::dist::rank(), e.what());
    std::signal(e.signal_number(), SIG_DFL);
    std::raise(e.signal_number());
    return 128 + e.signal_number();  // only if the signal is blocked
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_detr (rank %d): %s\n", tg::dist::rank(), e.what());
    return 1;
  }
}
