// grid_sample and affine_grid, 2-D and 3-D: validation, dtype dispatch and the tape (one code
// path for both ranks; the rank picks the kernels and the tape entries). The kernels (and the
// maths) are in grid_sample_kernels.cpp and grid_sample3d_kernels.cpp, the second-order one in
// grid_sample_kernels_double_backward.cpp; the sample cases in grid_sample_samples.cpp.
// Double backward (create_graph): see grid_sample_backward_backward_fn.
#include "grid_sample.h"
#include "../../framework/autocast.h"

#include <cmath>

#include "../../framework/checked_math.h"
#include "../../framework/random.h"
#include "../../framework/tape.h"
#include "../elementwise.h"
#include "../internal/reduced_float.h"
#include "internal/grid_sample_common.h"

namespace tg {

namespace {

using grid_sample_detail::GridSampleAttrs;

// Whether a tensor of this shape is a volume's (input (N, C, D, H, W)): the 3-D kernels and tape
// entries. Everything else goes the 2-D way, whose checks name the expected shapes.
bool is_volume(const Shape& input_shape) { return input_shape.size() == 5; }

GridSampleMode checked_mode(const char* op, int64_t mode) {
  TG_CHECK(mode >= 0 && mode <= 2, op, ": expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 (bicubic), got ",
           mode);
  return static_cast<GridSampleMode>(mode);
}

GridSamplePadding checked_padding(const char* op, int64_t padding) {
  TG_CHECK(padding >= 0 && padding <= 2, op,
           ": expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), got ", padding);
  return static_cast<GridSamplePadding>(padding);
}

// The dtypes every floating tensor of these ops may have. grid_sample's forward and backward
// kernels read 16-bit tensors natively (float32 arithmetic, each output rounded once); the
// double backward and affine_grid run the float32 kernels on widened copies (detail::widen)
// and round each output to the 16-bit dtype once (round_result, ops/internal/reduced_float.h),
// as PyTorch computes 16-bit tensors on the CPU.
constexpr const char* kFloatingDTypes = "(float32, float64, bfloat16 or float16)";

// Mixed floating dtypes are an error naming the argument that differs (no promotion, as in
// PyTorch's grid_sampler).
void check_same_dtype(const char* op, const char* name, const Tensor& t, const char* whose, DType expected) {
  TG_CHECK(t.dtype() == expected, op, ": expected ", name, " of ", whose, " dtype ", dtype_name(expected), ", got ",
           dtype_name(t.dtype()));
}

// Checks input and grid; the spec's list, in the order a user would want to hear it. `rank` is
// 4 (2-D: input [N, C, H, W], grid [N, Ho, Wo, 2]) or 5 (3-D: [N, C, D, H, W], [N, Do, Ho, Wo, 3]).
void check_input_and_grid(const char* op, const Tensor& input, const Tensor& grid, int64_t rank) {
  TG_CHECK(input.defined() && grid.defined(), op, ": expected input and grid, got an undefined tensor");
  const bool vol = rank == 5;
  TG_CHECK(input.dim() == rank, op, ": expected input to have shape ", vol ? "[N, C, D, H, W]" : "[N, C, H, W]",
           ", got ", format_shape(input.shape()));
  TG_CHECK(grid.dim() == rank && grid.size(rank - 1) == rank - 2, op, ": expected grid to have shape ",
           vol ? "[N, Do, Ho, Wo, 3] for a 5-D input" : "[N, Ho, Wo, 2]", ", got ", format_shape(grid.shape()));
  TG_CHECK(input.size(0) == grid.size(0), op, ": expected grid and input to have the same batch size N, got input ",
           format_shape(input.shape()), " and grid ", format_shape(grid.shape()));
  bool spatial = true;
  for (int64_t d = 2; d < rank; ++d) spatial = spatial && input.size(d) > 0;
  TG_CHECK(spatial, op, ": expected input to have non-empty spatial dimensions ", vol ? "D, H and W" : "H and W",
           ", got ", format_shape(input.shape()));
  TG_CHECK(is_floating(input.dtype()), op, ": expected input of a floating dtype ", kFloatingDTypes, ", got ",
           dtype_name(input.dtype()));
  check_same_dtype(op, "grid", grid, "input's", input.dtype());
}

// The output's shape, [N, C, Ho, Wo] or [N, C, Do, Ho, Wo], and its name for messages.
Shape output_shape(const Shape& input_shape, const Shape& grid_shape) {
  Shape out{input_shape[0], input_shape[1]};
  out.insert(out.end(), grid_shape.begin() + 1, grid_shape.end() - 1);
  return out;
}
const char* output_shape_name(const Shape& input_shape) {
  return is_volume(input_shape) ? "the output shape [N, C, Do, Ho, Wo]" : "the output shape [N, C, Ho, Wo]";
}

// grad_output of the backward kernels: defined, the output's shape, input's dtype. After
// check_input_and_grid.
void check_grad_output(const char* op, const Tensor& grad_output, const Tensor& input, const Tensor& grid) {
  const Shape out_shape = output_shape(input.shape(), grid.shape());
  checked_numel(out_shape, op, output_shape_name(input.shape()));
  TG_CHECK(grad_output.defined(), op, ": expected grad_output of shape ", format_shape(out_shape), ", got undefined");
  TG_CHECK(grad_output.shape() == out_shape, op, ": expected grad_output of shape ",
           is_volume(input.shape()) ? "[N, C, Do, Ho, Wo] = " : "[N, C, Ho, Wo] = ", format_shape(out_shape), ", got ",
           format_shape(grad_output.shape()));
  check_same_dtype(op, "grad_output", grad_output, "input's", input.dtype());
}

// The backward on validated, contiguous tensors. input is read only for a bilinear or bicubic
// grad_grid, so it may be undefined otherwise; its shape comes from input_shape.
GridSampleGrads run_backward(const char* op, const Tensor& grad_output, const Tensor& input, const Shape& input_shape,
                             const Tensor& grid, const GridSampleAttrs& a, bool want_input, bool want_grid) {
  GridSampleGrads grads;
  if (!want_input && !want_grid) return grads;
  // 16-bit tensors are read as they are: the kernel sums in float32 and rounds each gradient once.
  const DType kt = grid.dtype();
  if (want_input) grads.grad_input = Tensor::empty(input_shape, kt);
  if (want_grid) grads.grad_grid = Tensor::empty(grid.shape(), kt);
  const grid_sample_detail::Sizes z(input_shape, grid.shape());
  dispatch_all_floating(kt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    const T* x = input.defined() ? input.data<T>() : nullptr;
    if (z.volume)
      kernels::grid_sample_3d_backward<T>(grad_output.data<T>(), x, grid.data<T>(), ptr(grads.grad_input),
                                          ptr(grads.grad_grid), z.N, z.C, z.D, z.H, z.W, z.Do, z.Ho, z.Wo, a.mode,
                                          a.padding, a.align_corners);
    else
      kernels::grid_sample_2d_backward<T>(grad_output.data<T>(), x, grid.data<T>(), ptr(grads.grad_input),
                                          ptr(grads.grad_grid), z.N, z.C, z.H, z.W, z.Ho, z.Wo, a.mode, a.padding,
                                          a.align_corners);
  });
  return grads;
}

GridSampleGrads recorded_backward(const char* op, const Tensor& grad_output, const Tensor& input,
                                  const Shape& input_shape, const Tensor& grid, const GridSampleAttrs& a,
                                  std::array<bool, 2> mask);
Tensor grid_sample_impl(const char* op, const Tensor& input, const Tensor& grid, GridSampleMode mode,
                        GridSamplePadding padding, bool align_corners);

// The saved slots of grid_sample (kGrid always, kInput only when grad_grid reads it, see
// grid_sample_impl) and of its recorded backward grid_sampler_2d_backward (kGradOutput and
// kGrid always, kInput as for grid_sample); one enum, as the two share names.
enum GridSampleSaved { kGrid, kInput, kGradOutput };

std::vector<Tensor> grid_sample_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const bool want_input = ctx.needs_grad(0), want_grid = ctx.needs_grad(1);
  const GridSampleAttrs& a = ctx.attrs<GridSampleAttrs>();
  const bool reads_input = want_grid && a.mode != GridSampleMode::Nearest;
  const Tensor input = reads_input ? ctx.saved(kInput) : Tensor();
  // Under create_graph the backward is itself a recorded entry (grid_sampler_2d_backward), so
  // the gradients can be differentiated again; otherwise the kernel runs unrecorded.
  GridSampleGrads grads =
      ctx.create_graph()
          ? recorded_backward(ctx.op_name(), g[0], input, ctx.input_shape(0), ctx.saved(kGrid), a, {want_input, want_grid})
          : run_backward(ctx.op_name(), g[0].contiguous(), input.defined() ? input.contiguous() : input,
                         ctx.input_shape(0), ctx.saved(kGrid).contiguous(), a, want_input, want_grid);
  return {grads.grad_input, grads.grad_grid};
}

