// Trains a small convolutional network on Fashion-MNIST, as PyTorch's tutorials write one:
// two blocks of Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d, then Flatten -> Linear -> ReLU ->
// Linear; cross_entropy and Adam; tg::data's DataLoader (shuffled batches built on a background
// thread). Prints the time and test accuracy of each epoch.
//
//   ./build/examples/train_cnn --epochs 3 --batch-size 64 --lr 1e-3 --threads 2
//
// tools/train_cnn_torch.py is the same program in PyTorch (same model, optimizer, batch size and
// epochs), to time an epoch of each on the same machine and threads. The data are Debian's
// dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or any directory with the four
// original gzip IDX files (--data-dir).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <tapegrad/tapegrad.h>

#include "common/busy_machine.h"
#include "common/classifier_accuracy.h"
#include "common/cli_checks.h"
#include "common/divergence.h"

namespace {

// [N, 1, 28, 28] -> 32 x 14 x 14 -> 64 x 7 x 7 -> 128 -> 10 logits.
std::shared_ptr<tg::Sequential> make_cnn() {
  using std::make_shared;
  auto block = [](int64_t in, int64_t out) {
    return std::vector<std::shared_ptr<tg::Module>>{
        make_shared<tg::Conv2d>(in, out, 3, 1, 1), make_shared<tg::BatchNorm2d>(out), make_shared<tg::ReLU>(),
        make_shared<tg::MaxPool2d>(2)};
  };
  std::vector<std::shared_ptr<tg::Module>> layers = block(1, 32);
  for (auto& m : block(32, 64)) layers.push_back(m);
  for (std::shared_ptr<tg::Module> m :
       std::vector<std::shared_ptr<tg::Module>>{make_shared<tg::Flatten>(), make_shared<tg::Linear>(64 * 7 * 7, 128),
                                                make_shared<tg::ReLU>(), make_shared<tg::Linear>(128, 10)})
    layers.push_back(m);
  return make_shared<tg::Sequential>(layers);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN with BatchNorm on Fashion-MNIST with tapegrad"};
  int epochs = 3, threads = 2;
  int64_t batch_size = 64, limit = 0;
  double lr = 1e-3;
  uint64_t seed = 0;
  bool progress = true, flush_denormal = true;
  std::string data_dir = tg::data::kFashionMnistDir;
  using tg::examples::whole_number;
  app.add_option("--epochs", epochs, "passes over the training set")->check(whole_number(1, 100000));
  app.add_option("--batch-size", batch_size, "samples per step")->check(whole_number<int64_t>(1, 1 << 20));
  app.add_option("--lr", lr, "learning rate (Adam)")->check(tg::examples::positive_number());
  app.add_option("--threads", threads, "OpenMP threads")->check(whole_number(1, 1024));
  app.add_option("--seed", seed, "seed for initialisation and shuffling")->check(whole_number<uint64_t>(0));
  app.add_option("--data-dir", data_dir, "directory with the Fashion-MNIST gzip IDX files");
  app.add_option("--limit", limit, "use only the first N training samples (0: all)")->check(whole_number<int64_t>(0));
  app.add_flag("!--no-progress", progress, "no progress bar");
  app.add_flag("!--no-flush-denormal", flush_denormal,
               "keep IEEE denormals (slower: after an epoch some activations' gradients become denormal)");
  CLI11_PARSE(app, argc, argv);

  try {
    tg::set_num_threads(threads);
    if (flush_denormal) tg::set_flush_denormal(true);
    tg::manual_seed(seed);
    std::shared_ptr<const tg::data::Dataset> train = std::make_shared<tg::data::FashionMNIST>("train", data_dir);
    if (limit > 0) train = tg::data::first_samples(train, limit);
    auto test = std::make_shared<tg::data::FashionMNIST>("test", data_dir);
    const int64_t n = train->size();
    std::printf("Fashion-MNIST: %lld train, %lld test images; %d threads\n", static_cast<long long>(n),
                static_cast<long long>(test->size()), threads);
    std::fflush(stdout);
    tg::warn_if_machine_busy(threads, std::cout);

    auto model = make_cnn();
    tg::AdamOptions options;
    options.lr = lr;
    tg::Adam optimizer(model->parameters(), options);
    // Shuffled batches, a new order each epoch (seed + 1 + epoch), built on a thread while a step runs.
    tg::data::DataLoader loader(train, tg::data::DataLoaderOptions().batch_size(batch_size).shuffle(true).seed(seed + 1));
    tg::data::DataLoader test_loader(test, tg::data::DataLoaderOptions().batch_size(1000));
    const int64_t steps_per_epoch = loader.size();
    std::printf("model: 2 x (Conv2d 3x3, BatchNorm2d, ReLU, MaxPool2d 2), Flatten, Linear 3136-128, ReLU, "
                "Linear 128-10: %lld parameters; Adam lr %g, batch %lld, %d epochs\n",
                static_cast<long long>(model->num_parameters()), lr, static_cast<long long>(batch_size), epochs);

    double total_seconds = 0, test_acc = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::unique_ptr<tg::ProgressBar> bar;
      if (progress)
        bar = std::make_unique<tg::ProgressBar>(steps_per_epoch,
                                                "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs));
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t step = 0;
      for (const std::vector<tg::Tensor>& batch : loader) {  // {images [B, 1, 28, 28], labels [B]}
        model->zero_grad();
        tg::Tensor loss = tg::cross_entropy(model->forward(batch[0]), batch[1]);
        loss.backward();
        optimizer.step();
        ++step;
        const double value = loss.item();
        tg::examples::check_loss_finite(value, epoch, step);
        loss_sum += value;
        if (bar) bar->update(step, batch[1].size(0), {{"loss", loss_sum / step}});
      }
      if (bar) bar->finish();
      tg::examples::check_parameters_finite(*model, epoch);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      total_seconds += seconds;
      test_acc = tg::examples::accuracy(*model, test_loader);
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n", epoch,
                  loss_sum / steps_per_epoch, 100 * test_acc, seconds, n / seconds);
      std::fflush(stdout);
    }
    std::printf("final test accuracy %.2f%% after %.1f s of training (%.1f s per epoch)\n", 100 * test_acc,
                total_seconds, total_seconds / epochs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_cnn: %s\n", e.what());
    return 1;
  }
}
