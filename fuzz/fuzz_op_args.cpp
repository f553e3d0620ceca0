// libFuzzer driver for the five operators' arguments: the input picks an operator, small tensor
// shapes (every tensor under 4096 elements) and arbitrary int64 parameters (stride, padding,
// dilation, groups, output sizes, spatial_shapes, N / C / HxW), huge and negative included.
// A tg::Error is the expected answer to a bad argument; any other exception, a crash or a
// sanitizer report is a finding.
//
// Built by the fuzz CMake with clang -fsanitize=fuzzer,address,undefined against the library.
// A valid but huge request (an output of 2^40 floats) is a legitimate allocation failure, not a
// bug: the driver skips calls whose output it can count and finds larger than kMaxOutput, and
// runs are meant with ASAN_OPTIONS=allocator_may_return_null=1 and -rss_limit_mb=4096.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace {

constexpr int64_t kMaxElements = 4096;     // per input tensor
constexpr int64_t kMaxOutput = 1 << 22;    // outputs above this are skipped (valid, just big)

// Reads the fuzz input front to back; past the end every read gives zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  bool flag() { return byte() & 1; }
  // A small size in [lo, hi].
  int64_t small(int64_t lo, int64_t hi) { return lo + byte() % (hi - lo + 1); }
  // Any int64, biased towards the values that break size arithmetic.
  int64_t param() {
    static const int64_t kSpecial[] = {0, 1, 2, 3, -1, -2, int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 40,
                                       (int64_t(1) << 40) - 1, int64_t(1) << 62, (int64_t(1) << 62) - 1,
                                       std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
    const uint8_t kind = byte();
    if (kind < 128) return static_cast<int64_t>(kind % 8);  // mostly small, valid values
    if (kind < 200) return kSpecial[kind % (sizeof(kSpecial) / sizeof(kSpecial[0]))];
    int64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  double real() {
    static const double kSpecial[] = {0.5, 2.0, 1e30, -1.0, 0.0, std::nan(""), INFINITY, 1e18, 1e-30};
    const uint8_t kind = byte();
    if (kind < 200) return kSpecial[kind % (sizeof(kSpecial) / sizeof(kSpecial[0]))];
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  std::vector<int64_t> params(size_t n) {
    std::vector<int64_t> v(n);
    for (auto& x : v) x = param();
    return v;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

int64_t count(const tg::Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;  // callers keep every dim small
  return n;
}

// Small dims (0..max_dim each), shrunk until the tensor has fewer than kMaxElements elements.
tg::Shape small_shape(Reader& r, size_t ndim, int64_t min_dim, int64_t max_dim) {
  tg::Shape s(ndim);
  for (auto& d : s) d = r.small(min_dim, max_dim);
  for (size_t i = 0; count(s) >= kMaxElements; i = (i + 1) % ndim)
    if (s[i] > std::max<int64_t>(min_dim, 1)) s[i] /= 2;
  return s;
}

tg::Tensor values(const tg::Shape& shape, tg::DType dt) {
  tg::Tensor t = tg::Tensor::empty(shape, dt);
  // Deterministic, small values: the point is the arguments, not the numbers.
  const int64_t n = t.numel();
  tg::Tensor d = tg::arange(0, static_cast<double>(n), 1, dt);
  if (n > 0) t.copy_(d.view(shape).mul_(0.01));
  return t;
}

// out = a * b * ... when every product fits and stays under kMaxOutput, else nullopt (the call
// is still made when the count overflows: refusing it is the library's job).
// The sizes are non-negative and their product is below limit (counted without overflow: the
// driver itself must not do what it hunts for in the library).
bool product_below(const std::vector<int64_t>& sizes, int64_t limit) {
  int64_t n = 1;
  for (int64_t s : sizes)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return false;
  return n < limit;
}

bool too_big(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s <= 0) return false;  // invalid: the library must refuse it
    if (__builtin_mul_overflow(n, s, &n)) return false;
  }
  return n > kMaxOutput;
}

void fuzz_conv(Reader& r, tg::DType dt) {
  const int dims = static_cast<int>(r.small(1, 3));
  const bool transposed = r.flag();
  const int64_t groups = r.flag() ? r.small(1, 4) : r.param();
  const int64_t g = groups >= 1 && groups <= 4 ? groups : 1;
  tg::Shape in{r.small(0, 2), g * r.small(0, 3)};
  tg::Shape w;
  if (transposed) w = {in[1], r.small(0, 3)};
  else w = {g * r.small(0, 3), in[1] / g};
  for (int d = 0; d < dims; ++d) in.push_back(r.small(1, 6)), w.push_back(r.small(1, 3));
  if (r.flag()) in[2] = r.small(0, 6);  // sometimes a shape the op must refuse
  if (count(in) >= kMaxElements || count(w) >= kMaxElements) return;
  const size_t n_pad = r.flag() ? 1 : (r.flag() ? dims : 2 * dims);
  const tg::IntList stride = r.params(r.flag() ? 1 : dims), padding = r.params(n_pad);
  const tg::IntList dilation = r.params(r.flag() ? 1 : dims), output_padding = r.params(r.flag() ? 1 : dims);
  // Skip valid geometries whose output is merely large (counted in double: no overflow here).
  // The channel count uses the groups the call gets (a huge one divides an empty C_in), and the
  // bias gradient is [C_out] whatever the batch: an empty batch does not make 2^31 channels small.
  const double c_out = transposed ? static_cast<double>(w[1]) * static_cast<double>(groups) : static_cast<double>(w[0]);
  if (c_out > static_cast<double>(kMaxOutput)) return;
  double out = static_cast<double>(in[0]) * c_out;
  for (int d = 0; d < dims; ++d) {
    const double s = static_cast<double>(stride.size() == 1 ? stride[0] : stride[d]);
    // This dim's padding, both sides: one value for all dims, one per dim, or (before, after)
    // per dim. (The largest padding anywhere overestimates, and an estimate past int64 lets a
    // valid but huge call through as if the library had to refuse it.)
    const auto pad = [&](size_t i) { return i < padding.size() ? static_cast<double>(padding[i]) : 0.0; };
    const double p = padding.size() == 2 * static_cast<size_t>(dims) ? pad(2 * d) + pad(2 * d + 1)
                                                                    : 2.0 * pad(padding.size() == 1 ? 0 : d);
    const double dil = static_cast<double>(dilation.size() == 1 ? dilation[0] : dilation[d]);
    const double k = static_cast<double>(w[2 + d]);
    // output_padding may be as large as max(stride, dilation) - 1, so a huge dilation with a
    // 1-wide kernel allows a huge one (valid, PyTorch's rule).
    double op = 0;
    for (int64_t v : output_padding) op = std::max(op, static_cast<double>(v));
    const double o = transposed ? (static_cast<double>(in[2 + d]) - 1) * s + dil * (k - 1) + 1 + op + 8
                                : (static_cast<double>(in[2 + d]) + p) / std::max(s, 1.0) + 1;
    out *= std::max(o, 1.0);
  }
  if (out > static_cast<double>(kMaxOutput) && out < 9.2e18) return;
  tg::Tensor x = values(in, dt), wt = values(w, dt);
  tg::Tensor bias = r.flag() ? values({transposed ? w[1] * g : w[0]}, dt) : tg::Tensor();
  tg::Tensor y = tg::convolution(x, wt, bias, stride, padding, dilation, transposed, output_padding, groups);
  if (r.flag()) {
    tg::convolution_backward(tg::ones_like(y), x, wt, bias.defined() ? tg::IntList{bias.size(0)} : tg::IntList{},
                             stride, padding, dilation, transposed, output_padding, groups,
                             {r.flag(), r.flag(), r.flag()});
  }
}

void fuzz_group_norm(Reader& r, tg::DType dt) {
  tg::Tensor x = values(small_shape(r, static_cast<size_t>(r.small(2, 4)), 0, 8), dt);
  if (r.flag()) {
    const int64_t groups = r.flag() ? r.small(1, 4) : r.param();
    if (too_big({x.size(0), groups})) return;  // an empty C divides by any groups: [N, groups] stats
    tg::Tensor y = tg::group_norm(x, groups);
    if (r.flag()) tg::sum(y).backward();
    return;
  }
  const int64_t N = r.param(), C = r.param(), HxW = r.param(), group = r.param();
  // mean and rstd are [N, group], the weight and bias gradients [C]: valid, just big.
  if (too_big({N, group}) || too_big({C})) return;
  const bool affine = r.flag();
  tg::Tensor w = affine ? values({std::max<int64_t>(std::min<int64_t>(C, 64), 0)}, dt) : tg::Tensor();
  tg::GroupNormResult res = tg::native_group_norm(x, w, w, N, C, HxW, group, 1e-5);
  if (r.flag())
    tg::native_group_norm_backward(tg::ones_like(res.output), x, res.mean, res.rstd, w, N, C, HxW, group,
                                   {r.flag(), r.flag(), r.flag()});
}

void fuzz_grid_sample(Reader& r, tg::DType dt) {
  if (r.flag()) {
    const int64_t N = r.small(0, 2);
    std::vector<int64_t> size{r.flag() ? N : r.param(), r.param(), r.param(), r.param()};
    if (too_big({size[0], size[2], size[3], 2})) return;
    tg::Tensor theta = values({N, 2, 3}, dt);
    tg::Tensor grid = tg::affine_grid(theta, size, r.flag());
    if (r.flag()) tg::affine_grid_generator_backward(tg::ones_like(grid), size, r.flag());
    return;
  }
  tg::Shape in = small_shape(r, 4, 0, 8), gs = small_shape(r, 4, 0, 8);
  gs[3] = r.flag() ? 2 : r.small(0, 3);
  if (r.flag()) gs[0] = in[0];
  tg::Tensor x = values(in, dt), grid = values(gs, dt).mul_(r.flag() ? 1e30 : 1.0);
  const int64_t mode = r.flag() ? r.small(0, 2) : r.param(), padding = r.flag() ? r.small(0, 2) : r.param();
  const bool align = r.flag();
  tg::Tensor y = tg::grid_sampler_2d(x, grid, mode, padding, align);
  if (r.flag())
    tg::grid_sampler_2d_backward(tg::ones_like(y), x, grid, mode, padding, align, {r.flag(), r.flag()});
  if (r.flag()) {  // the double backward, with a gg_grid of the grid's shape or of a fuzzed one
    tg::Tensor gg = r.flag() ? tg::ones_like(grid) : values(small_shape(r, 4, 0, 8), dt);
    tg::grid_sampler_2d_double_backward(tg::ones_like(y), x, grid, gg, mode, padding, align,
                                        {r.flag(), r.flag(), r.flag()});
  }
}

void fuzz_upsample(Reader& r, tg::DType dt) {
  tg::Tensor x = values(small_shape(r, r.flag() ? 4 : 3, 0, 8), dt);
  const bool align = r.flag();
  switch (r.byte() % 3) {
    case 0: {
      const std::array<int64_t, 2> out{r.param(), r.param()};
      if (x.dim() == 4 && too_big({x.size(0), x.size(1), out[0], out[1]})) return;
      std::optional<double> sh, sw;
      if (r.flag()) sh = r.real();
      if (r.flag()) sw = r.real();
      tg::upsample_bilinear2d(x, out, align, sh, sw);
      break;
    }
    case 1: {
      const double scale = r.real();
      if (x.dim() == 4 && std::isfinite(scale) && scale > 0 &&
          static_cast<double>(x.numel()) * scale * scale > static_cast<double>(kMaxOutput) &&
          static_cast<double>(x.size(2)) * scale < 9.2e18 && static_cast<double>(x.size(3)) * scale < 9.2e18)
        return;
      tg::interpolate(x, scale, align);
      break;
    }
    default: {
      const std::array<int64_t, 2> out{r.small(1, 8), r.small(1, 8)};
      const std::array<int64_t, 4> in{r.param(), r.param(), r.param(), r.param()};
      if (too_big({in[0], in[1], in[2], in[3]})) return;
      tg::Tensor g = values(small_shape(r, 4, 0, 8), dt);
      if (r.flag() && product_below({in[0], in[1], out[0], out[1]}, kMaxElements))
        g = values({in[0], in[1], out[0], out[1]}, dt);
      tg::upsample_bilinear2d_backward(g, out, in, align);
    }
  }
}

void fuzz_ms_deform_attn(Reader& r, tg::DType dt) {
  const int64_t bs = r.small(0, 2), heads = r.small(0, 2), channels = r.small(0, 4), levels = r.small(0, 3);
  const int64_t queries = r.small(0, 4), points = r.small(0, 3);
  std::vector<int64_t> hw, start;
  int64_t keys = 0;
  bool honest = true;
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t h = r.flag() ? r.small(1, 4) : r.param(), w = r.flag() ? r.small(1, 4) : r.param();
    hw.push_back(h), hw.push_back(w);
    start.push_back(r.flag() ? keys : r.param());
    int64_t hw_count;
    if (h <= 0 || w <= 0 || __builtin_mul_overflow(h, w, &hw_count) || __builtin_add_overflow(keys, hw_count, &keys))
      honest = false;
  }
  const int64_t num_keys = honest && keys < 512 && !r.flag() ? keys : r.small(0, 64);
  tg::Tensor value = values({bs, num_keys, heads, channels}, dt);
  tg::Tensor loc = values({bs, queries, heads, levels, points, 2}, dt).mul_(r.flag() ? 1e30 : 1.0);
  tg::Tensor attn = values({bs, queries, heads, levels, points}, dt);
  tg::Tensor shapes = levels > 0 ? tg::from_vector(hw, {levels, 2}) : tg::Tensor::empty({0, 2}, tg::DType::Int64);
  tg::Tensor st = levels > 0 ? tg::from_vector(start, {levels}) : tg::Tensor::empty({0}, tg::DType::Int64);
  if (r.flag()) {
    tg::Tensor y = tg::ms_deform_attn(value, shapes, st, loc, attn);
    if (r.flag()) tg::ms_deform_attn_backward(value, shapes, st, loc, attn, tg::ones_like(y), {r.flag(), r.flag(), r.flag()});
    if (r.flag()) {  // the double backward; each upstream gradient given, missing or misshapen
      auto upstream = [&](const tg::Tensor& like) {
        const uint8_t k = r.byte() % 3;
        return k == 0 ? tg::ones_like(like) : k == 1 ? tg::Tensor() : values(small_shape(r, static_cast<size_t>(like.dim()), 0, 4), dt);
      };
      tg::ms_deform_attn_double_backward(value, shapes, st, loc, attn, tg::ones_like(y), upstream(value),
                                         upstream(loc), upstream(attn), {r.flag(), r.flag(), r.flag(), r.flag()});
    }
  } else {
    tg::ms_deform_attn_backward(value, shapes, st, loc, attn, values({bs, queries, heads * channels}, dt),
                                {r.flag(), r.flag(), r.flag()});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const uint8_t which = r.byte();
  const tg::DType dt = r.flag() ? tg::DType::Float64 : tg::DType::Float32;
  try {
    switch (which % 5) {
      case 0: fuzz_conv(r, dt); break;
      case 1: fuzz_group_norm(r, dt); break;
      case 2: fuzz_grid_sample(r, dt); break;
      case 3: fuzz_upsample(r, dt); break;
      default: fuzz_ms_deform_attn(r, dt); break;
    }
  } catch (const tg::Error&) {
    // A refused argument: the expected outcome for most inputs.
  }
  return 0;
}
