// Trains an MLP classifier on Fashion-MNIST: Module + Linear/ReLU, cross_entropy, AdamW with a
// warmup-cosine schedule, gradient clipping, tg::data's DataLoader (shuffled batches built on a
// background thread) and a progress bar; reports test accuracy per epoch (and logs it to a CSV
// file with --csv).
//
//   ./build/examples/train_mlp --epochs 3 --batch-size 128 --lr 1e-3 --threads 2
//
// The data are Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or any
// directory with the four original gzip IDX files (--data-dir).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <tapegrad/tapegrad.h>

#include "common/busy_machine.h"
#include "common/classifier_accuracy.h"
#include "common/cli_checks.h"
#include "common/divergence.h"
#include "common/output_files.h"

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP on Fashion-MNIST with tapegrad"};
  int epochs = 3, threads = 2;
  int64_t batch_size = 128, hidden = 256, limit = 0;
  double lr = 1e-3, weight_decay = 1e-4, clip = 5.0;
  uint64_t seed = 0;
  std::string data_dir = tg::data::kFashionMnistDir, csv;
  using tg::examples::whole_number;
  app.add_option("--epochs", epochs, "passes over the training set")->check(whole_number(1, 100000));
  app.add_option("--batch-size", batch_size, "samples per step")->check(whole_number<int64_t>(1, 1 << 20));
  app.add_option("--lr", lr, "peak learning rate (AdamW)")->check(tg::examples::positive_number());
  app.add_option("--weight-decay", weight_decay, "AdamW's decoupled weight decay")
      ->check(tg::examples::non_negative_number());
  app.add_option("--hidden", hidden, "hidden layer width")->check(whole_number<int64_t>(1, 65536));
  app.add_option("--clip", clip, "max global gradient norm (0: no clipping)")
      ->check(tg::examples::non_negative_number());
  app.add_option("--threads", threads, "OpenMP threads")->check(whole_number(1, 1024));
  app.add_option("--seed", seed, "seed for initialisation and shuffling")->check(whole_number<uint64_t>(0));
  app.add_option("--data-dir", data_dir, "directory with the Fashion-MNIST gzip IDX files");
  app.add_option("--limit", limit, "use only the first N training samples (0: all)")->check(whole_number<int64_t>(0));
  app.add_option("--csv", csv, "write each epoch's metrics to this CSV file (empty: none)");
  CLI11_PARSE(app, argc, argv);

  try {
    // Before anything is read: CsvLogger truncates its file as it opens it.
    if (!csv.empty()) tg::examples::check_output_path("--csv", csv, tg::examples::fashion_mnist_inputs(data_dir));
    tg::set_num_threads(threads);
    tg::manual_seed(seed);
    std::shared_ptr<const tg::data::Dataset> train = std::make_shared<tg::data::FashionMNIST>("train", data_dir);
    if (limit > 0) train = tg::data::first_samples(train, limit);
    auto test = std::make_shared<tg::data::FashionMNIST>("test", data_dir);
    const int64_t n = train->size(), pixels = test->images().numel() / test->size();
    std::printf("Fashion-MNIST: %lld train, %lld test images of %lld pixels; %d threads\n",
                static_cast<long long>(n), static_cast<long long>(test->size()), static_cast<long long>(pixels),
                threads);
    std::fflush(stdout);
    tg::warn_if_machine_busy(threads, std::cout);

    tg::MLP model({pixels, hidden, 10});
    tg::AdamOptions options;
    options.lr = lr;
    options.weight_decay = weight_decay;
    tg::AdamW optimizer(model.parameters(), options);
    // Shuffled batches, a new order each epoch (seed + epoch), built on a thread while a step runs.
    tg::data::DataLoader loader(train, tg::data::DataLoaderOptions().batch_size(batch_size).shuffle(true).seed(seed + 1));
    tg::data::DataLoader test_loader(test, tg::data::DataLoaderOptions().batch_size(1000));
    const int64_t steps_per_epoch = loader.size();
    const int64_t total_steps = steps_per_epoch * epochs;
    tg::WarmupCosineLR schedule(optimizer, std::min<int64_t>(100, total_steps / 10), total_steps, 0.05);
    std::printf("model: MLP [%lld, %lld, 10], %lld parameters; AdamW lr %g, batch %lld, %d epochs\n",
                static_cast<long long>(pixels), static_cast<long long>(hidden),
                static_cast<long long>(model.num_parameters()), lr, static_cast<long long>(batch_size), epochs);

    std::optional<tg::CsvLogger> log;
    if (!csv.empty()) log.emplace(csv);
    double total_seconds = 0, test_acc = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      tg::ProgressBar bar(steps_per_epoch, "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs));
      double loss_sum = 0;
      int64_t step = 0;
      for (const std::vector<tg::Tensor>& batch : loader) {  // {images [B, 1, 28, 28], labels [B]}
        model.zero_grad();
        tg::Tensor loss = tg::cross_entropy(model.forward(batch[0].flatten(1)), batch[1]);
        loss.backward();
        if (clip > 0) tg::clip_grad_norm_(model.parameters(), clip);
        optimizer.step();
        schedule.step();
        ++step;
        const double value = loss.item();
        tg::examples::check_loss_finite(value, epoch, step);
        loss_sum += value;
        bar.update(step, batch[1].size(0), {{"loss", loss_sum / step}, {"lr", optimizer.lr()}});
      }
      bar.finish();
      tg::examples::check_parameters_finite(model, epoch);
      total_seconds += bar.elapsed_seconds();
      test_acc = tg::examples::accuracy(model, test_loader, /*flatten=*/true);
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n", epoch,
                  loss_sum / steps_per_epoch, 100 * test_acc, bar.elapsed_seconds(), n / bar.elapsed_seconds());
      if (log)
        log->log({{"epoch", epoch}, {"train_loss", loss_sum / steps_per_epoch}, {"test_accuracy", test_acc},
                  {"seconds", bar.elapsed_seconds()}});
    }
    std::printf("final test accuracy %.2f%% after %.1f s of training\n", 100 * test_acc, total_seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
}
