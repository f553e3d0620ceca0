// Multi-scale deformable attention: validation, dtype dispatch and the tape. The kernels: the
// maths of both directions and the forward in ms_deform_attn_kernels.cpp, the backward in
// ms_deform_attn_backward_kernels.cpp.
#include "ms_deform_attn.h"
#include "../../framework/autocast.h"

#include <cmath>

#include "../../framework/checked_math.h"
#include "../../framework/random.h"
#include "../../framework/tape.h"
#include "internal/ms_deform_attn_shared.h"
#include "ms_deform_attn_kernels.h"
#include "../internal/samples.h"

namespace tg {

namespace detail {

void ms_deform_attn_check_dtype(const char* op, const char* name, const Tensor& t, const Tensor& value) {
  TG_CHECK(t.dtype() == value.dtype(), op, ": expected ", name, " of value's dtype ", dtype_name(value.dtype()),
           ", got ", dtype_name(t.dtype()));
}

MsdaSizes ms_deform_attn_check_inputs(const char* op, const Tensor& value, const Tensor& spatial_shapes,
                                      const Tensor& level_start_index, const Tensor& loc, const Tensor& attn) {
  TG_CHECK(value.defined() && spatial_shapes.defined() && level_start_index.defined() && loc.defined() &&
               attn.defined(),
           op, ": expected value, spatial_shapes, level_start_index, sampling_locations and attention_weights");
  TG_CHECK(value.dim() == 4, op, ": expected value of shape [bs, num_keys, heads, channels], got ",
           format_shape(value.shape()));
  TG_CHECK(loc.dim() == 6 && loc.size(5) == 2, op,
           ": expected sampling_locations of shape [bs, queries, heads, levels, points, 2], got ",
           format_shape(loc.shape()));
  MsdaSizes s{value.size(0), value.size(1), value.size(2), value.size(3), loc.size(3), loc.size(1), loc.size(4)};
  auto check_index = [&](const char* name, const Tensor& t) {
    TG_CHECK(t.dtype() == DType::Int64 || t.dtype() == DType::Int32, op, ": expected ", name,
             " of dtype int64 or int32, got ", dtype_name(t.dtype()));
  };
  check_index("spatial_shapes", spatial_shapes);
  check_index("level_start_index", level_start_index);
  TG_CHECK(is_floating(value.dtype()), op, ": expected value of a floating dtype (float32, float64, bfloat16 or "
           "float16), got ", dtype_name(value.dtype()));
  ms_deform_attn_check_dtype(op, "sampling_locations", loc, value);
  ms_deform_attn_check_dtype(op, "attention_weights", attn, value);
  TG_CHECK(loc.size(0) == s.bs && loc.size(2) == s.heads, op, ": sampling_locations ", format_shape(loc.shape()),
           " does not match value ", format_shape(value.shape()), " in bs or heads");
  const Shape attn_shape{s.bs, s.queries, s.heads, s.levels, s.points};
  checked_numel(loc.shape(), op, "sampling_locations");
  checked_mul(s.heads, s.channels, op, "heads * channels of value");
  TG_CHECK(attn.shape() == attn_shape, op, ": expected attention_weights of shape ", format_shape(attn_shape), ", got ",
           format_shape(attn.shape()));
  TG_CHECK(spatial_shapes.shape() == (Shape{s.levels, 2}), op, ": expected spatial_shapes of shape [", s.levels,
           ", 2] (levels, (H, W)), got ", format_shape(spatial_shapes.shape()));
  TG_CHECK(level_start_index.shape() == (Shape{s.levels}), op, ": expected level_start_index of shape [", s.levels,
           "], got ", format_shape(level_start_index.shape()));
  // int32 tables are read as int64 (exact), so hostile values fail the same checks either way.
  std::vector<int64_t> hw = index_as_int64(spatial_shapes).to_vector<int64_t>();
  std::vector<int64_t> start = index_as_int64(level_start_index).to_vector<int64_t>();
  int64_t keys = 0;
  for (int64_t l = 0; l < s.levels; ++l) {
    TG_CHECK(hw[2 * l] > 0 && hw[2 * l + 1] > 0, op, ": expected positive level sizes, level ", l, " has (H, W) = (",
             hw[2 * l], ", ", hw[2 * l + 1], ")");
    TG_CHECK(start[l] == keys, op, ": level_start_index[", l, "] is ", start[l], ", but the levels before it hold ",
             keys, " keys");
    // Checked: [[2^32, 2^32], [2, 2]] would wrap to 4 keys and the kernel would read past value.
    keys = checked_add(keys, checked_mul(hw[2 * l], hw[2 * l + 1], op, "H * W of a level of spatial_shapes"), op,
                       "the number of keys of spatial_shapes (sum of H * W)");
  }
  TG_CHECK(keys == s.num_keys, op, ": the levels hold ", keys, " keys (sum of H*W over spatial_shapes), but value has ",
           "num_keys = ", s.num_keys);
  return s;
}

void ms_deform_attn_check_grad_output(const char* op, const MsdaSizes& s, const Tensor& value,
                                      const Tensor& grad_output) {
  const Shape out_shape{s.bs, s.queries, s.heads * s.channels};
  TG_CHECK(grad_output.defined() && grad_output.shape() == out_shape, op, ": expected grad_output of shape ",
           format_shape(out_shape), ", got ", describe_shape(grad_output));
  ms_deform_attn_check_dtype(op, "grad_output", grad_output, value);
}

}  // namespace detail

namespace {

using detail::MsdaSizes;

MsdaSizes check_inputs(const char* op, const Tensor& value, const Tensor& spatial_shapes,
                       const Tensor& level_start_index, const Tensor& loc, const Tensor& attn) {
  return detail::ms_deform_attn_check_inputs(op, value, spatial_shapes, level_start_index, loc, attn);
}

// Saved by the forward: value, sampling_locations and attention_weights as given (a recorded
// backward, under create_graph, follows their history; the plain backward makes them
// contiguous, a no-op for the usual contiguous inputs), and the integer level tables.
enum MsDeformAttnSaved { kValue, kSpatialShapes, kLevelStartIndex, kSamplingLocations, kAttentionWeights };

std::vector<Tensor> ms_deform_attn_backward_fn(const BackwardContext& ctx, const std::vector<Tensor>& g) {
  const std::array<bool, 3> mask{ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2)};
  MsDeformAttnGrads grads =
      ctx.create_graph()
          ? detail::ms_deform_attn_recorded_backward(g[0], ctx.saved(kValue), ctx.saved(kSpatialShapes),
                                                     ctx.saved(kLevelStartIndex), ctx.saved(kSamplingLocations),
                                                     ctx.saved(kAttentionWeights), mask)
          : ms_deform_attn_backward(ctx.saved(kValue), ctx.saved(kSpatialShapes), ctx.saved(kLevelStartIndex),
                                    ctx.saved(kSamplingLocations), ctx.saved(kAttentionWeights), g[0], mask);
  return {grads.grad_value, grads.grad_sampling_locations, grads.grad_attention_weights};
}

// Locations whose pixel coordinates x*W - 0.5 stay 0.1 away from integers (bilinear's kinks),
// some of them outside the map (zero padding).
Tensor kink_free_locations(int64_t bs, int64_t q, int64_t m, const std::vector<std::pair<int64_t, int64_t>>& levels,
                           int64_t p, DType dt) {
  const int64_t L = static_cast<int64_t>(levels.size());
  Tensor loc = Tensor::empty({bs, q, m, L, p, 2}, DType::Float64);
  double* d = loc.data<double>();
  Generator& gen = default_generator();
  for (int64_t i = 0; i < loc.numel(); ++i) {
    const int64_t l = (i / (2 * p)) % L;
    const double size = static_cast<double>(i % 2 == 0 ? levels[l].second : levels[l].first);  // x: W, y: H
    const double cell = std::floor(gen.next_double() * (size + 1)) - 1;  // -1 .. size-1
    const double pixel = cell + 0.1 + 0.8 * gen.next_double();
    d[i] = (pixel + 0.5) / size;
  }
  Tensor out = loc.to(dt);
  out.requires_grad_();
  return out;
}

std::vector<SampleCase> ms_deform_attn_samples() {
  auto make = [](int64_t bs, int64_t q, int64_t m, int64_t c, std::vector<std::pair<int64_t, int64_t>> levels,
                 int64_t p) {
    return [=](DType dt) {
      std::vector<int64_t> hw, start;
      int64_t keys = 0;
      for (auto [h, w] : levels) {
        hw.insert(hw.end(), {h, w});
        start.push_back(keys);
        keys += h * w;
      }
      const int64_t L = static_cast<int64_t>(levels.size());
      return std::vector<Tensor>{sample_tensor({bs, keys, m, c}, dt), from_vector(hw, {L, 2}), from_vector(start, {L}),
                                 kink_free_locations(bs, q, m, levels, p, dt),
                                 sample_uniform({bs, q, m, L, p}, dt, 0.1, 1.0)};
    };
  };
  auto run = [](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{ms_deform_attn(x[0], x[1], x[2], x[3], x[4])};
  };
  // (The registry test also gradgradchecks these: the locations' distance from the kinks keeps
  // the finite differences of the first-order gradients, piecewise bilinear in them, valid.)
  return {{"bs 1, 1 level 3x4, 1 head, 2 channels, 2 points", make(1, 3, 1, 2, {{3, 4}}, 2), run},
          {"bs 2, levels 4x3 + 2x2, 2 heads, 3 channels, 2 points", make(2, 2, 2, 3, {{4, 3}, {2, 2}}, 2), run},
          {"bs 1, levels 3x5 + 2x3 + 1x1, 2 heads, 2 channels, 3 points",
           make(1, 2, 2, 2, {{3, 5}, {2, 3}, {1, 1}}, 3), run}};
}

}  // namespace

