// A guided tour of the tape, for a student meeting backpropagation.
//
// We build a two-layer MLP by hand, run it forward while the tape records, print the tape,
// run backward step by step with the trace on, check the gradients against finite
// differences, and write the tape as a Graphviz drawing.
//
//   ./build/examples/tape_tour [--dot tape.dot]
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <tapegrad/tapegrad.h>

#include "common/output_files.h"

using namespace tg;

static int run(const std::string& dot_path) {
  examples::check_output_writable("--dot", dot_path);
  manual_seed(0);
  std::cout << "== 1. Leaves ==\n"
            << "Parameters are leaves that require grad: backward will fill their .grad().\n"
            << "The data x does not require grad, so no gradient is computed for it.\n\n";
  Tensor x = randn({4, 3}, DType::Float64);         // 4 samples, 3 features
  Tensor target = randn({4, 2}, DType::Float64);    // what we want the network to output
  Tensor w1 = mul(randn({5, 3}, DType::Float64), 0.5).detach().requires_grad_();
  Tensor b1 = zeros({5}, DType::Float64).requires_grad_();
  Tensor w2 = mul(randn({2, 5}, DType::Float64), 0.5).detach().requires_grad_();
  Tensor b2 = zeros({2}, DType::Float64).requires_grad_();

  std::cout << "== 2. Forward: every op records one entry on the tape ==\n";
  Tensor h = relu(linear(x, w1, b1));      // hidden layer
  Tensor y = linear(h, w2, b2);            // output layer
  Tensor diff = sub(y, target);
  Tensor loss = mean(mul(diff, diff));     // mean squared error
  std::cout << "loss = " << loss.item() << "\n\n"
            << "The tape, in recording order. '*' marks a leaf that requires grad, (#k) the entry\n"
            << "that produced an input; 'saved' is what each entry kept for its backward:\n"
            << tape_to_text(loss) << "\n"
            << "Note relu saved its output (its derivative is output > 0), mul saved each factor\n"
            << "for the other's gradient, and mean saved nothing (its derivative is 1/n).\n\n";

  // Atomically and checked: an unchecked stream printed "Wrote" for a path it could not create.
  write_file_atomically(dot_path, tape_to_dot(loss, {{w1, "w1"}, {b1, "b1"}, {w2, "w2"}, {b2, "b2"}}));
  std::cout << "Wrote the tape as Graphviz to " << dot_path << " (render: dot -Tpng " << dot_path
            << " -o tape.png)\n\n";

  std::cout << "== 3. Backward: the entries run in reverse, each turning the gradient of its\n"
            << "output into gradients of its inputs (|v| is the norm) ==\n";
  {
    BackwardTraceGuard trace(std::cout);
    loss.backward();
  }
  std::cout << "\nd loss / d b2 = " << b2.grad() << "\n"
            << "The saved tensors are gone now (pass retain_graph to keep them):\n"
            << tape_to_text(loss) << "\n";

  std::cout << "== 4. Gradient check: compare with central finite differences ==\n";
  auto model = [&](const std::vector<Tensor>& p) {
    Tensor d = sub(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), target);
    return std::vector<Tensor>{mean(mul(d, d))};
  };
  GradcheckResult check = gradcheck(model, {w1, b1, w2, b2});
  std::cout << (check.ok ? "gradcheck passed: the tape's gradients match finite differences\n"
                         : "gradcheck FAILED: " + check.message + "\n");

  std::cout << "\n== 5. Gradients of gradients: a Hessian-vector product ==\n"
               "backward with create_graph = true records the backward pass itself, so the gradient g\n"
               "is a function on the tape too; differentiating <g, v> gives H v without forming H.\n";
  std::vector<Tensor> params{w1, b1, w2, b2};
  std::vector<Tensor> g = grad({model(params)[0]}, params, {}, false, false, /*create_graph=*/true);
  Tensor v = randn(w1.shape(), DType::Float64);  // a direction in w1 only
  Tensor hv = grad({sum(mul(g[0], v))}, {w1})[0];
  // Check it against finite differences of the gradient along v: (g(w1 + e v) - g(w1 - e v)) / 2e.
  auto grad_w1_at = [&](double step) {
    Tensor w = add(w1.detach(), mul(v, step));
    w.requires_grad_();
    return grad({model({w, b1, w2, b2})[0]}, {w})[0];
  };
  const double e = 1e-5;
  Tensor fd = mul(sub(grad_w1_at(e), grad_w1_at(-e)), 1.0 / (2 * e));
  const double err = max(abs(sub(hv, fd))).item();
  const bool hvp_ok = err < 1e-6;
  std::cout << "|H v| = " << std::sqrt(sum(mul(hv, hv)).item()) << ", largest difference from finite differences "
            << err << (hvp_ok ? " (ok)\n" : " (FAILED)\n");

  std::cout << "\n== 6. The registry: every forward op with its backward ==\n" << registry().table();
  return check.ok && hvp_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"A guided tour of the tape: forward, backward, gradient checks, Graphviz"};
  std::string dot_path = "tape.dot";
  app.add_option("--dot", dot_path, "write the tape as Graphviz to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(dot_path);
  } catch (const std::exception& e) {  // a tg::Error (e.g. a bad TAPEGRAD_ISA): its message, not an abort
    std::cerr << "tape_tour: " << e.what() << "\n";
    return 1;
  }
}
