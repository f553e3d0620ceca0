// Built against an installed tapegrad: a gradient through the public header must come out right.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>

int main() {
  tg::Tensor x = tg::from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3});
  x.requires_grad_();
  tg::Tensor y = tg::sum(tg::mul(x, x));  // d/dx sum(x^2) = 2x
  y.backward();
  std::vector<double> g = x.grad().to_vector<double>();
  bool ok = std::abs(g[0] - 2) < 1e-12 && std::abs(g[1] - 4) < 1e-12 && std::abs(g[2] - 6) < 1e-12;
  std::printf("consumer: grad = [%g, %g, %g] %s\n", g[0], g[1], g[2], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