// affine_grid's backward needs only the sizes, not theta (the grid is linear in it).
struct AffineGridAttrs {
  std::vector<int64_t> size;
  bool align_corners;
};

// size is [N, C, H, W] (2-D) or [N, C, D, H, W] (3-D); returns the grid's shape, [N, H, W, 2] or
// [N, D, H, W, 3].
Shape checked_affine_grid_shape(const char* op, const std::vector<int64_t>& size) {
  TG_CHECK(size.size() == 4 || size.size() == 5, op,
           ": expected size [N, C, H, W] (2-D affine grid) or [N, C, D, H, W] (3-D), got ", format_shape(size));
  bool positive = size[0] >= 0 && size[1] >= 0;
  for (size_t d = 2; d < size.size(); ++d) positive = positive && size[d] > 0;
  TG_CHECK(positive, op, ": expected a non-negative N and C and a positive ",
           size.size() == 5 ? "D, H and W" : "H and W", " in size, got ", format_shape(size));
  Shape grid_shape{size[0]};
  grid_shape.insert(grid_shape.end(), size.begin() + 2, size.end());
  grid_shape.push_back(static_cast<int64_t>(size.size()) - 2);
  // Checked: size [1, 1, 2^32, 2^32] would ask for a grid of 2^65 values.
  checked_numel(grid_shape, op,
                size.size() == 5 ? "the grid shape [N, D, H, W, 3] of size" : "the grid shape [N, H, W, 2] of size");
  return grid_shape;
}

