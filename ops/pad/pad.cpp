// tg::pad: the argument checks, the constant mode (a fill and a strided copy, any rank), dtype
// dispatch of the reading modes' kernels (pad_kernels.h) and the tape. Backward needs only the
// shapes, so forward saves no tensor.
#include "pad.h"

#include <algorithm>

#include "../../framework/autocast.h"
#include "../../framework/checked_math.h"
#include "../../framework/tape.h"
#include "../internal/samples.h"

namespace tg {

namespace {

struct PadAttrs {
  Shape input_size;
  IntList pad;
  PadMode mode;
};

// The sizes of `in` after padding, once pad is checked against the mode's rules (pad.h).
Shape checked_output_shape(const char* op, const Shape& in, DType dt, const IntList& pad, PadMode mode, double value) {
  const int64_t rank = static_cast<int64_t>(in.size()), pairs = static_cast<int64_t>(pad.size()) / 2;
  const char* name = pad_mode_name(mode);
  TG_CHECK(pad.size() % 2 == 0, op, ": expected pad to have an even number of values ((before, after) pairs from ",
           "the last dim backwards), got ", pad.size(), " values ", format_shape(pad));
  TG_CHECK(pairs <= rank, op, ": expected pad to have at most 2 * input.dim() = ", 2 * rank, " values, got ",
           pad.size(), " values ", format_shape(pad), " for input ", format_shape(in));
  if (mode == PadMode::Constant) {
    TG_CHECK(dt != DType::Int32, op, ": expected a float32, float64, bfloat16, float16 or int64 input, got ",
             dtype_name(dt));
    TG_CHECK(fits_floating_range(dt, value), op, ": value ", value, " cannot be converted to ", dtype_name(dt),
             " without overflow");
  } else {
    TG_CHECK(value == 0.0, op, ": mode \"", name, "\" takes no value, got value ", value);
    TG_CHECK(is_floating(dt), op, ": mode \"", name, "\" expects a floating input (float32, float64, bfloat16 or ",
             "float16), got ", dtype_name(dt));
    const bool batched_only = mode == PadMode::Circular;  // PyTorch 1.13's _pad_circular
    TG_CHECK(pairs >= 1 && pairs <= 3 && rank <= pairs + 2 && rank >= pairs + (batched_only ? 2 : 1), op,
             ": mode \"", name, "\" pads the last 1, 2 or 3 dims of a ", batched_only ? "batched" : "batched or unbatched",
             " input, so ", batched_only ? "2, 4 or 6 pad values need a 3-D, 4-D or 5-D input (N, C, ...)"
                                        : "2, 4 or 6 pad values need a 2-3, 3-4 or 4-5 dim input",
             ", got ", pad.size(), " pad values ", format_shape(pad), " for input ", format_shape(in));
  }
  Shape out = in;
  for (int64_t k = 0; k < pairs; ++k) {
    const int64_t d = rank - 1 - k, n = in[d], before = pad[2 * k], after = pad[2 * k + 1];
    const int64_t size = checked_add(checked_add(n, before, op, "the padded size"), after, op, "the padded size");
    out[d] = size;
    TG_CHECK(size >= 0, op, ": expected pad (", before, ", ", after, ") to leave a size >= 0 in dim ", d,
             " of input ", format_shape(in), ", got ", size);
    if (mode == PadMode::Reflect || mode == PadMode::Replicate) {
      TG_CHECK(n > 0, op, ": mode \"", name, "\" expects a non-empty padded dim ", d, ", got pad (", before, ", ",
               after, ") for input ", format_shape(in));
    }
    if (mode == PadMode::Reflect) {
      TG_CHECK(before < n && after < n, op, ": mode \"reflect\" expects each pad to be smaller than its dim, got pad (",
               before, ", ", after, ") for dim ", d, " of size ", n, " of input ", format_shape(in));
    }
    if (mode == PadMode::Circular && size == 0) {  // nothing wraps; PyTorch's own check
      TG_CHECK(before <= n && after <= n, op, ": mode \"circular\" expects each pad to be at most the size of its ",
               "dim (padding wraps around once); got pad (", before, ", ", after, ") for dim ", d, " of size ", n,
               " of input ", format_shape(in));
    }
    if (mode == PadMode::Circular && size > 0) {
      // The pads wrap around the dim once it is cropped by the negative pads.
      const int64_t kept = n + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0);
      TG_CHECK(before <= kept && after <= kept, op, ": mode \"circular\" expects each pad to be at most the size ",
               "of its dim (after cropping by the negative pads, ", kept, "): padding wraps around once; got pad (",
               before, ", ", after, ") for dim ", d, " of size ", n, " of input ", format_shape(in));
    }
  }
  if (mode == PadMode::Reflect || mode == PadMode::Replicate) {
    // Negative pads may empty some padded dims (the output is then empty), not all of them: as
    // PyTorch's "input (H: 4, W: 4) is too small. Calculated output H: 0 W: 0"
    bool all_empty = true;
    for (int64_t k = 0; k < pairs; ++k) all_empty = all_empty && out[rank - 1 - k] == 0;
    TG_CHECK(!all_empty, op, ": mode \"", name, "\" expects the padded dims not to become all empty, got pad ",
             format_shape(pad), " for input ", format_shape(in), " (output ", format_shape(out), ")");
  }
  checked_numel(out, op, "the padded shape");
  return out;
}

// The reading modes' view of the input: planes x (D, H, W), the padded dims last.
kernels::PadGeometry geometry(const Shape& in, const IntList& pad) {
  const int64_t rank = static_cast<int64_t>(in.size()), pairs = static_cast<int64_t>(pad.size()) / 2;
  kernels::PadGeometry g;
  g.planes = 1;
  for (int64_t d = 0; d < rank - pairs; ++d) g.planes *= in[d];
  for (int64_t k = 0; k < pairs; ++k) {
    g.in[2 - k] = in[rank - 1 - k];
    g.before[2 - k] = pad[2 * k];
    g.after[2 - k] = pad[2 * k + 1];
  }
  return g;
}

// Constant mode, not recorded: the output filled with value, the kept region of x copied in.
Tensor constant_pad_values(const Tensor& x, const Shape& out_shape, const IntList& pad, double value) {
  Tensor out = full(out_shape, value, x.dtype());
  Tensor src = x.detach(), dst = out;
  const int64_t rank = x.dim();
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = rank - 1 - static_cast<int64_t>(k), before = pad[2 * k], after = pad[2 * k + 1];
    const int64_t kept = x.size(d) + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0);
    if (kept <= 0) return out;
    src = src.narrow(d, std::max<int64_t>(-before, 0), kept);
    dst = dst.narrow(d, std::max<int64_t>(before, 0), kept);
  }
  if (src.numel() > 0) detail::raw_copy_(dst, src);
  return out;
}

