// Convolutions: argument checking, dtype dispatch and the tape. The kernels (im2col + GEMM,
// direct and depthwise paths, forward beside backward) are in conv_kernels.cpp and the
// conv_kernels_*.cpp files its overview lists.
#include "conv.h"
#include "../../framework/autocast.h"

#include <algorithm>
#include <sstream>

#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "conv_kernels.h"
#include "../elementwise.h"
#include "../internal/reduced_float.h"
#include "../internal/samples.h"
#include "../internal/unbatched.h"

namespace tg {

namespace {

// One value for every spatial dim, or one per dim (PyTorch's expand_param_if_needed).
IntList expand_list(const char* op, const char* what, const IntList& v, int dims) {
  TG_CHECK(v.size() == 1 || v.size() == static_cast<size_t>(dims), op, ": expected ", what, " to have 1 or ", dims,
           " values for a ", dims, "-D convolution, got ", v.size(), " values ", format_shape(v));
  return v.size() == 1 ? IntList(dims, v[0]) : v;
}

// kernels::conv_output_size with every step checked, in the kernel's order of operations, so
// that the unchecked kernel formula that follows cannot overflow: a padding, stride or dilation
// of 2^62 is a tg::Error naming the argument, not a wrapped size.
void check_output_size(const char* op, int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                       int64_t pad_before, int64_t pad_after, bool transposed, int64_t output_padding) {
  const int64_t span = checked_mul(dilation, kernel - 1, op, "dilation * (kernel size - 1)");
  if (transposed) {
    int64_t o = checked_mul(in - 1, stride, op, "(input size - 1) * stride");
    o = checked_sub(o, pad_before, op, "the output size minus padding");
    o = checked_sub(o, pad_after, op, "the output size minus padding");
    o = checked_add(o, span, op, "the output size plus dilation * (kernel size - 1)");
    o = checked_add(o, output_padding, op, "the output size plus output_padding");
    checked_add(o, 1, op, "the output size");
  } else {
    checked_add(checked_add(in, pad_before, op, "input size + padding"), pad_after, op, "input size + padding");
    // the rest (- span - 1, floor division by a positive stride) cannot overflow
  }
}

const char* spatial_legend(int dims) {
  return dims == 1 ? "(N, C, L)" : dims == 2 ? "(N, C, H, W)" : "(N, C, D, H, W)";
}

// Checks everything about the geometry (ranks, channels, groups, parameter lists, output size)
// from the shapes alone, so that backward can rebuild it without the tensors. `dims` is the
// number of spatial dims the caller expects (conv2d: 2), or 0 to take it from the weight.
kernels::ConvParams check_geometry(const char* op, int dims, const Shape& input, const Shape& weight,
                                   const IntList& stride_arg, const IntList& padding_arg, const IntList& dilation_arg,
                                   bool transposed, const IntList& output_padding_arg, int64_t groups) {
  const int64_t wdim = static_cast<int64_t>(weight.size());
  if (dims == 0) {
    TG_CHECK(wdim >= 3 && wdim <= 5, op,
             ": expected weight to have 3, 4 or 5 dims (a 1-D, 2-D or 3-D convolution), got ", format_shape(weight));
    dims = static_cast<int>(wdim) - 2;
  }
  TG_CHECK(wdim == dims + 2, op, ": expected weight to have ", dims + 2, " dims for a ", dims, "-D convolution, got ",
           format_shape(weight));
  TG_CHECK(static_cast<int64_t>(input.size()) == dims + 2, op, ": expected input to have ", dims + 2, " dims ",
           spatial_legend(dims), " for a ", dims, "-D convolution, got ", format_shape(input));
  // As PyTorch ("Only zero batch or zero channel inputs are supported") and the spec: padding
  // would otherwise give an input with no positions a non-empty output.
  for (int d = 0; d < dims; ++d) {
    TG_CHECK(input[2 + d] > 0, op, ": expected input to be empty only in N or C, got input ", format_shape(input),
             " with spatial size 0");
  }
  TG_CHECK(groups > 0, op, ": expected groups to be positive, got ", groups);

  const IntList stride = expand_list(op, "stride", stride_arg, dims);
  const IntList dilation = expand_list(op, "dilation", dilation_arg, dims);
  TG_CHECK(padding_arg.size() == 1 || padding_arg.size() == static_cast<size_t>(dims) ||
               padding_arg.size() == static_cast<size_t>(2 * dims),
           op, ": expected padding to have 1, ", dims, " or ", 2 * dims, " (before, after per dim) values for a ", dims,
           "-D convolution, got ", padding_arg.size(), " values ", format_shape(padding_arg));
  IntList before(dims), after(dims);
  for (int d = 0; d < dims; ++d) {
    if (padding_arg.size() == static_cast<size_t>(2 * dims)) {
      before[d] = padding_arg[2 * d];
      after[d] = padding_arg[2 * d + 1];
    } else {
      before[d] = after[d] = padding_arg.size() == 1 ? padding_arg[0] : padding_arg[d];
    }
  }
  const IntList output_padding = expand_list(op, "output_padding", output_padding_arg, dims);
  for (int d = 0; d < dims; ++d) {
    TG_CHECK(stride[d] > 0, op, ": expected stride to be positive, got ", format_shape(stride));
    TG_CHECK(dilation[d] > 0, op, ": expected dilation to be positive, got ", format_shape(dilation));
    TG_CHECK(before[d] >= 0 && after[d] >= 0, op, ": expected padding to be non-negative, got ", format_shape(padding_arg));
    TG_CHECK(weight[2 + d] > 0, op, ": expected positive kernel sizes, got weight ", format_shape(weight));
    if (!transposed) {
      TG_CHECK(output_padding[d] == 0, op, ": output_padding is only for transposed convolutions, got ",
               format_shape(output_padding_arg));
    } else {
      TG_CHECK(output_padding[d] >= 0 && (output_padding[d] < stride[d] || output_padding[d] < dilation[d]), op,
               ": expected output_padding[", d, "] = ", output_padding[d], " to be non-negative and smaller than ",
               "stride (", stride[d], ") or dilation (", dilation[d], ")");
    }
  }

  const int64_t C_in = input[1];
  int64_t C_out;
  if (!transposed) {
    TG_CHECK(weight[0] % groups == 0, op, ": expected out_channels (weight.size(0) = ", weight[0],
             ") to be divisible by groups (", groups, ")");
    // Checked: groups = 2^62 with weight.size(1) = 4 would wrap to 0 and match an empty input.
    const int64_t expected_c_in = checked_mul(groups, weight[1], op, "groups * weight.size(1)");
    TG_CHECK(C_in == expected_c_in, op, ": expected input to have groups * weight.size(1) = ", groups, " * ",
             weight[1], " = ", expected_c_in, " channels, got ", C_in, " (input ", format_shape(input),
             ", weight ", format_shape(weight), ")");
    C_out = weight[0];
  } else {
    TG_CHECK(C_in == weight[0], op, ": expected input to have weight.size(0) = ", weight[0],
             " channels (weight (in_channels, out_channels / groups, k...) when transposed), got ", C_in, " (input ",
             format_shape(input), ", weight ", format_shape(weight), ")");
    TG_CHECK(C_in % groups == 0, op, ": expected in_channels (", C_in, ") to be divisible by groups (", groups, ")");
    C_out = checked_mul(weight[1], groups, op, "out_channels (weight.size(1) * groups)");
  }

  IntList in(input.begin() + 2, input.end()), kernel(weight.begin() + 2, weight.end());
  for (int d = 0; d < dims; ++d)
    check_output_size(op, in[d], kernel[d], stride[d], dilation[d], before[d], after[d], transposed,
                      output_padding[d]);
  kernels::ConvParams p = kernels::make_conv_params(dims, input[0], C_in, C_out, groups, in, kernel, stride, dilation,
                                                    before, after, transposed, output_padding);
  IntList out(p.out.begin() + (3 - dims), p.out.end());
  for (int64_t o : out) {
    TG_CHECK(o > 0, op, ": output size is too small: input ", format_shape(input), " with weight ",
             format_shape(weight), ", stride ", format_shape(stride), ", padding ", format_shape(padding_arg), ", dilation ",
             format_shape(dilation), " gives spatial size ", format_shape(out));
  }
  Shape out_shape{p.N, p.C_out};
  out_shape.insert(out_shape.end(), out.begin(), out.end());
  checked_numel(out_shape, op, "the output shape");
  // The kernels copy each image channel into a zero-padded box covering every window, split
  // into stride phases: memory and loops grow with the padded extent the windows span, not
  // with the input and output. A window span that is mostly padding (a padding of 2^40 with a
  // stride of 2^40: three outputs) is refused rather than left to exhaust memory (inside a
  // parallel region, where a std::bad_alloc would terminate) or hang; spans within 16x the
  // data or under 2^26 positions per channel are always accepted.
  const auto& img = transposed ? p.out : p.in;
  const auto& col = transposed ? p.in : p.out;
  const char* what = "the padded extent covered by the windows";
  int64_t covered = 1, data = 1, cols = 1;
  for (int d = 0; d < 3; ++d) {
    const int64_t s = col[d] == 1 ? 1 : p.stride[d], dil = p.kernel[d] == 1 ? 1 : p.dilation[d];
    const int64_t e = checked_add(checked_add(checked_mul(col[d] - 1, s, op, what),
                                              checked_mul(p.kernel[d] - 1, dil, op, what), op, what),
                                  1, op, what);
    covered = checked_mul(covered, e, op, what);
    data = checked_mul(data, img[d], op, "the image positions");
    cols = checked_mul(cols, col[d], op, "the window positions");
  }
  const int64_t big = std::max(data, cols);
  const int64_t limit = big > (INT64_MAX - 16) / 16 ? INT64_MAX : std::max<int64_t>(int64_t(1) << 26, 16 * big + 16);
  TG_CHECK(covered <= limit, op, ": stride ", format_shape(stride), ", padding ", format_shape(padding_arg),
           " and dilation ", format_shape(dilation), " make the windows span ", covered,
           " padded positions per channel for an input of ", format_shape(input),
           " (more than 16x the data and 2^26); this is not supported");
  return p;
}

Shape output_shape(const kernels::ConvParams& p) {
  Shape s{p.N, p.C_out};
  for (int d = 3 - p.dims; d < 3; ++d) s.push_back(p.out[d]);
  return s;
}

void check_same_dtype(const char* op, const char* what, const Tensor& t, DType dt) {
  TG_CHECK(t.dtype() == dt, op, ": expected ", what, " to have dtype ", dtype_name(dt), " like input, got ",
           dtype_name(t.dtype()));
}

// Nothing to multiply: no batch, no input channels or no output channels. The kernels are
// only called on non-empty problems.
bool empty_problem(const kernels::ConvParams& p) { return p.N == 0 || p.C_in == 0 || p.C_out == 0; }

// grad_bias[c] = sum over n and positions of grad_output[n, c, ...], in double (the kernels'
// own bias reduction, for the empty problems they are not called on).
template <class T>
void sum_bias(const T* g, T* db, int64_t N, int64_t C, int64_t L) {
  for (int64_t c = 0; c < C; ++c) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < L; ++i) acc += double(g[(n * C + c) * L + i]);
    db[c] = T(acc);
  }
}