// Under create_graph g[0] carries history and affine_grid_generator_backward records itself:
// it is linear in the grad and its adjoint is affine_grid, so affine_grid is twice
// differentiable (its second derivative in theta is zero).
std::vector<Tensor> affine_grid_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const AffineGridAttrs& a = ctx.attrs<AffineGridAttrs>();
  return {affine_grid_generator_backward(ctx.create_graph() ? g[0] : g[0].detach(), a.size, a.align_corners)};
}

std::vector<Tensor> affine_grid_generator_backward_backward_fn(const BackwardContext& ctx,
                                                               const std::vector<Tensor>& gg) {
  const AffineGridAttrs& a = ctx.attrs<AffineGridAttrs>();
  return {affine_grid(gg[0], a.size, a.align_corners)};
}

}  // namespace

const OpDef kGridSampleOp{"grid_sample", "grid_sampler_2d_backward", "input, grid", grid_sample_backward_fn,
                          grid_sample_detail::grid_sample_samples, true};
const OpDef kGridSampler3dOp{"grid_sampler_3d", "grid_sampler_3d_backward", "input, grid", grid_sample_backward_fn,
                             grid_sample_detail::grid_sampler_3d_samples, true};
const OpDef kAffineGridOp{"affine_grid", "affine_grid_generator_backward", "theta", affine_grid_backward_fn,
                          grid_sample_detail::affine_grid_samples, true};
const OpDef kAffineGridGeneratorBackwardOp{"affine_grid_generator_backward",
                                           "affine_grid_generator_backward_backward", "grad_grid",
                                           affine_grid_generator_backward_backward_fn,
                                           grid_sample_detail::affine_grid_generator_backward_samples, true};