Tensor forward_values(const char* op, const Tensor& input, const Shape& out_shape, const IntList& pad, PadMode mode,
                      double value) {
  if (mode == PadMode::Constant) return constant_pad_values(input, out_shape, pad, value);
  Tensor x = input.detach().contiguous();
  Tensor out = Tensor::empty(out_shape, input.dtype());
  const kernels::PadGeometry g = geometry(input.shape(), pad);
  dispatch_all_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::pad_forward<T>(x.data<T>(), out.data<T>(), g, mode);
  });
  return out;
}

IntList negated(const IntList& pad) {
  IntList n(pad.size());
  std::transform(pad.begin(), pad.end(), n.begin(), [](int64_t v) { return -v; });
  return n;
}

std::vector<Tensor> pad_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const auto& a = ctx.attrs<PadAttrs>();
  return {pad_backward(g[0], a.input_size, a.pad, a.mode)};
}

std::vector<SampleCase> pad_samples() {
  using Inputs = std::vector<Tensor>;
  auto make = [](std::string name, Shape in, IntList p, PadMode mode, double value = 0.0) {
    return SampleCase{name, [in](DType dt) { return Inputs{sample_tensor(in, dt)}; },
                      [=](const Inputs& x) { return Inputs{pad(x[0], p, mode, value)}; }};
  };
  return {make("constant [2,3,4] pad (1,-1, 2,0) value 0.5", {2, 3, 4}, {1, -1, 2, 0}, PadMode::Constant, 0.5),
          make("constant [3,2] pad (2,1) (the first dim too: 0,1)", {3, 2}, {2, 1, 0, 1}, PadMode::Constant),
          make("reflect [2,3,5] pad (4,1)", {2, 3, 5}, {4, 1}, PadMode::Reflect),
          make("reflect unbatched [2,4,5] pad (1,3, 3,-1)", {2, 4, 5}, {1, 3, 3, -1}, PadMode::Reflect),
          make("replicate [1,2,3,2,4] pad (1,2, 0,1, 2,1)", {1, 2, 3, 2, 4}, {1, 2, 0, 1, 2, 1}, PadMode::Replicate),
          make("replicate unbatched [3,5] pad (-2,3)", {3, 5}, {-2, 3}, PadMode::Replicate),
          make("circular [1,2,3,4] pad (-1,3, 3,2)", {1, 2, 3, 4}, {-1, 3, 3, 2}, PadMode::Circular),
          make("circular [2,1,2,2,3] pad (3,3, 1,0, 0,2)", {2, 1, 2, 2, 3}, {3, 3, 1, 0, 0, 2}, PadMode::Circular)};
}

}  // namespace