// ---------------------------------------------------------------------------------------------
// Reduced products (conv_kernels_reduced.cpp): 16-bit operands, float32 sums and results. A
// bf16/fp16 convolution calls them on its own tensors and rounds each result once; a float32
// one under a reduced math mode (framework/math_mode.h) on its operands rounded to bf16 or fp16
// (BFloat16, Float16), or split into bf16 hi + lo parts (BFloat16x3: hi*hi + hi*lo + lo*hi,
// three reduced convolutions), and keeps the float32 results. Only non-empty problems come here.

// Operand tensors of a reduced convolution: t itself when 16-bit, else t rounded to dtype s.
Tensor reduced_operand(const Tensor& t, DType s) {
  if (!t.defined() || t.dtype() == s) return t.defined() ? t.contiguous() : t;
  Tensor f = t.contiguous(), out = Tensor::empty(f.shape(), s);
  if (s == DType::BFloat16) {
    round_operand(f.data<float>(), f.numel(), out.data<BFloat16>());
  } else {
    round_operand(f.data<float>(), f.numel(), out.data<Float16>());
  }
  return out;
}

struct SplitOperand {
  Tensor hi, lo;
};

// A float32 operand as two bf16 tensors hi + lo (split_bfloat16); undefined stays undefined.
SplitOperand split_operand(const Tensor& t) {
  if (!t.defined()) return {};
  Tensor f = t.contiguous();
  SplitOperand r{Tensor::empty(f.shape(), DType::BFloat16), Tensor::empty(f.shape(), DType::BFloat16)};
  split_bfloat16(f.data<float>(), f.numel(), r.hi.data<BFloat16>(), r.lo.data<BFloat16>());
  return r;
}