namespace {

// What the recorded backward entry needs besides its saved tensors.
struct GridSampleBackwardAttrs {
  GridSampleAttrs fwd;
  std::array<bool, 2> mask;  // which of grad_input, grad_grid are the entry's outputs, in that order
};

// Double backward: the backward of grid_sampler_2d_backward (and _3d_), for upstream gradients gg_input
// (of grad_input) and gg_grid (of grad_grid). With go = grad_output and x = input, the backward
// computes grad_input = the scatter of go with the weights (the adjoint of sampling, so linear
// in go and free of x) and grad_grid = sum over channels of go times d sample / d grid. So
//   <gg_input, grad_input> = <go, grid_sample(gg_input, grid)>, whose gradients are
//       d/dgo = grid_sample(gg_input, grid),  d/dgrid = grad_grid of the backward with gg_input
//       in place of x (both recorded ops again, so differentiable once more), d/dx = 0;
//   <gg_grid, grad_grid> gives d/dgo, d/dx and d/dgrid (the Hessian of the weights in the grid:
//       the cross term within a cell for bilinear), all three from one kernel,
//       grid_sampler_2d_double_backward / _3d_ (formulas in grid_sample_kernels_double_backward.cpp).
// Nearest's grad_grid is identically zero, and its weights are piecewise constant in the
// grid: only d/dgo from gg_input remains.
GridSampleDoubleGrads double_backward_impl(const char* op, const Tensor& grad_output, const Tensor& input,
                                           const Tensor& grid, const Tensor& gg_grid, int64_t interpolation_mode,
                                           int64_t padding_mode, bool align_corners, std::array<bool, 3> output_mask,
                                           int64_t rank);

std::vector<Tensor> grid_sample_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& gg) {
  const auto& a = ctx.attrs<GridSampleBackwardAttrs>();
  const int64_t rank = static_cast<int64_t>(ctx.input_shape(2).size());  // grid's, as input's
  const char* op = rank == 5 ? "grid_sampler_3d_backward_backward" : "grid_sampler_2d_backward_backward";
  Tensor gg_input, gg_grid;
  size_t k = 0;
  if (a.mask[0]) gg_input = gg[k++];
  if (a.mask[1]) gg_grid = gg[k++];
  const bool smooth = a.fwd.mode != GridSampleMode::Nearest;
  const Tensor go = ctx.saved(kGradOutput), grid = ctx.saved(kGrid);
  const Tensor x = a.mask[1] && smooth ? ctx.saved(kInput) : Tensor();  // saved only then
  const bool want_go = ctx.needs_grad(0), want_x = ctx.needs_grad(1), want_grid = ctx.needs_grad(2);
  Tensor d_go, d_x, d_grid;
  auto accumulate = [](Tensor& sum, const Tensor& t) { sum = sum.defined() ? add(sum, t) : t; };
  if (gg_input.defined()) {
    if (want_go) accumulate(d_go, grid_sample_impl(op, gg_input, grid, a.fwd.mode, a.fwd.padding, a.fwd.align_corners));
    if (want_grid && smooth)
      accumulate(d_grid, recorded_backward(op, go, gg_input, gg_input.shape(), grid, a.fwd, {false, true}).grad_grid);
  }
  if (x.defined() && (want_go || want_x || want_grid)) {
    GridSampleDoubleGrads r = double_backward_impl(
        op, go, x, grid, gg_grid, static_cast<int64_t>(a.fwd.mode), static_cast<int64_t>(a.fwd.padding),
        a.fwd.align_corners, {want_go, want_x, want_grid}, rank);
    if (want_go) accumulate(d_go, r.grad_grad_output);
    if (want_x) d_x = r.grad_input;
    if (want_grid) accumulate(d_grid, r.grad_grid);
  }
  const DType dt = go.dtype();
  if (want_go && !d_go.defined()) d_go = zeros(go.shape(), dt);
  if (want_x && !d_x.defined()) d_x = zeros(ctx.input_shape(1), dt);
  if (want_grid && !d_grid.defined()) d_grid = zeros(ctx.input_shape(2), dt);
  return {d_go, d_x, d_grid};
}

// The third derivative is not implemented: reaching this entry's backward is an error (with
// create_graph the tape refuses it first, as the OpDef says it is not twice differentiable).
std::vector<Tensor> grid_sample_double_backward_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>&) {
  TG_ERROR(ctx.op_name(), "_backward: expected at most second derivatives of grid_sample, got a request for a third "
           "(the backward of ", ctx.op_name(), ", grid_sample's second-order term in the grid, is not implemented)");
}

}  // namespace

