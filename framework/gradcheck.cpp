#include "gradcheck.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "grad_mode.h"
#include "inplace.h"
#include "random.h"
#include "tape.h"

namespace tg {

namespace {

struct Checker {
  const GradcheckFn& fn;
  std::vector<Tensor> inputs;       // the caller's tensors (perturbed in place, then restored)
  std::vector<size_t> wrt;          // indices of inputs that require grad
  const GradcheckOptions& opt;
  Generator gen;
  std::ostringstream failure;

  Checker(const GradcheckFn& f, const std::vector<Tensor>& in, const GradcheckOptions& o)
      : fn(f), inputs(in), opt(o), gen(o.seed) {}

  std::vector<Tensor> run_no_grad() {
    NoGradGuard no_grad;
    return fn(inputs);
  }

  // Which outputs are checked: those that require grad when fn runs on the tape, as PyTorch's
  // gradcheck (all of them when none does: their finite differences must then be zero).
  std::vector<char> checked;

  // The checked outputs flattened into one float64 vector.
  std::vector<double> flatten(const std::vector<Tensor>& outs) const {
    std::vector<double> v;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!checked[i]) continue;
      std::vector<double> part = outs[i].to(DType::Float64).to_vector<double>();
      v.insert(v.end(), part.begin(), part.end());
    }
    return v;
  }

