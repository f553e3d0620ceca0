// Trains a spatial-transformer classifier on Fashion-MNIST whose images are randomly rotated,
// scaled and shifted, beside its classifier alone (the same CNN, no transformer) on the same
// data, and reports the test accuracy of both (with and without the transformer). Writes a PNG
// sheet of distorted test images beside their rectified versions.
//
//   ./build/examples/train_stn --epochs 3 --threads 2 --sheet stn_sheet.png
//
// The network is PyTorch's spatial transformer tutorial's (see models/spatial_transformer.h):
// a convolutional localisation network, affine_grid + grid_sample (bilinear), and a small CNN
// classifier; without dropout, so that a run is reproducible.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tapegrad/tapegrad.h>

#include "common/busy_machine.h"
#include "common/cli_checks.h"
#include "common/divergence.h"
#include "common/output_files.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace {

double accuracy(tg::Module& model, const tg::Tensor& images, const tg::Tensor& labels) {
  tg::NoGradGuard no_grad;
  int64_t correct = 0;
  const int64_t n = images.size(0);
  for (int64_t b = 0; b < n; b += 1000) {
    const int64_t len = std::min<int64_t>(1000, n - b);
    tg::Tensor logits = model.forward(images.narrow(0, b, len).contiguous());
    std::vector<float> v = logits.to_vector<float>();
    for (int64_t r = 0; r < len; ++r) {
      const float* row = v.data() + r * 10;
      correct += std::max_element(row, row + 10) - row == labels.data<int64_t>()[b + r];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// One epoch of Adam steps on the loader's batches, freshly distorted; returns the mean loss.
// `what` names the model in the bar and in a divergence's message.
double train_epoch(tg::Module& model, tg::Optimizer& opt, tg::data::DataLoader& loader, tg::Generator& distort,
                   int epoch, int epochs, const std::string& what) {
  tg::ProgressBar bar(loader.size(), "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + " " + what);
  double loss_sum = 0;
  int64_t steps = 0;
  for (const std::vector<tg::Tensor>& batch : loader) {  // {images [B, 1, 28, 28], labels [B]}
    tg::Tensor x = tg::random_affine_distort(batch[0].squeeze(1), distort);
    model.zero_grad();
    tg::Tensor loss = tg::cross_entropy(model.forward(x), batch[1]);
    loss.backward();
    opt.step();
    ++steps;
    const double value = loss.item();
    tg::examples::check_loss_finite(value, epoch, steps, what);
    loss_sum += value;
    bar.update(steps, batch[1].size(0), {{"loss", loss_sum / steps}});
  }
  bar.finish();
  tg::examples::check_parameters_finite(model, epoch, what);
  return loss_sum / static_cast<double>(std::max<int64_t>(steps, 1));
}

// Appends what stb hands over to the std::string `context` points to.
void append_to_string(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

// rows x cols pairs (distorted | rectified) of 28x28 images, 2-pixel gutters, 8-bit grey. The
// PNG is encoded in memory and written with write_file_atomically, which checks every write
// (stbi_write_png checks neither fwrite nor fclose: a full disk gave a 0-byte file and "wrote").
void write_sheet(const std::string& path, const tg::Tensor& distorted, const tg::Tensor& rectified, int rows,
                 int cols) {
  const int side = 28, gap = 2, cell_w = 2 * side + 3 * gap, cell_h = side + gap;
  const int width = cols * cell_w, height = rows * cell_h + gap;
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * height, 128);
  const float* a = distorted.data<float>();
  const float* b = rectified.data<float>();
  for (int k = 0; k < rows * cols && k < distorted.size(0); ++k) {
    const int x0 = (k % cols) * cell_w + gap, y0 = (k / cols) * cell_h + gap;
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x) {
        auto grey = [](float v) { return static_cast<unsigned char>(std::clamp(v, 0.0f, 1.0f) * 255.0f + 0.5f); };
        const size_t at = static_cast<size_t>(k) * side * side + y * side + x;
        pixels[static_cast<size_t>(y0 + y) * width + x0 + x] = grey(a[at]);
        pixels[static_cast<size_t>(y0 + y) * width + x0 + side + gap + x] = grey(b[at]);
      }
  }
  std::string png;
  TG_CHECK(stbi_write_png_to_func(append_to_string, &png, width, height, 1, pixels.data(), width),
           "--sheet: could not encode the ", width, "x", height, " PNG for ", path);
  tg::write_file_atomically(path, png);
}

struct Options {
  int epochs = 3, threads = 2;
  int64_t batch_size = 128, hidden = 50, loc_hidden = 32, limit = 0;
  double lr = 1e-3, loc_lr = 1e-4;
  uint64_t seed = 0;
  std::string data_dir = tg::data::kFashionMnistDir, sheet = "stn_sheet.png";
};

void add_options(CLI::App& app, Options& o) {
  using tg::examples::positive_number;
  using tg::examples::whole_number;
  app.add_option("--epochs", o.epochs, "passes over the training set")->check(whole_number(1, 100000));
  app.add_option("--batch-size", o.batch_size, "samples per step")->check(whole_number<int64_t>(1, 1 << 20));
  app.add_option("--lr", o.lr, "Adam learning rate of the classifiers")->check(positive_number());
  app.add_option("--loc-lr", o.loc_lr, "Adam learning rate of the localisation network")->check(positive_number());
  app.add_option("--hidden", o.hidden, "width of the classifier's hidden Linear layer")
      ->check(whole_number<int64_t>(1, 65536));
  app.add_option("--loc-hidden", o.loc_hidden, "width of the localisation network's hidden Linear layer")
      ->check(whole_number<int64_t>(1, 65536));
  app.add_option("--threads", o.threads, "OpenMP threads")->check(whole_number(1, 1024));
  app.add_option("--seed", o.seed, "seed for initialisation, shuffling and distortions")
      ->check(whole_number<uint64_t>(0));
  app.add_option("--data-dir", o.data_dir, "directory with the Fashion-MNIST gzip IDX files");
  app.add_option("--limit", o.limit, "use only the first N training samples (0: all)")->check(whole_number<int64_t>(0));
  app.add_option("--sheet", o.sheet, "PNG of distorted test images beside their rectified versions (empty: none)");
}

// The two models compared, each with its optimiser: the baseline is the STN's classifier alone,
// on the distorted pixels. Built in this order from the global generator.
struct Contenders {
  explicit Contenders(const Options& o)
      : plain(o.hidden),
        stn(o.loc_hidden, o.hidden),
        plain_opt(plain.parameters(), tg::AdamOptions{o.lr}),
        stn_opt(stn.classifier->parameters(), tg::AdamOptions{o.lr}) {
    // The localisation network learns more slowly (as in the STN paper): a jumpy theta early
    // on throws the image out of the frame before the classifier has learnt anything.
    stn_opt.add_param_group(stn.localisation_parameters(), tg::AdamOptions{o.loc_lr});
  }
  tg::ConvClassifier plain;
  tg::SpatialTransformerClassifier stn;
  tg::Adam plain_opt, stn_opt;
};

void print_contenders(const Options& o, const Contenders& m) {
  std::printf("without transformer: CNN (conv 10@5x5, pool, conv 20@5x5, pool, Linear [320, %lld, 10]), %lld "
              "parameters\n",
              static_cast<long long>(o.hidden), static_cast<long long>(m.plain.num_parameters()));
  std::printf("with transformer: localisation (conv 8@7x7, pool, conv 10@5x5, pool, Linear [90, %lld, 6]) + the "
              "same CNN, %lld parameters\n",
              static_cast<long long>(o.loc_hidden), static_cast<long long>(m.stn.num_parameters()));
}

// fn(), with its wall time added to `seconds`.
template <class Fn>
double timed(double& seconds, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  const double r = fn();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

struct Comparison {
  double acc_plain = 0, acc_stn = 0, seconds_plain = 0, seconds_stn = 0;
};

// Trains both models for o.epochs on the same shuffles and distortions (loaders and generators
// of equal seeds), printing each epoch's losses and test accuracies; returns the last accuracies
// and the training times.
Comparison train_both(const Options& o, Contenders& m, const std::shared_ptr<const tg::data::Dataset>& train,
                      const tg::Tensor& test_x, const tg::Tensor& test_labels) {
  const auto shuffled = tg::data::DataLoaderOptions().batch_size(o.batch_size).shuffle(true).seed(o.seed + 1);
  tg::data::DataLoader loader_a(train, shuffled), loader_b(train, shuffled);
  tg::Generator distort_a(o.seed + 2), distort_b(o.seed + 2);
  Comparison c;
  for (int e = 1; e <= o.epochs; ++e) {
    const double loss_plain = timed(c.seconds_plain, [&] {
      return train_epoch(m.plain, m.plain_opt, loader_a, distort_a, e, o.epochs, "CNN");
    });
    const double loss_stn = timed(c.seconds_stn, [&] {
      return train_epoch(m.stn, m.stn_opt, loader_b, distort_b, e, o.epochs, "STN");
    });
    c.acc_plain = accuracy(m.plain, test_x, test_labels);
    c.acc_stn = accuracy(m.stn, test_x, test_labels);
    std::printf("epoch %d: train loss %.4f without / %.4f with transformer; test accuracy %.2f%% without, %.2f%% "
                "with\n",
                e, loss_plain, loss_stn, 100 * c.acc_plain, 100 * c.acc_stn);
  }
  return c;
}

// The first 8 x 6 distorted test images (all of them when there are fewer) beside what the
// STN's classifier reads of them.
void write_rectified_sheet(const std::string& path, tg::SpatialTransformerClassifier& stn, const tg::Tensor& test_x) {
  tg::NoGradGuard no_grad;
  const int cols = 6;
  const int shown_count = static_cast<int>(std::min<int64_t>(8 * cols, test_x.size(0)));
  const int rows = (shown_count + cols - 1) / cols;
  tg::Tensor shown = test_x.narrow(0, 0, shown_count).contiguous();
  write_sheet(path, shown, stn.rectify(shown).contiguous(), rows, cols);
  std::printf("wrote %s: %d distorted test images (left) beside what the classifier read (right)\n", path.c_str(),
              shown_count);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a spatial-transformer classifier on distorted Fashion-MNIST with tapegrad"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  try {
    // Before the minutes of training: a sheet that cannot be written, or that would replace
    // one of the data files.
    if (!o.sheet.empty())
      tg::examples::check_output_path("--sheet", o.sheet, tg::examples::fashion_mnist_inputs(o.data_dir));
    tg::set_num_threads(o.threads);
    tg::manual_seed(o.seed);
    std::shared_ptr<const tg::data::Dataset> train = std::make_shared<tg::data::FashionMNIST>("train", o.data_dir);
    if (o.limit > 0) train = tg::data::first_samples(train, o.limit);
    const tg::data::FashionMNIST test("test", o.data_dir);
    // One fixed distortion of the test set, the same for both models.
    tg::Generator test_distort(o.seed + 100);
    tg::Tensor test_x = tg::random_affine_distort(test.images().squeeze(1), test_distort);
    std::printf("Fashion-MNIST, randomly rotated (+-45 deg), scaled (0.6-1) and shifted (+-12.5%%): %lld train, "
                "%lld test images; %d threads\n",
                static_cast<long long>(train->size()), static_cast<long long>(test.size()), o.threads);
    std::fflush(stdout);
    tg::warn_if_machine_busy(o.threads, std::cout);

    Contenders m(o);
    print_contenders(o, m);
    const Comparison c = train_both(o, m, train, test_x, test.labels());
    std::printf("final test accuracy on distorted images: %.2f%% without the transformer, %.2f%% with it\n",
                100 * c.acc_plain, 100 * c.acc_stn);
    std::printf("training time: %.1f s without the transformer, %.1f s with it\n", c.seconds_plain, c.seconds_stn);
    if (!o.sheet.empty()) write_rectified_sheet(o.sheet, m.stn, test_x);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_stn: %s\n", e.what());
    return 1;
  }
}
