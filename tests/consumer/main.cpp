// Built against an installed tapegrad: a gradient through the public header must come out right.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  tg::Tensor x = tg::from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3});
  x.requires_grad_();
  tg::Tensor y = tg::sum(tg::mul(x, x));  // d/dx sum(x^2) = 2x
  y.backward();
  std::vector<double> g = x.grad().to_vector<double>();
  bool ok = std::abs(g[0] - 2) < 1e-12 && std::abs(g[1] - 4) < 1e-12 && std::abs(g[2] - 6) < 1e-12;
  std::printf("consumer: grad = [%g, %g, %g] %s\n", g[0], g[1], g[2], ok ? "ok" : "WRONG");
  // The data pipeline and the installed progress bar: 5 samples in batches of 2, built ahead on
  // the loader's thread.
  tg::data::DataLoader loader(tg::data::TensorDataset({tg::arange(0, 5)}), tg::data::DataLoaderOptions().batch_size(2));
  int64_t batches = 0, sum = 0;
  for (const std::vector<tg::Tensor>& batch : loader) {
    ++batches;
    for (int64_t v : batch[0].to_vector<int64_t>()) sum += v;
  }
  const bool data_ok = batches == 3 && sum == 10 && !tg::render_progress(1, 3, 2, 0.5, {}).empty();
  std::printf("consumer: %lld batches, sum %lld %s\n", static_cast<long long>(batches), static_cast<long long>(sum),
              data_ok ? "ok" : "WRONG");
  ok = ok && data_ok;
  return ok ? 0 : 1;
}