  // fn run on the tape: the outputs that require grad (the roots of a backward), each with its
  // seed, the matching output gradient of `grad_outs` in the output's dtype.
  struct Recorded {
    std::vector<Tensor> roots, seeds;
  };
  Recorded record(const std::vector<Tensor>& grad_outs) {
    std::vector<Tensor> outs;
    {
      EnableGradGuard grad_on;
      outs = fn(inputs);
    }
    Recorded r;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      r.roots.push_back(outs[i]);
      // A copy: a backward may hand the seed itself on as a gradient, and callers reuse theirs.
      r.seeds.push_back(grad_outs[i].to(outs[i].dtype()).clone());
    }
    return r;
  }

  // Analytical vector-Jacobian products: for output gradients `grad_outs`, the gradient of
  // every checked input, computed through the tape.
  std::vector<Tensor> vjp(const std::vector<Tensor>& grad_outs) {
    const Recorded r = record(grad_outs);
    std::vector<Tensor> wrt_tensors;
    for (size_t k : wrt) wrt_tensors.push_back(inputs[k]);
    std::vector<Tensor> grads(wrt.size());
    // No output depends on a checked input (a constant function, such as fill_'s gradient in
    // gradgradcheck): the Jacobian is zero.
    if (!r.roots.empty()) grads = grad(r.roots, wrt_tensors, r.seeds, /*retain_graph=*/false, /*allow_unused=*/true);
    for (size_t j = 0; j < grads.size(); ++j)
      if (!grads[j].defined()) grads[j] = zeros_like(inputs[wrt[j]]);
    return grads;
  }

  std::vector<Tensor> random_like(const std::vector<Tensor>& ts) {
    std::vector<Tensor> r;
    for (const Tensor& t : ts) r.push_back(randn(t.shape(), DType::Float64, &gen));
    return r;
  }

  // torch.allclose: equal (infinities included) or within the tolerance; NaN is never close.
  bool close(double analytical, double numerical) const {
    return analytical == numerical || std::abs(analytical - numerical) <= opt.atol + opt.rtol * std::abs(numerical);
  }

  // Central difference of the outputs along direction `dir` of input k: (f(x+eps d) - f(x-eps d)) / 2eps.
  std::vector<double> directional_difference(size_t k, const Tensor& dir) {
    Tensor x = inputs[k];
    NoGradGuard no_grad;  // the inputs are leaves that require grad: perturbed outside the tape
    Tensor saved = x.clone();
    x.add_(dir, opt.eps);
    std::vector<double> plus = flatten(run_no_grad());
    x.copy_(saved);
    x.add_(dir, -opt.eps);
    std::vector<double> minus = flatten(run_no_grad());
    x.copy_(saved);
    std::vector<double> d(plus.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = (plus[i] - minus[i]) / (2 * opt.eps);
    return d;
  }

  bool check_full(const std::vector<Tensor>& outs0) {
    // Numerical Jacobian column by column; analytical row by row (one backward per output element).
    const size_t n_out = flatten(outs0).size();
    std::vector<std::vector<double>> analytical_rows(n_out);  // [out][concatenated input elements]
    std::vector<std::pair<size_t, int64_t>> row_origin;       // [out]: (output, element)
    std::vector<Tensor> seeds;
    for (const Tensor& o : outs0) seeds.push_back(zeros(o.shape(), DType::Float64));
    size_t row = 0;
    for (size_t oi = 0; oi < outs0.size(); ++oi) {
      if (!checked[oi]) continue;
      for (int64_t e = 0; e < outs0[oi].numel(); ++e, ++row) {
        row_origin.emplace_back(oi, e);
        seeds[oi].data<double>()[e] = 1.0;
        std::vector<Tensor> g = vjp(seeds);
        seeds[oi].data<double>()[e] = 0.0;
        for (const Tensor& gi : g) {
          std::vector<double> v = gi.to_vector<double>();
          analytical_rows[row].insert(analytical_rows[row].end(), v.begin(), v.end());
        }
      }
    }
    size_t col_base = 0;
    for (size_t j = 0; j < wrt.size(); ++j) {
      const Tensor& x = inputs[wrt[j]];
      Tensor dir = zeros(x.shape(), DType::Float64);
      double worst = -1, worst_a = 0, worst_n = 0;
      int64_t worst_in = 0;
      size_t worst_out = 0;
      for (int64_t e = 0; e < x.numel(); ++e) {
        dir.data<double>()[e] = 1.0;
        std::vector<double> col = directional_difference(wrt[j], dir);
        dir.data<double>()[e] = 0.0;
        for (size_t o = 0; o < n_out; ++o) {
          double a = analytical_rows[o][col_base + e], n = col[o];
          // > 0 when not close; a NaN on either side fails (as a plain difference it compared
          // false below and passed silently)
          double excess = -1;
          if (!close(a, n)) {
            const double over = std::abs(a - n) - (opt.atol + opt.rtol * std::abs(n));
            excess = std::isnan(over) ? HUGE_VAL : over;
          }
          if (excess > worst) {
            worst = excess;
            worst_a = a;
            worst_n = n;
            worst_in = e;
            worst_out = o;
          }
        }
      }
      if (worst > 0) {
        failure << "gradcheck: Jacobian mismatch for input " << wrt[j] << " (shape " << format_shape(x.shape())
                << "): worst at input element " << worst_in << " and output " << row_origin[worst_out].first
                << " element " << row_origin[worst_out].second << ": numerical " << worst_n << ", analytical " << worst_a << " (atol " << opt.atol << ", rtol "
                << opt.rtol << ")";
        return false;
      }
      col_base += static_cast<size_t>(x.numel());
    }
    return true;
  }

  bool check_fast(const std::vector<Tensor>& outs0) {
    // u^T J v for a random u over the outputs and a random v per input.
    std::vector<Tensor> u = random_like(outs0);
    std::vector<double> uf = flatten(u);
    std::vector<Tensor> g = vjp(u);
    for (size_t j = 0; j < wrt.size(); ++j) {
      const Tensor& x = inputs[wrt[j]];
      Tensor v = randn(x.shape(), DType::Float64, &gen);
      std::vector<double> d = directional_difference(wrt[j], v);
      double numerical = 0, analytical = 0;
      for (size_t i = 0; i < d.size(); ++i) numerical += uf[i] * d[i];
      std::vector<double> gv = g[j].to_vector<double>(), vv = v.to_vector<double>();
      for (size_t i = 0; i < gv.size(); ++i) analytical += gv[i] * vv[i];
      if (!close(analytical, numerical)) {
        failure << "gradcheck (fast mode): projection mismatch for input " << wrt[j] << " (shape "
                << format_shape(x.shape()) << "): numerical u^T J v = " << numerical << ", analytical "
                << analytical << " (atol " << opt.atol << ", rtol " << opt.rtol << ")";
        return false;
      }
    }
    return true;
  }

  bool check_repeatable(const std::vector<Tensor>& outs0) {
    std::vector<Tensor> u = random_like(outs0);
    std::vector<Tensor> a = vjp(u), b = vjp(u);
    for (size_t j = 0; j < a.size(); ++j) {
      std::vector<double> va = a[j].to_vector<double>(), vb = b[j].to_vector<double>();
      for (size_t i = 0; i < va.size(); ++i) {
        if (va[i] != vb[i] && !(std::isnan(va[i]) && std::isnan(vb[i]))) {
          failure << "gradcheck: backward is not repeatable for input " << wrt[j] << ": element " << i << " was "
                  << va[i] << " then " << vb[i];
          return false;
        }
      }
    }
    return true;
  }

  bool check_zero_grad_output(const std::vector<Tensor>& outs0) {
    std::vector<Tensor> z;
    for (const Tensor& o : outs0) z.push_back(zeros(o.shape(), DType::Float64));
    std::vector<Tensor> g = vjp(z);
    for (size_t j = 0; j < g.size(); ++j) {
      std::vector<double> v = g[j].to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != 0.0) {
          failure << "gradcheck: a zero output gradient gave a non-zero gradient " << v[i] << " at element " << i
                  << " of input " << wrt[j];
          return false;
        }
      }
    }
    return true;
  }

  // The leaves a backward from `roots` reaches (captured parameters too), each once.
  static std::vector<std::shared_ptr<TensorImpl>> leaves_reached(const std::vector<Tensor>& roots) {
    std::vector<std::shared_ptr<TensorImpl>> leaves;
    std::set<const void*> seen;
    std::vector<const Node*> stack;
    for (const Tensor& r : roots) {
      if (r.grad_fn()) stack.push_back(r.grad_fn().get());
      else if (seen.insert(r.impl()).second) leaves.push_back(r.impl_ptr());
    }
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const Edge& e : n->edges()) {
        if (e.fn) stack.push_back(e.fn.get());
        else if (e.leaf && seen.insert(e.leaf.get()).second) leaves.push_back(e.leaf);
      }
    }
    return leaves;
  }

  // backward() adds into an existing .grad(): a real backward, so every .grad() it reaches is
  // saved first and put back after (the caller's own, and those of parameters fn captures, as
  // PyTorch's gradcheck leaves them untouched). An input given twice is set and checked once.
  bool check_accumulates(const std::vector<Tensor>& outs0) {
    std::vector<Tensor> u = random_like(outs0);
    std::vector<Tensor> expected = vjp(u);
    const Recorded r = record(u);
    if (r.roots.empty()) return true;
    std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> kept;
    for (const auto& leaf : leaves_reached(r.roots)) kept.emplace_back(leaf, leaf->grad);
    for (size_t k : wrt)  // (a checked input the outputs do not reach gets a .grad() below too)
      kept.emplace_back(inputs[k].impl_ptr(), inputs[k].impl()->grad);
    std::map<const TensorImpl*, Tensor> before, want;  // per distinct checked leaf
    for (size_t j = 0; j < wrt.size(); ++j) {
      const Tensor& x = inputs[wrt[j]];
      if (!x.is_leaf()) continue;  // only leaves accumulate
      if (!before.count(x.impl())) {
        Tensor existing = randn(x.shape(), x.dtype(), &gen);
        before[x.impl()] = existing.clone();
        want[x.impl()] = existing.to(DType::Float64).clone();
        inputs[wrt[j]].set_grad(existing);
        detail::raw_add_(want[x.impl()], expected[j]);  // (a repeated input's expected[j] is its whole gradient)
      }
    }
    std::string wrong;
    try {
      backward(r.roots, r.seeds);
      for (size_t j = 0; j < wrt.size() && wrong.empty(); ++j) {
        const Tensor& x = inputs[wrt[j]];
        if (!x.is_leaf()) continue;
        std::vector<double> g = x.grad().to(DType::Float64).to_vector<double>();
        std::vector<double> b = before.at(x.impl()).to(DType::Float64).to_vector<double>();
        std::vector<double> w = want.at(x.impl()).to_vector<double>();
        for (size_t i = 0; i < g.size(); ++i) {
          if (!(std::abs(g[i] - w[i]) <= 1e-12 * (1 + std::abs(b[i]) + std::abs(w[i] - b[i])))) {  // NaN fails
            std::ostringstream m;
            m << "gradcheck: backward did not add into the existing .grad() of input " << wrt[j] << ": element " << i
              << " is " << g[i] << ", expected " << b[i] << " + " << w[i] - b[i];
            wrong = m.str();
            break;
          }
        }
      }
    } catch (...) {
      for (auto& [leaf, grad] : kept) leaf->grad = grad;
      throw;
    }
    for (auto& [leaf, grad] : kept) leaf->grad = grad;
    failure << wrong;
    return wrong.empty();
  }

  GradcheckResult run() {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k].defined() || !inputs[k].requires_grad()) continue;
      TG_CHECK(inputs[k].dtype() == DType::Float64, "gradcheck: input ", k,
               " requires grad and must be float64 for finite differences, got ", dtype_name(inputs[k].dtype()));
      // (as PyTorch's gradcheck: perturbing one element would move all that share its memory)
      TG_CHECK(!detail::shares_elements(inputs[k]), "gradcheck: input ", k, " of shape ",
               format_shape(inputs[k].shape()), " and strides ", format_shape(inputs[k].strides()),
               " has elements that share memory (a stride of 0, as from expand()): finite differences need "
               "each element on its own; pass contiguous() of it");
      wrt.push_back(k);
    }
    TG_CHECK(!wrt.empty(), "gradcheck: no input requires grad");
    std::vector<Tensor> outs0 = run_no_grad();
    TG_CHECK(!outs0.empty(), "gradcheck: the function returned no outputs");
    {
      std::vector<Tensor> on_tape;
      {
        EnableGradGuard grad_on;
        on_tape = fn(inputs);
      }
      for (const Tensor& o : on_tape) checked.push_back(o.requires_grad());
      if (std::find(checked.begin(), checked.end(), 1) == checked.end()) checked.assign(outs0.size(), 1);
    }
    int64_t n_in = 0, n_out = 0;
    for (size_t k : wrt) n_in += inputs[k].numel();
    for (size_t i = 0; i < outs0.size(); ++i) n_out += checked[i] ? outs0[i].numel() : 0;
    const bool fast = opt.force_fast_mode || n_in * n_out > opt.full_jacobian_limit;

    bool ok = fast ? check_fast(outs0) : check_full(outs0);
    if (ok && opt.check_repeatable) ok = check_repeatable(outs0);
    if (ok && opt.check_zero_grad_output) ok = check_zero_grad_output(outs0);
    if (ok && opt.check_accumulates) ok = check_accumulates(outs0);
    return {ok, failure.str()};
  }
};

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  Checker checker(fn, inputs, options);
  return checker.run();
}

GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options) {
  std::vector<size_t> wrt;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) wrt.push_back(k);
  TG_CHECK(!wrt.empty(), "gradgradcheck: no input requires grad");
  std::vector<Tensor> outs0;
  {
    NoGradGuard no_grad;
    outs0 = fn(inputs);
  }
  // Output gradients v, fixed random values that are inputs of the checked function as well:
  // its second derivatives in v are the mixed ones, d/dv (v^T J) = J.
  Generator gen(options.seed + 1);
  std::vector<Tensor> all = inputs;
  for (const Tensor& o : outs0) {
    Tensor v = randn(o.shape(), DType::Float64, &gen);
    v.requires_grad_();
    all.push_back(v);
  }
  const size_t n_in = inputs.size();
  // The first-order gradients as a function of (inputs, v). gradcheck calls it with grad mode
  // on and the caller's leaves for the analytical part (then the gradients are recorded with
  // create_graph), and under NoGradGuard on perturbed copies for the finite differences (then
  // plain first-order gradients of fresh leaves are all it needs).
  GradcheckFn first_order = [&](const std::vector<Tensor>& x) {
    const bool recording = GradMode::is_enabled();
    std::vector<Tensor> in(x.begin(), x.begin() + n_in);
    if (!recording)
      for (size_t k : wrt) {
        in[k] = in[k].detach();
        in[k].requires_grad_();
      }
    EnableGradGuard grad_on;
    std::vector<Tensor> outs = fn(in);
    std::vector<Tensor> roots, seeds, wrt_tensors, grads(wrt.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      roots.push_back(outs[i]);
      seeds.push_back(x[n_in + i].to(outs[i].dtype()));
    }
    for (size_t k : wrt) wrt_tensors.push_back(in[k]);
    if (!roots.empty())
      grads = grad(roots, wrt_tensors, seeds, /*retain_graph=*/false, /*allow_unused=*/true, /*create_graph=*/recording);
    for (size_t j = 0; j < grads.size(); ++j)
      if (!grads[j].defined()) grads[j] = zeros_like(in[wrt[j]]).to(DType::Float64);
    return grads;
  };
  GradcheckResult r = gradcheck(first_order, all, options);
  if (!r.ok) r.message = "gradgradcheck (second derivatives): " + r.message;
  return r;
}

}  // namespace tg