const OpDef kGridSampleBackwardOp{"grid_sampler_2d_backward", "grid_sampler_2d_backward_backward",
                                  "grad_output, input, grid", grid_sample_backward_backward_fn, nullptr, true};
const OpDef kGridSampler3dBackwardOp{"grid_sampler_3d_backward", "grid_sampler_3d_backward_backward",
                                     "grad_output, input, grid", grid_sample_backward_backward_fn, nullptr, true};
const OpDef kGridSampleDoubleBackwardOp{"grid_sampler_2d_double_backward",
                                        "grid_sampler_2d_double_backward_backward",
                                        "grad_output, input, grid, gg_grid",
                                        grid_sample_double_backward_backward_fn, nullptr, false};
const OpDef kGridSampler3dDoubleBackwardOp{"grid_sampler_3d_double_backward",
                                           "grid_sampler_3d_double_backward_backward",
                                           "grad_output, input, grid, gg_grid",
                                           grid_sample_double_backward_backward_fn, nullptr, false};

namespace {

// The backward as a recorded entry (inputs grad_output, input, grid; outputs the gradients
// `mask` asks for), so that under create_graph its gradients can be differentiated again.
// input is read (and linked) only for a bilinear or bicubic grad_grid; input_shape gives its
// shape otherwise.
GridSampleGrads recorded_backward(const char* op, const Tensor& grad_output, const Tensor& input,
                                  const Shape& input_shape, const Tensor& grid, const GridSampleAttrs& a,
                                  std::array<bool, 2> mask) {
  const Tensor reads = mask[1] && a.mode != GridSampleMode::Nearest ? input : Tensor();
  GridSampleGrads r = run_backward(op, grad_output.detach().contiguous(),
                                   reads.defined() ? reads.detach().contiguous() : Tensor(), input_shape,
                                   grid.detach().contiguous(), a, mask[0], mask[1]);
  const OpDef& def = is_volume(input_shape) ? kGridSampler3dBackwardOp : kGridSampleBackwardOp;
  if (Recorder rec{def, {grad_output, reads, grid}}) {
    rec.set_attrs(GridSampleBackwardAttrs{a, mask});
    rec.save(kGradOutput, grad_output);
    if (reads.defined()) rec.save(kInput, reads);
    rec.save(kGrid, grid);
    std::vector<Tensor> outputs;
    for (const Tensor* t : {&r.grad_input, &r.grad_grid})
      if (t->defined()) outputs.push_back(*t);
    rec.set_outputs(outputs);
  }
  return r;
}

// PyTorch refuses bicubic for volumes (grid_sampler(): bicubic interpolation only supports 4D
// input); so do we, whatever the entry point.
void check_mode_for_rank(const char* op, GridSampleMode mode, int64_t rank) {
  TG_CHECK(!(rank == 5 && mode == GridSampleMode::Bicubic), op,
           ": expected interpolation_mode 0 (bilinear, i.e. trilinear) or 1 (nearest) for a 5-D input, got 2 "
           "(bicubic supports only 4-D input)");
}

Tensor grid_sample_impl(const char* op, const Tensor& input, const Tensor& grid, GridSampleMode mode,
                        GridSamplePadding padding, bool align_corners, int64_t rank) {
  if (auto c = autocast::to_float32(input, grid))  // framework/autocast.h
    return grid_sample_impl(op, c[0], c[1], mode, padding, align_corners, rank);
  check_input_and_grid(op, input, grid, rank);
  check_mode_for_rank(op, mode, rank);
  // Checked before any copy: expanded (stride-0) input and grid can be large with no memory
  // behind them, and their product can overflow.
  const Shape out_shape = output_shape(input.shape(), grid.shape());
  checked_numel(out_shape, op, output_shape_name(input.shape()));
  const grid_sample_detail::Sizes z(input.shape(), grid.shape());
  Tensor in = input.detach().contiguous(), gr = grid.detach().contiguous();
  Tensor out = Tensor::empty(out_shape, in.dtype());
  dispatch_all_floating(in.dtype(), op, [&](auto tag) {  // 16-bit: read natively, rounded once
    using T = typename decltype(tag)::type;
    if (z.volume)
      kernels::grid_sample_3d_forward<T>(in.data<T>(), gr.data<T>(), out.data<T>(), z.N, z.C, z.D, z.H, z.W, z.Do,
                                         z.Ho, z.Wo, mode, padding, align_corners);
    else
      kernels::grid_sample_2d_forward<T>(in.data<T>(), gr.data<T>(), out.data<T>(), z.N, z.C, z.H, z.W, z.Ho, z.Wo,
                                         mode, padding, align_corners);
  });
  if (Recorder rec{z.volume ? kGridSampler3dOp : kGridSampleOp, {input, grid}}) {
    // grad_input needs only grid (and grad_output); grad_grid needs input as well, except
    // nearest's, which is zero.
    // Saved as given, not the contiguous copies: under create_graph, the backward's gradients
    // must flow back into input and grid (the backward calls contiguous()).
    rec.save(kGrid, grid);
    if (rec.needs_grad(1) && mode != GridSampleMode::Nearest) rec.save(kInput, input);
    rec.set_attrs(GridSampleAttrs{mode, padding, align_corners});
    rec.set_outputs({out});
  }
  return out;
}

// The double backward's grid_sample (d/dgo from gg_input): the rank of the tensors given.
Tensor grid_sample_impl(const char* op, const Tensor& input, const Tensor& grid, GridSampleMode mode,
                        GridSamplePadding padding, bool align_corners) {
  return grid_sample_impl(op, input, grid, mode, padding, align_corners, input.dim() == 5 ? 5 : 4);
}

GridSampleGrads backward_impl(const char* op, const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                              int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                              std::array<bool, 2> output_mask, int64_t rank) {
  const GridSampleAttrs a{checked_mode(op, interpolation_mode), checked_padding(op, padding_mode), align_corners};
  check_input_and_grid(op, input, grid, rank);
  check_mode_for_rank(op, a.mode, rank);
  check_grad_output(op, grad_output, input, grid);
  return recorded_backward(op, grad_output, input, input.shape(), grid, a, output_mask);
}

GridSampleDoubleGrads double_backward_impl(const char* op, const Tensor& grad_output, const Tensor& input,
                                           const Tensor& grid, const Tensor& gg_grid, int64_t interpolation_mode,
                                           int64_t padding_mode, bool align_corners, std::array<bool, 3> output_mask,
                                           int64_t rank) {
  const GridSampleMode mode = checked_mode(op, interpolation_mode);
  const GridSamplePadding padding = checked_padding(op, padding_mode);
  check_input_and_grid(op, input, grid, rank);
  check_mode_for_rank(op, mode, rank);
  check_grad_output(op, grad_output, input, grid);
  TG_CHECK(gg_grid.defined(), op, ": expected gg_grid of grid's shape ", format_shape(grid.shape()),
           ", got undefined");
  TG_CHECK(gg_grid.shape() == grid.shape(), op, ": expected gg_grid of grid's shape ", format_shape(grid.shape()),
           ", got ", format_shape(gg_grid.shape()));
  check_same_dtype(op, "gg_grid", gg_grid, "input's", input.dtype());
  const DType dt = input.dtype();
  const grid_sample_detail::Sizes z(input.shape(), grid.shape());
  GridSampleDoubleGrads r;
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return r;
  // 16-bit: the float32 kernel on widened copies, each output rounded once below.
  auto wide = [](const Tensor& t) { return detail::widen(t.detach()).contiguous(); };
  const Tensor go = wide(grad_output), x = wide(input), gr = wide(grid), gg = wide(gg_grid);
  const DType kt = x.dtype();
  if (output_mask[0]) r.grad_grad_output = Tensor::empty(grad_output.shape(), kt);
  if (output_mask[1]) r.grad_input = Tensor::empty(input.shape(), kt);
  if (output_mask[2]) r.grad_grid = Tensor::empty(grid.shape(), kt);
  dispatch_floating(kt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    if (z.volume)
      kernels::grid_sample_3d_double_backward<T>(go.data<T>(), x.data<T>(), gr.data<T>(), gg.data<T>(),
                                                 ptr(r.grad_grad_output), ptr(r.grad_input), ptr(r.grad_grid), z.N,
                                                 z.C, z.D, z.H, z.W, z.Do, z.Ho, z.Wo, mode, padding, align_corners);
    else
      kernels::grid_sample_2d_double_backward<T>(go.data<T>(), x.data<T>(), gr.data<T>(), gg.data<T>(),
                                                 ptr(r.grad_grad_output), ptr(r.grad_input), ptr(r.grad_grid), z.N,
                                                 z.C, z.H, z.W, z.Ho, z.Wo, mode, padding, align_corners);
  });
  for (Tensor* t : {&r.grad_grad_output, &r.grad_input, &r.grad_grid}) *t = round_result(*t, dt);
  // Recorded (when a third derivative is asked for through it) only so that the tape raises
  // instead of treating these gradients as constants: its own backward is not implemented.
  if (Recorder rec{z.volume ? kGridSampler3dDoubleBackwardOp : kGridSampleDoubleBackwardOp,
                   {grad_output, input, grid, gg_grid}}) {
    std::vector<Tensor> outputs;
    for (const Tensor* t : {&r.grad_grad_output, &r.grad_input, &r.grad_grid})
      if (t->defined()) outputs.push_back(*t);
    rec.set_outputs(outputs);
  }
  return r;
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode, GridSamplePadding padding_mode,
                   bool align_corners) {
  // An enum built from an arbitrary integer is checked like the integer form. A 5-D input is a
  // volume (grid_sampler_3d); anything else is checked as a 2-D call.
  const char* op = "grid_sample";
  const int64_t rank = input.defined() && input.dim() == 5 ? 5 : 4;
  return grid_sample_impl(op, input, grid, checked_mode(op, static_cast<int64_t>(mode)),
                          checked_padding(op, static_cast<int64_t>(padding_mode)), align_corners, rank);
}

