// Nearest and nearest-exact upsampling: validation, dtype dispatch, the tape and the kernels'
// public entry points. One implementation (NearestCall) serves the twelve public functions.
// Backward needs only sizes and scales, so forward saves no tensor.
#include "upsample_nearest.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "../internal/isa_dispatch.h"
#include "../internal/reduced_float.h"
#include "../internal/samples.h"
#include "nearest_kernels.h"

namespace tg {

namespace kernels {

namespace {
// The index rule in the arithmetic of S (float, or double for float64 tensors), as aten's
// forward computes it; floorf's float argument rounds a double source position once.
template <class S>
std::vector<int64_t> source_indices(int64_t in, int64_t out, double scale, bool exact) {
  const S step = scale > 0 ? static_cast<S>(1.0 / scale) : static_cast<S>(in) / static_cast<S>(out);
  std::vector<int64_t> src(out);
  for (int64_t dst = 0; dst < out; ++dst) {
    float at;
    if (exact) {  // round(step * (dst + 0.5) - 0.5), the position first clamped to >= 0
      const S pos = std::max<S>(step * (static_cast<S>(dst) + S(0.5)) - S(0.5), S(0));
      at = static_cast<float>(pos + S(0.5));
    } else {
      at = static_cast<float>(static_cast<S>(dst) * step);
    }
    const float f = std::floor(at);
    src[dst] = f >= static_cast<float>(in - 1) ? in - 1 : static_cast<int64_t>(f);  // no UB cast of a huge f
  }
  return src;
}
}  // namespace

std::vector<int64_t> nearest_source_indices(int64_t in, int64_t out, double scale, bool exact, bool in_double) {
  return in_double ? source_indices<double>(in, out, scale, exact) : source_indices<float>(in, out, scale, exact);
}

TG_ISA_DECLARE(template <class T> void upsample_nearest3d_forward(const T*, T*, const NearestParams&);
               template <class T> void upsample_nearest3d_backward(const T*, T*, const NearestParams&);)

template <class T>
void upsample_nearest3d_forward(const T* x, T* y, const NearestParams& p) {
  TG_ISA_DISPATCH(upsample_nearest3d_forward<T>)(x, y, p);
}

template <class T>
void upsample_nearest3d_backward(const T* grad_y, T* grad_x, const NearestParams& p) {
  TG_ISA_DISPATCH(upsample_nearest3d_backward<T>)(grad_y, grad_x, p);
}

template void upsample_nearest3d_forward<float>(const float*, float*, const NearestParams&);
template void upsample_nearest3d_forward<double>(const double*, double*, const NearestParams&);
template void upsample_nearest3d_backward<float>(const float*, float*, const NearestParams&);
template void upsample_nearest3d_backward<double>(const double*, double*, const NearestParams&);

}  // namespace kernels

namespace {

// One call of any of the twelve ops: K spatial dims, nearest or nearest-exact, the sizes and
// the user's scales (one per spatial dim). Also the tape's attrs.
struct NearestCall {
  int K;
  bool exact;
  IntList output_size;  // K values
  Shape input_size;     // K + 2 values
  std::vector<std::optional<double>> scales;