// a += b, both float32 of one shape (undefined a takes b).
void add_into(Tensor& a, const Tensor& b) {
  if (!b.defined()) return;
  if (!a.defined()) {
    a = b;
    return;
  }
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) pa[i] += pb[i];
}

template <class Fn>
void dispatch_reduced(DType s, Fn&& fn) {
  if (s == DType::BFloat16) {
    fn(TypeTag<BFloat16>{});
  } else {
    fn(TypeTag<Float16>{});
  }
}

// float32 output of the convolution of 16-bit x and w (same dtype), float32 bias or undefined.
Tensor reduced_forward(const Tensor& x, const Tensor& w, const Tensor& bias32, const kernels::ConvParams& p) {
  Tensor out = Tensor::empty(output_shape(p), DType::Float32);
  dispatch_reduced(x.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    kernels::convolution_forward_reduced<S>(x.data<S>(), w.data<S>(), bias32.defined() ? bias32.data<float>() : nullptr,
                                            out.data<float>(), p);
  });
  return out;
}

// float32 gradients (as mask asks, grad_bias excepted) of the convolution of 16-bit tensors;
// x / w undefined when not needed.
ConvolutionGrads reduced_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Shape& input_shape,
                                  const Shape& weight_shape, const kernels::ConvParams& p, std::array<bool, 3> mask) {
  ConvolutionGrads r;
  if (mask[0]) r.grad_input = Tensor::empty(input_shape, DType::Float32);
  if (mask[1]) r.grad_weight = Tensor::empty(weight_shape, DType::Float32);
  if (mask[2]) r.grad_bias = Tensor::empty({p.C_out}, DType::Float32);
  dispatch_reduced(g.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    auto in = [](const Tensor& t) { return t.defined() ? t.data<S>() : nullptr; };
    auto out = [](Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    kernels::convolution_backward_reduced<S>(in(g), in(x), in(w), out(r.grad_input), out(r.grad_weight),
                                             out(r.grad_bias), p);
  });
  return r;
}