Tensor grid_sampler_2d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners) {
  const char* op = "grid_sampler_2d";
  return grid_sample_impl(op, input, grid, checked_mode(op, interpolation_mode), checked_padding(op, padding_mode),
                          align_corners, 4);
}

Tensor grid_sampler_3d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners) {
  const char* op = "grid_sampler_3d";
  return grid_sample_impl(op, input, grid, checked_mode(op, interpolation_mode), checked_padding(op, padding_mode),
                          align_corners, 5);
}

GridSampleGrads grid_sampler_2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                         int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                         std::array<bool, 2> output_mask) {
  return backward_impl("grid_sampler_2d_backward", grad_output, input, grid, interpolation_mode, padding_mode,
                       align_corners, output_mask, 4);
}

GridSampleGrads grid_sampler_3d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                         int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                         std::array<bool, 2> output_mask) {
  return backward_impl("grid_sampler_3d_backward", grad_output, input, grid, interpolation_mode, padding_mode,
                       align_corners, output_mask, 5);
}

GridSampleDoubleGrads grid_sampler_2d_double_backward(const Tensor& grad_output, const Tensor& input,
                                                      const Tensor& grid, const Tensor& gg_grid,
                                                      int64_t interpolation_mode, int64_t padding_mode,
                                                      bool align_corners, std::array<bool, 3> output_mask) {
  return double_backward_impl("grid_sampler_2d_double_backward", grad_output, input, grid, gg_grid,
                              interpolation_mode, padding_mode, align_corners, output_mask, 4);
}