  std::string name(bool backward = false) const {
    return std::string(exact ? "upsample_nearest_exact" : "upsample_nearest") + std::to_string(K) + "d" +
           (backward ? "_backward" : "");
  }
  Shape output_shape() const {
    Shape s{input_size[0], input_size[1]};
    s.insert(s.end(), output_size.begin(), output_size.end());
    return s;
  }
};

const char* kDimsOf[3] = {"(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)"};

// Sizes and scales, in the op's name. N may be 0 (an empty batch, as in PyTorch); C and the
// spatial sizes must not.
void check_call(const NearestCall& c, const std::string& op, const char* input_name) {
  const Shape& in = c.input_size;
  TG_CHECK(std::all_of(in.begin() + 1, in.end(), [](int64_t v) { return v > 0; }) && in[0] >= 0, op,
           ": expected ", input_name, " ", kDimsOf[c.K - 1], " with non-zero C and spatial sizes, got ",
           format_shape(in));
  TG_CHECK(std::all_of(c.output_size.begin(), c.output_size.end(), [](int64_t v) { return v > 0; }), op,
           ": expected output_size of ", c.K, c.K == 1 ? " value" : " values", " > 0, got ",
           format_shape(c.output_size));
  for (const auto& s : c.scales)
    TG_CHECK(!s || (std::isfinite(*s) && *s > 0), op, ": expected every scale to be a positive finite number, got ",
             s ? *s : 0.0);
  checked_numel(in, op.c_str(), "input_size");  // a backward's input_size comes from the user
  checked_numel(c.output_shape(), op.c_str(), "the output shape (N, C, output_size)");
}

void check_floating(const std::string& op, const char* what, const Tensor& t) {
  TG_CHECK(t.defined(), op, ": expected a defined ", what);
  TG_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ", dtype_name(t.dtype()));
}

// Runs fn(params) with the source index tables of the call.
template <class Fn>
void with_params(const NearestCall& c, bool in_double, Fn&& fn) {
  kernels::NearestParams p;
  p.NC = c.input_size[0] * c.input_size[1];
  int64_t* in_dims[3] = {&p.D, &p.H, &p.W};
  int64_t* out_dims[3] = {&p.Do, &p.Ho, &p.Wo};
  std::vector<int64_t> tables[3] = {{0}, {0}, {0}};  // a missing dim: 1 -> 1, index 0
  for (int d = 0; d < c.K; ++d) {
    const int slot = 3 - c.K + d;
    *in_dims[slot] = c.input_size[2 + d];
    *out_dims[slot] = c.output_size[d];
    tables[slot] = kernels::nearest_source_indices(c.input_size[2 + d], c.output_size[d],
                                                   c.scales[d].value_or(0.0), c.exact, in_double);
  }
  p.src_d = tables[0].data(), p.src_h = tables[1].data(), p.src_w = tables[2].data();
  fn(p);
}

Tensor nearest_forward(const NearestCall& c, const Tensor& input);
Tensor nearest_backward(const NearestCall& c, const Tensor& grad_output);

std::vector<Tensor> backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  return {nearest_backward(ctx.attrs<NearestCall>(), ctx.create_graph() ? g[0] : g[0].detach())};
}

// The backward is linear in grad_output and its adjoint is the forward: that is its gradient.
std::vector<Tensor> backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  return {nearest_forward(ctx.attrs<NearestCall>(), gg[0])};
}

using Inputs = std::vector<Tensor>;

// A case of the forward (grad false) or of the backward (grad true).
SampleCase sample(std::string name, NearestCall c, bool backward) {
  const Shape in = backward ? c.output_shape() : c.input_size;
  return {name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
          [c, backward](const Inputs& x) {
            return Inputs{backward ? nearest_backward(c, x[0]) : nearest_forward(c, x[0])};
          }};
}

// Up and down, by size and by a given scale, per rank; the index rules differ between the two
// modes only in where they round, so each mode gets the same cases.
std::vector<SampleCase> samples_of(int K, bool exact, bool backward) {
  using S = std::optional<double>;
  const S none;
  std::vector<SampleCase> cases;
  auto add = [&](std::string name, Shape in, IntList out, std::vector<S> scales) {
    cases.push_back(sample(name, NearestCall{K, exact, out, in, scales}, backward));
  };
  if (K == 1) {
    add("[2,3,5] -> [8], scale 1.7 given", {2, 3, 5}, {8}, {1.7});
    add("[1,2,7] -> [3]", {1, 2, 7}, {3}, {none});
  } else if (K == 2) {
    add("[1,2,3,4] -> [6,7]", {1, 2, 3, 4}, {6, 7}, {none, none});
    add("[2,1,5,5] -> [3,8], scales 0.6 and 1.7 given", {2, 1, 5, 5}, {3, 8}, {0.6, 1.7});
    add("[1,1,4,3] -> [1,1]", {1, 1, 4, 3}, {1, 1}, {none, none});
  } else {
    add("[1,2,2,3,4] -> [3,5,2]", {1, 2, 2, 3, 4}, {3, 5, 2}, {none, none, none});
    add("[1,1,3,3,2] -> [5,1,4], scales 1.7, 0.5, 2 given", {1, 1, 3, 3, 2}, {5, 1, 4}, {1.7, 0.5, 2.0});
  }
  return cases;
}

template <int K, bool Exact>
std::vector<SampleCase> forward_samples() {
  return samples_of(K, Exact, false);
}
template <int K, bool Exact>
std::vector<SampleCase> backward_samples() {
  return samples_of(K, Exact, true);
}

}  // namespace