// The float32 forward under a reduced mode (math != Float32).
Tensor float32_math_forward(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvParams& p,
                            Float32Math math) {
  if (math != Float32Math::BFloat16x3) {
    const DType s = math == Float32Math::Float16 ? DType::Float16 : DType::BFloat16;
    return reduced_forward(reduced_operand(x, s), reduced_operand(w, s), b, p);
  }
  const SplitOperand xs = split_operand(x), ws = split_operand(w);
  Tensor small = reduced_forward(xs.hi, ws.lo, Tensor(), p);  // the two small terms first
  add_into(small, reduced_forward(xs.lo, ws.hi, Tensor(), p));
  Tensor out = reduced_forward(xs.hi, ws.hi, b, p);
  add_into(out, small);
  return out;
}

// The float32 backward under a reduced mode (math != Float32). grad_bias is the float32
// kernel's (a sum of grad_output, no product to reduce).
ConvolutionGrads float32_math_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Shape& input_shape,
                                       const Shape& weight_shape, const kernels::ConvParams& p,
                                       std::array<bool, 3> mask, Float32Math math) {
  const std::array<bool, 3> products{mask[0], mask[1], false};
  ConvolutionGrads r;
  if (mask[0] || mask[1]) {
    if (math != Float32Math::BFloat16x3) {
      const DType s = math == Float32Math::Float16 ? DType::Float16 : DType::BFloat16;
      r = reduced_backward(reduced_operand(g, s), reduced_operand(x, s), reduced_operand(w, s), input_shape,
                           weight_shape, p, products);
    } else {
      // grad_input = B_x(g, w), grad_weight = B_w(g, x): with g, x, w each hi + lo, the terms
      // (g_hi, w_lo | x_lo), (g_lo, w_hi | x_hi) and then (g_hi, w_hi | x_hi)
      const SplitOperand gs = split_operand(g), xs = split_operand(x), ws = split_operand(w);
      ConvolutionGrads small = reduced_backward(gs.hi, xs.lo, ws.lo, input_shape, weight_shape, p, products);
      const ConvolutionGrads t = reduced_backward(gs.lo, xs.hi, ws.hi, input_shape, weight_shape, p, products);
      add_into(small.grad_input, t.grad_input);
      add_into(small.grad_weight, t.grad_weight);
      r = reduced_backward(gs.hi, xs.hi, ws.hi, input_shape, weight_shape, p, products);
      add_into(r.grad_input, small.grad_input);
      add_into(r.grad_weight, small.grad_weight);
    }
  }
  if (mask[2]) {
    r.grad_bias = Tensor::empty({p.C_out}, DType::Float32);
    Tensor gc = g.contiguous();
    kernels::convolution_backward<float>(gc.data<float>(), nullptr, nullptr, nullptr, nullptr,
                                         r.grad_bias.data<float>(), p);
  }
  return r;
}