const OpDef kPadOp{"pad", "pad_backward", "input", pad_backward_fn, pad_samples, true};

namespace {
// pad_backward is linear in grad_output and its adjoint is pad: that is its gradient.
std::vector<Tensor> pad_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<PadAttrs>();
  return {pad(gg[0], a.pad, a.mode)};
}
}  // namespace

const OpDef kPadBackwardOp{"pad_backward", "pad_backward_backward", "grad_output", pad_backward_backward_fn, nullptr,
                           true};

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
    case PadMode::Circular: return "circular";
  }
  return "unknown";
}

PadMode pad_mode_from_string(const std::string& mode, const char* op, const char* what) {
  for (PadMode m : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular})
    if (mode == pad_mode_name(m)) return m;
  TG_ERROR(op, ": expected ", what, " to be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"", mode,
           "\"");
}

Tensor pad(const Tensor& input, const IntList& pad, PadMode mode, double value) {
  const char* op = "pad";
  TG_CHECK(input.defined(), op, ": expected a defined input");
  // Under autocast, reflection of 1 or 2 dims and replication pad in float32 (framework/autocast.h)
  if (mode == PadMode::Replicate || (mode == PadMode::Reflect && pad.size() <= 4))
    if (auto c = autocast::to_float32(input)) return tg::pad(c[0], pad, mode, value);
  const Shape out_shape = checked_output_shape(op, input.shape(), input.dtype(), pad, mode, value);
  Tensor out = forward_values(op, input, out_shape, pad, mode, value);
  record_one_input(kPadOp, input, out, {}, PadAttrs{input.shape(), pad, mode});
  return out;
}

Tensor pad_backward(const Tensor& grad_output, const Shape& input_size, const IntList& pad, PadMode mode) {
  const char* op = "pad_backward";
  TG_CHECK(grad_output.defined(), op, ": expected a defined grad_output");
  checked_numel(input_size, op, "input_size");
  const DType dt = grad_output.dtype();
  TG_CHECK(is_floating(dt), op, ": expected a floating grad_output, got ", dtype_name(dt));
  const Shape out_shape = checked_output_shape(op, input_size, dt, pad, mode, 0.0);
  TG_CHECK(grad_output.shape() == out_shape, op, ": expected grad_output of the padded shape ",
           format_shape(out_shape), ", got ", format_shape(grad_output.shape()));
  Tensor grad_in;
  if (mode == PadMode::Constant) {  // the crop of grad_output (and zeros where pad cropped)
    grad_in = constant_pad_values(grad_output, input_size, negated(pad), 0.0);
  } else {
    Tensor g = grad_output.detach().contiguous();
    grad_in = Tensor::empty(input_size, dt);
    const kernels::PadGeometry geo = geometry(input_size, pad);
    dispatch_all_floating(dt, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::pad_backward<T>(g.data<T>(), grad_in.data<T>(), geo, mode);
    });
  }
  record_one_input(kPadBackwardOp, grad_output, grad_in, {}, PadAttrs{input_size, pad, mode});
  return grad_in;
}

void register_pad_ops(Registry& r) {
  r.add(kPadOp);
  r.add(kPadBackwardOp);
}

}  // namespace tg
