// Trains an MLP classifier on Fashion-MNIST: Module + Linear/ReLU, cross_entropy, AdamW with a
// warmup-cosine schedule, gradient clipping and a progress bar; reports test accuracy per epoch.
//
//   ./build/examples/train_mlp --epochs 3 --batch-size 128 --lr 1e-3 --threads 2
//
// The data are Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or any
// directory with the four original gzip IDX files (--data-dir).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <tapegrad/tapegrad.h>

#include "common/busy_machine.h"
#include "common/classifier_batches.h"
#include "common/fashion_mnist.h"
#include "common/progress_bar.h"

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP on Fashion-MNIST with tapegrad"};
  int epochs = 3, threads = 2;
  int64_t batch_size = 128, hidden = 256, limit = 0;
  double lr = 1e-3, weight_decay = 1e-4, clip = 5.0;
  uint64_t seed = 0;
  std::string data_dir = tg::data::kFashionMnistDir;
  app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "samples per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak learning rate (AdamW)")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", weight_decay, "AdamW's decoupled weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--hidden", hidden, "hidden layer width")->check(CLI::PositiveNumber);
  app.add_option("--clip", clip, "max global gradient norm (0: no clipping)")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed for initialisation and shuffling");
  app.add_option("--data-dir", data_dir, "directory with the Fashion-MNIST gzip IDX files");
  app.add_option("--limit", limit, "use only the first N training samples (0: all)")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    tg::set_num_threads(threads);
    tg::manual_seed(seed);
    auto [train, test] = tg::examples::load_fashion_mnist_splits(data_dir, limit);
    const int64_t n = train.images.size(0), pixels = train.images.numel() / n;
    std::printf("Fashion-MNIST: %lld train, %lld test images of %lld pixels; %d threads\n",
                static_cast<long long>(n), static_cast<long long>(test.images.size(0)), static_cast<long long>(pixels),
                threads);
    std::fflush(stdout);
    tg::warn_if_machine_busy(threads, std::cout);

    tg::MLP model({pixels, hidden, 10});
    tg::AdamOptions options;
    options.lr = lr;
    options.weight_decay = weight_decay;
    tg::AdamW optimizer(model.parameters(), options);
    const int64_t steps_per_epoch = (n + batch_size - 1) / batch_size;
    const int64_t total_steps = steps_per_epoch * epochs;
    tg::WarmupCosineLR schedule(optimizer, std::min<int64_t>(100, total_steps / 10), total_steps, 0.05);
    std::printf("model: MLP [%lld, %lld, 10], %lld parameters; AdamW lr %g, batch %lld, %d epochs\n",
                static_cast<long long>(pixels), static_cast<long long>(hidden),
                static_cast<long long>(model.num_parameters()), lr, static_cast<long long>(batch_size), epochs);

    tg::Generator shuffle(seed + 1);
    double total_seconds = 0, test_acc = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::vector<int64_t> order = tg::randperm(n, &shuffle).to_vector<int64_t>();
      tg::ProgressBar bar(steps_per_epoch, "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs));
      double loss_sum = 0;
      for (int64_t step = 0; step < steps_per_epoch; ++step) {
        const int64_t begin = step * batch_size, end = std::min(n, begin + batch_size);
        tg::Tensor x, y;
        tg::examples::gather_batch(train.images, train.labels, order, begin, end, {pixels}, x, y);
        model.zero_grad();
        tg::Tensor loss = tg::cross_entropy(model.forward(x), y);
        loss.backward();
        if (clip > 0) tg::clip_grad_norm_(model.parameters(), clip);
        optimizer.step();
        schedule.step();
        loss_sum += loss.item();
        bar.update(step + 1, end - begin, {{"loss", loss_sum / (step + 1)}, {"lr", optimizer.lr()}});
      }
      bar.finish();
      total_seconds += bar.elapsed_seconds();
      test_acc = tg::examples::accuracy(model, test.images, test.labels, 1000, {pixels});
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n", epoch,
                  loss_sum / steps_per_epoch, 100 * test_acc, bar.elapsed_seconds(), n / bar.elapsed_seconds());
    }
    std::printf("final test accuracy %.2f%% after %.1f s of training\n", 100 * test_acc, total_seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
}