// The backward once the geometry is known. input / weight may be undefined when the mask does
// not need them (grad_weight needs input, grad_input needs weight); their shapes come from p.
// math: the float32 math mode (convolution_backward's cubeMathType, else the thread's); 16-bit
// and float64 tensors ignore it.
ConvolutionGrads backward_with_params(const char* op, const Tensor& grad_output, const Tensor& input,
                                      const Tensor& weight, const Shape& input_shape, const Shape& weight_shape,
                                      const kernels::ConvParams& p, std::array<bool, 3> mask,
                                      Float32Math math = float32_math()) {
  const DType dt = grad_output.dtype();
  const bool any = mask[0] || mask[1] || mask[2];
  if (is_reduced_floating(dt)) {
    // 16 bits, as PyTorch on the CPU: products and sums in float32 (the reduced kernels, on the
    // 16-bit tensors themselves), each gradient rounded once to the dtype of what it is the
    // gradient of (all three share it). Empty problems: the float32 path on float32 copies.
    ConvolutionGrads r =
        !any ? ConvolutionGrads{}
        : empty_problem(p)
            ? backward_with_params(op, detail::widen(grad_output), detail::widen(input), detail::widen(weight),
                                   input_shape, weight_shape, p, mask)
            : reduced_backward(grad_output.contiguous(), mask[1] ? input.contiguous() : Tensor(),
                               mask[0] ? weight.contiguous() : Tensor(), input_shape, weight_shape, p, mask);
    for (Tensor* t : {&r.grad_input, &r.grad_weight, &r.grad_bias})
      *t = round_result(*t, dt);
    return r;
  }
  if (dt == DType::Float32 && math != Float32Math::Float32 && any && !empty_problem(p)) {
    return float32_math_backward(grad_output, mask[1] ? input : Tensor(), mask[0] ? weight : Tensor(), input_shape,
                                 weight_shape, p, mask, math);
  }
  ConvolutionGrads r;
  if (mask[0]) r.grad_input = Tensor::empty(input_shape, dt);
  if (mask[1]) r.grad_weight = Tensor::empty(weight_shape, dt);
  if (mask[2]) r.grad_bias = Tensor::empty({p.C_out}, dt);
  if (!mask[0] && !mask[1] && !mask[2]) return r;
  Tensor g = grad_output.contiguous();
  const int64_t L = p.out[0] * p.out[1] * p.out[2];
  if (empty_problem(p)) {
    if (mask[0]) r.grad_input.zero_();
    if (mask[1]) r.grad_weight.zero_();
    if (mask[2]) {
      dispatch_floating(dt, op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        sum_bias<T>(g.data<T>(), r.grad_bias.data<T>(), p.N, p.C_out, L);
      });
    }
    return r;
  }
  Tensor x = mask[1] ? input.contiguous() : Tensor();
  Tensor w = mask[0] ? weight.contiguous() : Tensor();
  dispatch_floating(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    kernels::convolution_backward<T>(g.data<T>(), ptr(x), ptr(w), ptr(r.grad_input), ptr(r.grad_weight),
                                     ptr(r.grad_bias), p);
  });
  return r;
}

// What backward needs besides the saved tensors.
struct ConvAttrs {
  kernels::ConvParams params;
  Shape input_shape, weight_shape;
};

ConvolutionGrads recorded_backward(const Tensor& g, const Tensor& input, const Tensor& weight, const ConvAttrs& a,
                                   std::array<bool, 3> mask);
Tensor forward_with_params(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const kernels::ConvParams& p);

// The saved slots of convolution (kInput, kWeight) and of its recorded backward
// convolution_backward (kGradOutput, kInput, kWeight); one enum, as the two share names.
enum ConvSaved { kInput, kWeight, kGradOutput };

std::vector<Tensor> convolution_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<ConvAttrs>();
  // Only what was saved: the input when the weight wants a gradient, the weight for the input.
  const Tensor input = ctx.needs_grad(1) ? ctx.saved(kInput) : Tensor();
  const Tensor weight = ctx.needs_grad(0) ? ctx.saved(kWeight) : Tensor();
  const std::array<bool, 3> mask{ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2)};
  ConvolutionGrads r = ctx.create_graph()
                           ? recorded_backward(g[0], input, weight, a, mask)
                           : backward_with_params("convolution_backward", g[0].detach(), input, weight, a.input_shape,
                                                  a.weight_shape, a.params, mask);
  return {r.grad_input, r.grad_weight, r.grad_bias};
}

