// Autocast: mixed precision for a region of code, as PyTorch's torch.autocast("cpu").
//
//   {
//     tg::AutocastGuard guard(tg::DType::BFloat16);   // or DType::Float16
//     Tensor loss = criterion(model.forward(x), y);    // products in bf16, norms and losses in float32
//   }
//   loss.backward();                                   // outside the guard, as PyTorch users do
//
// Inside the guard, ops cast their floating inputs at their entry, by one of two policies:
//
//   lower       matmul, linear, conv1d/2d/3d, conv_transpose1d/2d/3d, convolution: every
//               float32 (or other 16-bit) input becomes the autocast dtype
//   to_float32  group_norm, layer_norm, softmax, log_softmax, the losses (mse, l1, smooth_l1,
//               cross_entropy, binary_cross_entropy_with_logits), grid_sample, upsample_bilinear2d,
//               upsample_linear1d, upsample_bicubic2d, upsample_trilinear3d, ms_deform_attn,
//               batch_norm, pad by reflection of 1 or 2 dims and by replication,
//               adaptive_avg_pool3d: every 16-bit input becomes float32
//
// Every other op runs in the dtype of its inputs; elementwise ops of two dtypes promote
// (bfloat16 + float32 -> float32). float64 is never cast. The casts are the differentiable
// Tensor::to, recorded on the tape like any op, so the tape shows what ran and a float32
// parameter's gradient comes back in float32 through the cast's backward.
//
// Where this follows PyTorch 1.13's CPU lists and where it does not (autocast_mode.cpp):
// - lower: as PyTorch's (conv1d/2d/3d, mm, bmm, matmul, linear, addmm, ..., _convolution), and
//   the transposed convolutions too, which 1.13 lists as fp32 and PyTorch 2.x moved to the lower
//   list: here they are the same kernels as the forward convolutions, and as fast.
// - to_float32: 1.13's CPU fp32 list has the losses, grid_sampler, reflection_pad1d/2d,
//   replication_pad1d/2d/3d and adaptive_avg_pool3d (reflection of 3 dims, constant and circular
//   padding and the other pools keep the input's dtype there and here), but not group_norm,
//   layer_norm, softmax nor upsample (they run in the input's dtype, and group_norm / layer_norm
//   of a bf16 input with float32 affine parameters fail there with "expected scalar type
//   BFloat16 but found Float"). Here they compute in float32, as PyTorch's CUDA list has them;
//   ms_deform_attn stays in float32 as Deformable-DETR keeps it, and batch_norm computes in
//   float32 (1.13's CPU returns bf16 there, from float32 statistics). (Reductions such as sum and
//   mean are on neither 1.13 CPU list: a 16-bit one sums in float32 and rounds once anyway.)
// - float16: 1.13 refuses it on the CPU ("AutocastCPU only support Bfloat16"); PyTorch 2.x
//   accepts it, with the same lists. Here it is accepted, and the lists are the same as for bf16.
//
// The cast cache (PyTorch's): the bf16 copy of a float32 leaf that requires grad (a parameter)
// is made once per outermost guard, not once per use, and reused while the leaf is unchanged
// (same version) and the cached copy was recorded if grad mode is on now. Several uses of a
// cached copy in one loss sum their gradients in its dtype before the one cast back to float32,
// exactly as PyTorch does; uses in two losses can run two backward calls (a GAN's D(real) and
// D(fake)): the cast saves nothing, so a backward without retain_graph leaves it usable.
// The cache is thread-local and emptied when the outermost guard ends.
//
// Backward runs with autocast off (tg::backward and tg::grad suspend it): each entry's backward
// computes in the dtypes its forward ran in, which is what PyTorch documents ("backward ops run
// in the same type that autocast used for corresponding forward ops"). PyTorch itself runs a
// backward called inside an autocast region with autocast on (1.13: a custom Function's backward
// sees is_autocast_cpu_enabled() and its matmul returns bf16) and its engine casts each gradient
// back to its input's dtype, which for its built-in backward formulas comes to the same dtypes;
// only a custom op's backward (framework/custom_op.h) sees the difference.
#pragma once

#include <array>
#include <cstddef>

#include "dtype.h"
#include "tensor.h"

namespace tg {

// The calling thread's autocast state (off, bfloat16 outside any guard).
bool is_autocast_enabled();
DType autocast_dtype();

// Turns autocast on (or off: enabled = false, as torch.autocast(enabled=False)) for a scope,
// with `dtype` BFloat16 or Float16 (any other is a tg::Error naming the argument), and restores
// the previous state at its end. Guards nest.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

namespace autocast {

// The casts an op makes at its entry. Each policy returns its arguments cast, and converts to
// true when it changed one; the op then calls itself again with them, as in
//   if (auto c = autocast::lower(x, weight, bias)) return linear(c[0], c[1], c[2]);
// With autocast off (or nothing to cast) it is false and costs one thread-local read.
template <size_t N>
struct Casts {
  std::array<Tensor, N> args;
  bool changed = false;
  explicit operator bool() const { return changed; }
  const Tensor& operator[](size_t i) const { return args[i]; }
};

// One tensor by each policy (undefined, integer and float64 tensors pass through).
Tensor lower_one(const Tensor& t);       // float32 / 16-bit -> the autocast dtype, through the cast cache
Tensor to_float32_one(const Tensor& t);  // bfloat16 / float16 -> float32

namespace detail {
template <class Cast, class... Ts>
Casts<sizeof...(Ts)> apply(Cast cast, const Ts&... ts) {
  Casts<sizeof...(Ts)> c;
  if (!is_autocast_enabled()) return c;
  c.args = {cast(ts)...};
  const std::array<const Tensor*, sizeof...(Ts)> in = {&ts...};
  for (size_t i = 0; i < in.size(); ++i) c.changed = c.changed || c.args[i].impl() != in[i]->impl();
  return c;
}
}  // namespace detail

// The lower-precision policy (matmul, linear, convolutions).
template <class... Ts>
Casts<sizeof...(Ts)> lower(const Ts&... ts) {
  return detail::apply(lower_one, ts...);
}

// The float32 policy (norms, softmax, losses, sampling).
template <class... Ts>
Casts<sizeof...(Ts)> to_float32(const Ts&... ts) {
  return detail::apply(to_float32_one, ts...);
}

// The number of casts in the calling thread's cache (for tests).
size_t cache_size();

}  // namespace autocast

// Autocast off for a scope without ending the enclosing guard's cache (tg::backward uses it).
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool previous_enabled_;
};

}  // namespace tg