// [exact][K - 1]
const OpDef kNearestOps[2][3] = {
    {{"upsample_nearest1d", "upsample_nearest1d_backward", "input", backward_fn, forward_samples<1, false>, true},
     {"upsample_nearest2d", "upsample_nearest2d_backward", "input", backward_fn, forward_samples<2, false>, true},
     {"upsample_nearest3d", "upsample_nearest3d_backward", "input", backward_fn, forward_samples<3, false>, true}},
    {{"upsample_nearest_exact1d", "upsample_nearest_exact1d_backward", "input", backward_fn,
      forward_samples<1, true>, true},
     {"upsample_nearest_exact2d", "upsample_nearest_exact2d_backward", "input", backward_fn,
      forward_samples<2, true>, true},
     {"upsample_nearest_exact3d", "upsample_nearest_exact3d_backward", "input", backward_fn,
      forward_samples<3, true>, true}}};
const OpDef kNearestBackwardOps[2][3] = {
    {{"upsample_nearest1d_backward", "upsample_nearest1d_backward_backward", "grad_output", backward_backward_fn,
      backward_samples<1, false>, true},
     {"upsample_nearest2d_backward", "upsample_nearest2d_backward_backward", "grad_output", backward_backward_fn,
      backward_samples<2, false>, true},
     {"upsample_nearest3d_backward", "upsample_nearest3d_backward_backward", "grad_output", backward_backward_fn,
      backward_samples<3, false>, true}},
    {{"upsample_nearest_exact1d_backward", "upsample_nearest_exact1d_backward_backward", "grad_output",
      backward_backward_fn, backward_samples<1, true>, true},
     {"upsample_nearest_exact2d_backward", "upsample_nearest_exact2d_backward_backward", "grad_output",
      backward_backward_fn, backward_samples<2, true>, true},
     {"upsample_nearest_exact3d_backward", "upsample_nearest_exact3d_backward_backward", "grad_output",
      backward_backward_fn, backward_samples<3, true>, true}}};

namespace {

Tensor nearest_forward(const NearestCall& call, const Tensor& input) {
  const std::string op = call.name();
  check_floating(op, "input", input);
  TG_CHECK(input.dim() == call.K + 2, op, ": expected a ", call.K + 2, "-D input ", kDimsOf[call.K - 1], ", got ",
           format_shape(input.shape()));
  NearestCall c = call;
  c.input_size = input.shape();
  check_call(c, op, "input");
  Tensor x = detail::widen(input.detach().contiguous());  // accepts any strides; 16-bit widened exactly
  Tensor out = Tensor::empty(c.output_shape(), x.dtype());
  with_params(c, x.dtype() == DType::Float64, [&](const kernels::NearestParams& p) {
    dispatch_floating(x.dtype(), op.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::upsample_nearest3d_forward<T>(x.data<T>(), out.data<T>(), p);
    });
  });
  out = round_result(out, input.dtype());
  if (Recorder rec{kNearestOps[c.exact][c.K - 1], {input}}) {
    rec.set_attrs(c);
    rec.set_outputs({out});
  }
  return out;
}

Tensor nearest_backward(const NearestCall& c, const Tensor& grad_output) {
  const std::string op = c.name(true);
  check_call(c, op, "input_size");
  check_floating(op, "grad_output", grad_output);
  TG_CHECK(grad_output.shape() == c.output_shape(), op, ": expected grad_output of shape ",
           format_shape(c.output_shape()), " (N, C, output_size), got ", format_shape(grad_output.shape()));
  Tensor g = detail::widen(grad_output.detach().contiguous());
  Tensor grad_input = Tensor::empty(c.input_size, g.dtype());
  with_params(c, g.dtype() == DType::Float64, [&](const kernels::NearestParams& p) {
    dispatch_floating(g.dtype(), op.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::upsample_nearest3d_backward<T>(g.data<T>(), grad_input.data<T>(), p);
    });
  });
  grad_input = round_result(grad_input, grad_output.dtype());
  if (Recorder rec{kNearestBackwardOps[c.exact][c.K - 1], {grad_output}}) {  // under create_graph, say
    rec.set_attrs(c);
    rec.set_outputs({grad_input});
  }
  return grad_input;
}