// Small cases away from nothing in particular: a convolution is linear in each input, so it has
// no kinks; the shapes keep the float64 finite differences cheap.
std::vector<SampleCase> convolution_samples() {
  struct Spec {
    std::string name;
    Shape input, weight;
    bool bias;
    IntList stride, padding, dilation;
    bool transposed;
    IntList output_padding;
    int64_t groups;
  };
  const std::vector<Spec> specs = {
      {"conv1d stride 2, padding 1, dilation 2, bias", {2, 3, 9}, {4, 3, 3}, true, {2}, {1}, {2}, false, {0}, 1},
      {"conv2d groups 2, asymmetric padding (1, 0, 2, 1), bias",
       {1, 4, 5, 4},
       {4, 2, 3, 2},
       true,
       {1},
       {1, 0, 2, 1},
       {1},
       false,
       {0},
       2},
      {"conv2d depthwise 3x3 stride 2, no bias", {2, 3, 5, 5}, {3, 1, 3, 3}, false, {2}, {1}, {1}, false, {0}, 3},
      {"conv3d 2x2x2 padding 1, bias", {1, 2, 3, 3, 3}, {2, 2, 2, 2, 2}, true, {1}, {1}, {1}, false, {0}, 1},
      {"conv_transpose2d stride 2, output_padding 1, groups 2, bias",
       {1, 4, 3, 3},
       {4, 1, 3, 3},
       true,
       {2},
       {1},
       {1},
       true,
       {1},
       2},
      {"conv_transpose1d stride 2, dilation 2, padding 2, no bias",
       {2, 2, 4},
       {2, 3, 3},
       false,
       {2},
       {2},
       {2},
       true,
       {1},
       1},
  };
  std::vector<SampleCase> cases;
  for (const Spec& s : specs) {
    const int64_t c_out = s.transposed ? s.weight[1] * s.groups : s.weight[0];
    cases.push_back({s.name,
                     [s, c_out](DType dt) {
                       return std::vector<Tensor>{sample_tensor(s.input, dt), sample_tensor(s.weight, dt),
                                                  s.bias ? sample_tensor({c_out}, dt) : Tensor()};
                     },
                     [s](const std::vector<Tensor>& x) {
                       return std::vector<Tensor>{convolution(x[0], x[1], x[2], s.stride, s.padding, s.dilation,
                                                              s.transposed, s.output_padding, s.groups)};
                     }});
  }
  return cases;
}

}  // namespace

const OpDef kConvolutionOp{"convolution", "convolution_backward", "input, weight, bias", convolution_backward_fn,
                           convolution_samples, true};

namespace {

struct ConvBackwardAttrs {
  ConvAttrs conv;
  std::array<bool, 3> mask;  // which of grad_input, grad_weight, grad_bias are outputs, in that order
};

// Double backward. With F(x, w) the convolution without bias, linear in each argument, the
// backward gives gi = B_x(g, w) (the adjoint of F(., w)) and gw = B_w(g, x) (the adjoint of
// F(x, .)), gb = the sum of g over batch and positions. For upstream gradients ggi, ggw, ggb:
//   d/dg = F(ggi, w) + F(x, ggw) + ggb broadcast     (<ggi, B_x(g, w)> = <F(ggi, w), g>, ...)
//   d/dx = B_x(g, ggw)                              (from <F(x, ggw), g>)
//   d/dw = B_w(g, ggi)                              (from <F(ggi, w), g>)
// all of them recorded convolutions and convolution backwards again.
std::vector<Tensor> convolution_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<ConvBackwardAttrs>();
  const kernels::ConvParams& p = a.conv.params;
  Tensor ggi, ggw, ggb;
  size_t k = 0;
  if (a.mask[0]) ggi = gg[k++];
  if (a.mask[1]) ggw = gg[k++];
  if (a.mask[2]) ggb = gg[k++];
  const Tensor g = ctx.saved(kGradOutput);
  const Tensor x = a.mask[1] ? ctx.saved(kInput) : Tensor();  // saved only then
  const Tensor w = a.mask[0] ? ctx.saved(kWeight) : Tensor();
  Tensor dg, dx, dw;
  if (ctx.needs_grad(0)) {
    auto accumulate = [&dg](const Tensor& t) { dg = dg.defined() ? add(dg, t) : t; };
    if (ggi.defined()) accumulate(forward_with_params("convolution_backward_backward", ggi, w, Tensor(), p));
    if (ggw.defined()) accumulate(forward_with_params("convolution_backward_backward", x, ggw, Tensor(), p));
    if (ggb.defined()) {
      Shape bshape(g.dim(), 1);
      bshape[1] = p.C_out;
      accumulate(ggb.reshape(bshape).expand(g.shape()).contiguous());
    }
    if (!dg.defined()) dg = zeros_like(g);
  }
  if (ctx.needs_grad(1))
    dx = ggw.defined() ? recorded_backward(g, Tensor(), ggw, a.conv, {true, false, false}).grad_input
                       : zeros(a.conv.input_shape, g.dtype());
  if (ctx.needs_grad(2))
    dw = ggi.defined() ? recorded_backward(g, ggi, Tensor(), a.conv, {false, true, false}).grad_weight
                       : zeros(a.conv.weight_shape, g.dtype());
  return {dg, dx, dw};
}