// Twice differentiable: under create_graph the backward is the recorded ms_deform_attn_backward
// entry of ms_deform_attn_double_backward.cpp.
const OpDef kMsDeformAttnOp{"ms_deform_attn", "ms_deform_attn_backward",
                            "value, sampling_locations, attention_weights", ms_deform_attn_backward_fn,
                            ms_deform_attn_samples, true};

Tensor ms_deform_attn(const Tensor& value, const Tensor& spatial_shapes, const Tensor& level_start_index,
                      const Tensor& sampling_locations, const Tensor& attention_weights) {
  if (auto c = autocast::to_float32(value, sampling_locations, attention_weights))  // framework/autocast.h
    return ms_deform_attn(c[0], spatial_shapes, level_start_index, c[1], c[2]);
  const MsdaSizes s =
      check_inputs("ms_deform_attn", value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  // 16-bit: the kernel reads the tensors as they are, computes in float32, rounds the output once.
  Tensor v = value.detach().contiguous(), loc = sampling_locations.detach().contiguous();
  Tensor attn = attention_weights.detach().contiguous();
  Tensor shapes = detail::index_as_int64(spatial_shapes), start = detail::index_as_int64(level_start_index);
  Tensor out = Tensor::empty({s.bs, s.queries, s.heads * s.channels}, v.dtype());
  dispatch_all_floating(v.dtype(), "ms_deform_attn", [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::ms_deform_attn_forward<T>(v.data<T>(), shapes.data<int64_t>(), start.data<int64_t>(), loc.data<T>(),
                                       attn.data<T>(), out.data<T>(), s.bs, s.num_keys, s.heads, s.channels, s.levels,
                                       s.queries, s.points);
  });
  if (Recorder rec{kMsDeformAttnOp, {value, sampling_locations, attention_weights}}) {
    rec.save(kValue, value);
    rec.save(kSpatialShapes, shapes);
    rec.save(kLevelStartIndex, start);
    rec.save(kSamplingLocations, sampling_locations);
    rec.save(kAttentionWeights, attention_weights);
    rec.set_outputs({out});
  }
  return out;
}

MsDeformAttnGrads ms_deform_attn_backward(const Tensor& value, const Tensor& spatial_shapes,
                                          const Tensor& level_start_index, const Tensor& sampling_locations,
                                          const Tensor& attention_weights, const Tensor& grad_output,
                                          std::array<bool, 3> output_mask) {
  const char* op = "ms_deform_attn_backward";
  const MsdaSizes s = check_inputs(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  detail::ms_deform_attn_check_grad_output(op, s, value, grad_output);
  MsDeformAttnGrads grads;
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return grads;
  // 16-bit: the kernel reads the tensors as they are, sums in float32, rounds each gradient once.
  Tensor v = value.detach().contiguous(), loc = sampling_locations.detach().contiguous();
  Tensor attn = attention_weights.detach().contiguous(), g = grad_output.detach().contiguous();
  Tensor shapes = detail::index_as_int64(spatial_shapes), start = detail::index_as_int64(level_start_index);
  const DType kt = v.dtype();
  if (output_mask[0]) grads.grad_value = Tensor::empty(value.shape(), kt);
  if (output_mask[1]) grads.grad_sampling_locations = Tensor::empty(sampling_locations.shape(), kt);
  if (output_mask[2]) grads.grad_attention_weights = Tensor::empty(attention_weights.shape(), kt);
  dispatch_all_floating(kt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    kernels::ms_deform_attn_backward<T>(v.data<T>(), shapes.data<int64_t>(), start.data<int64_t>(), loc.data<T>(),
                                        attn.data<T>(), g.data<T>(), ptr(grads.grad_value),
                                        ptr(grads.grad_sampling_locations), ptr(grads.grad_attention_weights), s.bs,
                                        s.num_keys, s.heads, s.channels, s.levels, s.queries, s.points);
  });
  return grads;
}

void register_ms_deform_attn_ops(Registry& r) {
  r.add(kMsDeformAttnOp);
  r.add(detail::kMsDeformAttnBackwardOp);
}

}  // namespace tg