template <size_t K>
Tensor forward(bool exact, const Tensor& input, std::array<int64_t, K> out,
               std::vector<std::optional<double>> scales) {
  return nearest_forward(NearestCall{int(K), exact, IntList(out.begin(), out.end()), {}, std::move(scales)}, input);
}

template <size_t K>
Tensor backward(bool exact, const Tensor& grad_output, std::array<int64_t, K> out, std::array<int64_t, K + 2> in,
                std::vector<std::optional<double>> scales) {
  return nearest_backward(
      NearestCall{int(K), exact, IntList(out.begin(), out.end()), Shape(in.begin(), in.end()), std::move(scales)},
      grad_output);
}

}  // namespace

Tensor upsample_nearest1d(const Tensor& input, std::array<int64_t, 1> output_size, std::optional<double> scales) {
  return forward<1>(false, input, output_size, {scales});
}
Tensor upsample_nearest2d(const Tensor& input, std::array<int64_t, 2> output_size, std::optional<double> scales_h,
                          std::optional<double> scales_w) {
  return forward<2>(false, input, output_size, {scales_h, scales_w});
}
Tensor upsample_nearest3d(const Tensor& input, std::array<int64_t, 3> output_size, std::optional<double> scales_d,
                          std::optional<double> scales_h, std::optional<double> scales_w) {
  return forward<3>(false, input, output_size, {scales_d, scales_h, scales_w});
}
Tensor upsample_nearest_exact1d(const Tensor& input, std::array<int64_t, 1> output_size,
                                std::optional<double> scales) {
  return forward<1>(true, input, output_size, {scales});
}
Tensor upsample_nearest_exact2d(const Tensor& input, std::array<int64_t, 2> output_size,
                                std::optional<double> scales_h, std::optional<double> scales_w) {
  return forward<2>(true, input, output_size, {scales_h, scales_w});
}
Tensor upsample_nearest_exact3d(const Tensor& input, std::array<int64_t, 3> output_size,
                                std::optional<double> scales_d, std::optional<double> scales_h,
                                std::optional<double> scales_w) {
  return forward<3>(true, input, output_size, {scales_d, scales_h, scales_w});
}

Tensor upsample_nearest1d_backward(const Tensor& grad_output, std::array<int64_t, 1> output_size,
                                   std::array<int64_t, 3> input_size, std::optional<double> scales) {
  return backward<1>(false, grad_output, output_size, input_size, {scales});
}
Tensor upsample_nearest2d_backward(const Tensor& grad_output, std::array<int64_t, 2> output_size,
                                   std::array<int64_t, 4> input_size, std::optional<double> scales_h,
                                   std::optional<double> scales_w) {
  return backward<2>(false, grad_output, output_size, input_size, {scales_h, scales_w});
}
Tensor upsample_nearest3d_backward(const Tensor& grad_output, std::array<int64_t, 3> output_size,
                                   std::array<int64_t, 5> input_size, std::optional<double> scales_d,
                                   std::optional<double> scales_h, std::optional<double> scales_w) {
  return backward<3>(false, grad_output, output_size, input_size, {scales_d, scales_h, scales_w});
}
Tensor upsample_nearest_exact1d_backward(const Tensor& grad_output, std::array<int64_t, 1> output_size,
                                         std::array<int64_t, 3> input_size, std::optional<double> scales) {
  return backward<1>(true, grad_output, output_size, input_size, {scales});
}
Tensor upsample_nearest_exact2d_backward(const Tensor& grad_output, std::array<int64_t, 2> output_size,
                                         std::array<int64_t, 4> input_size, std::optional<double> scales_h,
                                         std::optional<double> scales_w) {
  return backward<2>(true, grad_output, output_size, input_size, {scales_h, scales_w});
}
Tensor upsample_nearest_exact3d_backward(const Tensor& grad_output, std::array<int64_t, 3> output_size,
                                         std::array<int64_t, 5> input_size, std::optional<double> scales_d,
                                         std::optional<double> scales_h, std::optional<double> scales_w) {
  return backward<3>(true, grad_output, output_size, input_size, {scales_d, scales_h, scales_w});
}

void register_upsample_nearest_ops(Registry& r) {
  for (const auto& ops : kNearestOps)
    for (const OpDef& op : ops) r.add(op);
  for (const auto& ops : kNearestBackwardOps)
    for (const OpDef& op : ops) r.add(op);
}

}  // namespace tg