const OpDef kConvolutionBackwardOp{"convolution_backward", "convolution_backward_backward",
                                   "grad_output, input, weight", convolution_backward_backward_fn, nullptr, true};

// The backward as a recorded entry (inputs grad_output, input, weight), so that under
// create_graph its gradients can be differentiated again.
ConvolutionGrads recorded_backward(const Tensor& g, const Tensor& input, const Tensor& weight, const ConvAttrs& a,
                                   std::array<bool, 3> mask) {
  ConvolutionGrads r = backward_with_params("convolution_backward", g.detach(), input.defined() ? input.detach() : input,
                                            weight.defined() ? weight.detach() : weight, a.input_shape,
                                            a.weight_shape, a.params, mask);
  if (Recorder rec{kConvolutionBackwardOp, {g, input, weight}}) {
    rec.set_attrs(ConvBackwardAttrs{a, mask});
    rec.save(kGradOutput, g);
    if (input.defined()) rec.save(kInput, input);
    if (weight.defined()) rec.save(kWeight, weight);
    std::vector<Tensor> outputs;
    for (const Tensor* t : {&r.grad_input, &r.grad_weight, &r.grad_bias})
      if (t->defined()) outputs.push_back(*t);
    rec.set_outputs(outputs);
  }
  return r;
}

}  // namespace

namespace {

Tensor convolution_impl(const char* op, int dims, const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const IntList& stride, const IntList& padding, const IntList& dilation, bool transposed,
                        const IntList& output_padding, int64_t groups) {
  if (auto c = autocast::lower(input, weight, bias))  // framework/autocast.h
    return convolution_impl(op, dims, c[0], c[1], c[2], stride, padding, dilation, transposed, output_padding, groups);
  TG_CHECK(input.defined(), op, ": expected a defined input");
  TG_CHECK(weight.defined(), op, ": expected a defined weight");
  const kernels::ConvParams p = check_geometry(op, dims, input.shape(), weight.shape(), stride, padding, dilation,
                                               transposed, output_padding, groups);
  const DType dt = input.dtype();
  TG_CHECK(is_floating(dt), op, ": expected a floating input (float32, float64, bfloat16 or float16), got ",
           dtype_name(dt));
  check_same_dtype(op, "weight", weight, dt);
  if (bias.defined()) {
    TG_CHECK(bias.shape() == (Shape{p.C_out}), op, ": expected bias to have shape [", p.C_out, "] (out_channels), got ",
             format_shape(bias.shape()));
    check_same_dtype(op, "bias", bias, dt);
  }

  return forward_with_params(op, input, weight, bias, p);
}

// The forward's output, not recorded. A 16-bit convolution runs the reduced kernels on its
// tensors (products and sums in float32, as PyTorch's CPU kernels) and rounds the output once;
// a float32 one follows the thread's math mode (framework/math_mode.h).
Tensor forward_values(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const kernels::ConvParams& p) {
  const DType dt = input.dtype();
  if (is_reduced_floating(dt) && empty_problem(p))
    return detail::convert(forward_values(op, detail::widen(input), detail::widen(weight), detail::widen(bias), p), dt);
  if (is_reduced_floating(dt))
    return detail::convert(reduced_forward(input.detach().contiguous(), weight.detach().contiguous(),
                                           detail::widen(bias.defined() ? bias.detach() : bias), p),
                           dt);
  if (dt == DType::Float32 && float32_math() != Float32Math::Float32 && !empty_problem(p)) {
    return float32_math_forward(input.detach().contiguous(), weight.detach().contiguous(),
                                bias.defined() ? bias.detach().contiguous() : Tensor(), p, float32_math());
  }
  Tensor x = input.detach().contiguous(), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = Tensor::empty(output_shape(p), dt);
  if (empty_problem(p)) {
    if (b.defined() && out.numel() > 0) {
      Shape bshape(out.dim(), 1);
      bshape[1] = p.C_out;
      out.copy_(b.view(bshape));
    } else {
      out.zero_();
    }
  } else {
    dispatch_floating(dt, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::convolution_forward<T>(x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, out.data<T>(), p);
    });
  }
  return out;
}