GridSampleDoubleGrads grid_sampler_3d_double_backward(const Tensor& grad_output, const Tensor& input,
                                                      const Tensor& grid, const Tensor& gg_grid,
                                                      int64_t interpolation_mode, int64_t padding_mode,
                                                      bool align_corners, std::array<bool, 3> output_mask) {
  return double_backward_impl("grid_sampler_3d_double_backward", grad_output, input, grid, gg_grid,
                              interpolation_mode, padding_mode, align_corners, output_mask, 5);
}

Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners) {
  const char* op = "affine_grid";
  TG_CHECK(theta.defined(), op, ": expected theta, got an undefined tensor");
  TG_CHECK(is_floating(theta.dtype()), op, ": expected theta of a floating dtype ", kFloatingDTypes, ", got ",
           dtype_name(theta.dtype()));
  const Shape grid_shape = checked_affine_grid_shape(op, size);
  const bool vol = size.size() == 5;
  const int64_t rows = vol ? 3 : 2;
  TG_CHECK(theta.dim() == 3 && theta.size(1) == rows && theta.size(2) == rows + 1, op,
           ": expected theta to have shape ",
           vol ? "[N, 3, 4] (3-D affine matrices, for a size of 5 values)" : "[N, 2, 3] (2-D affine matrices)",
           ", got ", format_shape(theta.shape()));
  TG_CHECK(theta.size(0) == size[0], op, ": expected theta's batch size to match size[0] = ", size[0], ", got theta ",
           format_shape(theta.shape()));
  Tensor th = detail::widen(theta.detach()).contiguous();
  Tensor grid = Tensor::empty(grid_shape, th.dtype());
  // N = 0: nothing to compute, and the kernel's per-row tables of H and W (which may be 2^40
  // for an empty grid) must not be built.
  const int64_t N = size[0], D = vol ? size[2] : 1, H = size[vol ? 3 : 2], W = size[vol ? 4 : 3];
  if (grid.numel() > 0) dispatch_floating(th.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vol)
      kernels::affine_grid_3d_forward<T>(th.data<T>(), grid.data<T>(), N, D, H, W, align_corners);
    else
      kernels::affine_grid_2d_forward<T>(th.data<T>(), grid.data<T>(), N, H, W, align_corners);
  });
  grid = round_result(grid, theta.dtype());
  if (Recorder rec{kAffineGridOp, {theta}}) {
    rec.set_attrs(AffineGridAttrs{size, align_corners});
    rec.set_outputs({grid});
  }
  return grid;
}

