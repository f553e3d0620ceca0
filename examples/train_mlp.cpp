// Trains an MLP classifier on Fashion-MNIST: Module + Linear/ReLU, cross_entropy, AdamW with a
// warmup-cosine schedule, gradient clipping and a progress bar; reports test accuracy per epoch.
//
//   ./build/examples/train_mlp --epochs 3 --batch-size 128 --lr 1e-3 --threads 2
//
// The data are Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or any
// directory with the four original gzip IDX files (--data-dir).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <tapegrad/tapegrad.h>

#include "common/busy_machine.h"
#include "common/fashion_mnist.h"
#include "common/progress_bar.h"

namespace {

// Rows `order[begin, end)` of a row-major [N, ...] float32 tensor and int64 labels, as a batch.
void gather_batch(const tg::Tensor& images, const tg::Tensor& labels, const std::vector<int64_t>& order,
                  int64_t begin, int64_t end, tg::Tensor& x, tg::Tensor& y) {
  const int64_t row = images.numel() / images.size(0), n = end - begin;
  x = tg::Tensor::empty({n, row}, tg::DType::Float32);
  y = tg::Tensor::empty({n}, tg::DType::Int64);
  const float* src = images.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  float* dst = x.data<float>();
  int64_t* dl = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * row, src + order[begin + i] * row, sizeof(float) * row);
    dl[i] = lab[order[begin + i]];
  }
}

// Fraction of `images` whose arg-max logit is the label.
double accuracy(tg::Module& model, const tg::Tensor& images, const tg::Tensor& labels, int64_t batch) {
  tg::NoGradGuard no_grad;
  model.eval();
  const int64_t n = images.size(0);
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  int64_t correct = 0;
  for (int64_t b = 0; b < n; b += batch) {
    tg::Tensor x, y;
    gather_batch(images, labels, order, b, std::min(n, b + batch), x, y);
    tg::Tensor logits = model.forward(x);
    const int64_t rows = logits.size(0), classes = logits.size(1);
    std::vector<float> v = logits.to_vector<float>();
    const int64_t* t = y.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = v.data() + r * classes;
      correct += std::max_element(row, row + classes) - row == t[r];
    }
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

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
        gather_batch(train.images, train.labels, order, begin, end, x, y);
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
      test_acc = accuracy(model, test.images, test.labels, 1000);
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