// The forward once the arguments are checked: computes and records the entry.
Tensor forward_with_params(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const kernels::ConvParams& p) {
  Tensor out = forward_values(op, input, weight, bias, p);
  if (Recorder rec{kConvolutionOp, {input, weight, bias}}) {
    // grad_input needs only the weight, grad_weight only the input, grad_bias neither.
    if (rec.needs_grad(1)) rec.save(kInput, input);
    if (rec.needs_grad(0)) rec.save(kWeight, weight);
    rec.set_attrs(ConvAttrs{p, input.shape(), weight.shape()});
    rec.set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, bool transposed, const IntList& output_padding,
                   int64_t groups) {
  return convolution_impl("convolution", 0, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                          groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, int64_t groups) {
  return with_batch_dim("conv1d", input, 3, [&](const Tensor& x) {
    return convolution_impl("conv1d", 1, x, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, int64_t groups) {
  return with_batch_dim("conv2d", input, 4, [&](const Tensor& x) {
    return convolution_impl("conv2d", 2, x, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, int64_t groups) {
  return with_batch_dim("conv3d", input, 5, [&](const Tensor& x) {
    return convolution_impl("conv3d", 3, x, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                        const IntList& padding, const IntList& output_padding, int64_t groups,
                        const IntList& dilation) {
  return with_batch_dim("conv_transpose1d", input, 3, [&](const Tensor& x) {
    return convolution_impl("conv_transpose1d", 1, x, weight, bias, stride, padding, dilation, true, output_padding,
                            groups);
  });
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                        const IntList& padding, const IntList& output_padding, int64_t groups,
                        const IntList& dilation) {
  return with_batch_dim("conv_transpose2d", input, 4, [&](const Tensor& x) {
    return convolution_impl("conv_transpose2d", 2, x, weight, bias, stride, padding, dilation, true, output_padding,
                            groups);
  });
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                        const IntList& padding, const IntList& output_padding, int64_t groups,
                        const IntList& dilation) {
  return with_batch_dim("conv_transpose3d", input, 5, [&](const Tensor& x) {
    return convolution_impl("conv_transpose3d", 3, x, weight, bias, stride, padding, dilation, true, output_padding,
                            groups);
  });
}

ConvolutionGrads convolution_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                      const IntList& bias_sizes, const IntList& stride, const IntList& padding,
                                      const IntList& dilation, bool transposed, const IntList& output_padding,
                                      int64_t groups, std::array<bool, 3> output_mask,
                                      std::optional<CubeMathType> cube_math_type) {
  const char* op = "convolution_backward";
  if (cube_math_type) {
    const int v = int(*cube_math_type);
    TG_CHECK(v >= 0 && v <= 3, op, ": expected cubeMathType to be 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), ",
             "2 (USE_FP16) or 3 (USE_HF32), got ", v);
  }
  const Float32Math math = float32_math_or(cube_math_type);
  TG_CHECK(grad_output.defined() && input.defined() && weight.defined(), op,
           ": expected defined grad_output, input and weight");
  const kernels::ConvParams p = check_geometry(op, 0, input.shape(), weight.shape(), stride, padding, dilation,
                                               transposed, output_padding, groups);
  const DType dt = input.dtype();
  TG_CHECK(is_floating(dt), op, ": expected a floating input (float32, float64, bfloat16 or float16), got ",
           dtype_name(dt));
  check_same_dtype(op, "weight", weight, dt);
  check_same_dtype(op, "grad_output", grad_output, dt);
  const Shape out_shape = output_shape(p);
  TG_CHECK(grad_output.shape() == out_shape, op, ": expected grad_output to have the output's shape ",
           format_shape(out_shape), ", got ", format_shape(grad_output.shape()));
  TG_CHECK(bias_sizes.empty() || bias_sizes == IntList{p.C_out}, op, ": expected bias_sizes to be [", p.C_out,
           "] (out_channels) or empty, got ", format_shape(bias_sizes));
  return backward_with_params(op, grad_output.detach(), input.detach(), weight.detach(), input.shape(), weight.shape(),
                              p, output_mask, math);
}

void register_conv_ops(Registry& r) {
  r.add(kConvolutionOp);
  r.add(kConvolutionBackwardOp);
}

}  // namespace tg