Tensor affine_grid_generator_backward(const Tensor& grad_grid, const std::vector<int64_t>& size, bool align_corners) {
  const char* op = "affine_grid_generator_backward";
  const Shape grid_shape = checked_affine_grid_shape(op, size);
  const bool vol = size.size() == 5;
  TG_CHECK(grad_grid.defined() && grad_grid.shape() == grid_shape, op, ": expected grad_grid of shape ",
           vol ? "[N, D, H, W, 3] = " : "[N, H, W, 2] = ", format_shape(grid_shape), ", got ",
           describe_shape(grad_grid));
  TG_CHECK(is_floating(grad_grid.dtype()), op, ": expected grad_grid of a floating dtype ", kFloatingDTypes, ", got ",
           dtype_name(grad_grid.dtype()));
  Tensor g = detail::widen(grad_grid.detach()).contiguous();
  const int64_t N = size[0], D = vol ? size[2] : 1, H = size[vol ? 3 : 2], W = size[vol ? 4 : 3];
  Tensor grad_theta = Tensor::empty(vol ? Shape{N, 3, 4} : Shape{N, 2, 3}, g.dtype());
  // N = 0: as in affine_grid, no per-row tables for an empty grid.
  if (N > 0) dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vol)
      kernels::affine_grid_3d_backward<T>(g.data<T>(), grad_theta.data<T>(), N, D, H, W, align_corners);
    else
      kernels::affine_grid_2d_backward<T>(g.data<T>(), grad_theta.data<T>(), N, H, W, align_corners);
  });
  grad_theta = round_result(grad_theta, grad_grid.dtype());
  if (Recorder rec{kAffineGridGeneratorBackwardOp, {grad_grid}}) {  // under create_graph, say
    rec.set_attrs(AffineGridAttrs{size, align_corners});
    rec.set_outputs({grad_theta});
  }
  return grad_theta;
}

void register_grid_sample_ops(Registry& r) {
  r.add(kGridSampleOp);
  r.add(kGridSampleBackwardOp);
  r.add(kGridSampleDoubleBackwardOp);
  r.add(kGridSampler3dOp);
  r.add(kGridSampler3dBackwardOp);
  r.add(kGridSampler3dDoubleBackwardOp);
  r.add(kAffineGridOp);
  r.add(kAffineGridGeneratorBackwardOp);
}

}  // namespace tg
