// Sizes chosen to overflow int64 arithmetic (2^32 * 2^32, 2^62 * 4, a zero beside 2^40s): each
// must be a tg::Error naming the op and the argument, never a crash, a std::bad_alloc /
// std::length_error, or a silently wrong numel. Nothing here allocates much: the point is that
// every size is refused before allocation.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include <tapegrad/tapegrad.h>

#include "io_test_util.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_error_with;
using testing::fresh_temp_dir;
using testing::write_bytes;

constexpr int64_t k2_31 = int64_t(1) << 31;
constexpr int64_t k2_32 = int64_t(1) << 32;
constexpr int64_t k2_40 = int64_t(1) << 40;
constexpr int64_t k2_62 = int64_t(1) << 62;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// ---- the shared helper ----

TEST(HostileSizes, CheckedHelpersRefuseOverflowAndNameTheArgument) {
  EXPECT_EQ(checked_mul(k2_31, k2_31, "op", "a * b"), k2_62);
  EXPECT_EQ(checked_add(kMax - 1, 1, "op", "a + b"), kMax);
  EXPECT_EQ(checked_sub(-kMax, 1, "op", "a - b"), std::numeric_limits<int64_t>::min());
  expect_error_with([] { checked_mul(k2_32, k2_32, "myop", "H * W"); },
                    {"myop: expected H * W to fit in int64", "4294967296 * 4294967296"});
  expect_error_with([] { checked_add(kMax, 1, "myop", "the sum"); }, {"myop: expected the sum", "overflows"});
  expect_error_with([] { checked_sub(std::numeric_limits<int64_t>::min(), 1, "myop", "x"); }, {"myop", "x"});

  EXPECT_EQ(checked_numel({2, 3, 4}, "op", "shape"), 24);
  EXPECT_EQ(checked_numel({}, "op", "shape"), 1);
  EXPECT_EQ(checked_numel({0, k2_31, k2_31}, "op", "shape"), 0);  // nonzero product 2^62 fits
  expect_error_with([] { checked_numel({k2_32, k2_32}, "myop", "the output"); },
                    {"myop: expected the product of the sizes of the output [4294967296, 4294967296]"});
  // A zero makes numel 0, but the nonzero product is still a stride: refused as PyTorch does.
  expect_error_with([] { checked_numel({0, k2_40, k2_40}, "myop", "shape"); }, {"myop", "nonzero sizes of shape"});
  expect_error_with([] { checked_numel({2, -1}, "myop", "shape"); }, {"myop: expected non-negative sizes in shape"});
}

// ---- item 2: ms_deform_attn ----

struct MsdaInputs {
  Tensor value, shapes, start, loc, attn;
};

MsdaInputs msda_inputs(std::vector<int64_t> hw, std::vector<int64_t> start, int64_t keys) {
  const int64_t L = static_cast<int64_t>(start.size());
  return {zeros({1, keys, 1, 2}), from_vector(hw, {L, 2}), from_vector(start, {L}), zeros({1, 1, 1, L, 1, 2}),
          zeros({1, 1, 1, L, 1})};
}

TEST(HostileSizes, MsDeformAttnRefusesSpatialShapesThatOverflow) {
  // [[2^32, 2^32], [2, 2]]: H * W wrapped to 0, the sum to 4 = num_keys, and the kernel read
  // past value (a segfault).
  const MsdaInputs a = msda_inputs({k2_32, k2_32, 2, 2}, {0, 0}, 4);
  expect_error_with([&] { ms_deform_attn(a.value, a.shapes, a.start, a.loc, a.attn); },
                    {"ms_deform_attn: expected H * W of a level of spatial_shapes to fit in int64",
                     "4294967296 * 4294967296"});
  // The kernel API goes through the same validation.
  const Tensor grad_out = zeros({1, 1, 2});
  expect_error_with([&] { ms_deform_attn_backward(a.value, a.shapes, a.start, a.loc, a.attn, grad_out); },
                    {"ms_deform_attn_backward: expected H * W of a level of spatial_shapes"});
  expect_error_with(
      [&] { ms_deform_attn_backward(a.value, a.shapes, a.start, a.loc, a.attn, grad_out, {false, true, false}); },
      {"ms_deform_attn_backward", "spatial_shapes"});

  // Each level fits, the sum does not.
  const MsdaInputs b = msda_inputs({k2_62, 1, k2_62, 1}, {0, k2_62}, 4);
  expect_error_with([&] { ms_deform_attn(b.value, b.shapes, b.start, b.loc, b.attn); },
                    {"ms_deform_attn: expected the number of keys of spatial_shapes", "overflows"});

  // Still a working op: the same call with honest sizes runs.
  const MsdaInputs ok = msda_inputs({1, 1, 2, 2}, {0, 1}, 5);
  EXPECT_EQ(ms_deform_attn(ok.value, ok.shapes, ok.start, ok.loc, ok.attn).shape(), (Shape{1, 1, 2}));
}

// ---- item 3: group norm ----

TEST(HostileSizes, NativeGroupNormRefusesNCHxWThatOverflows) {
  // N = 2^62, C = 4: N * C * HxW wrapped to 0 and matched an empty input; mean and rstd came
  // back as [2^62, 2] with numel -2^63.
  const Tensor x = zeros({0, 4});
  expect_error_with([&] { native_group_norm(x, Tensor(), Tensor(), k2_62, 4, 1, 2, 1e-5); },
                    {"native_group_norm: expected the product of the sizes of (N, C, HxW)", "[4611686018427387904, 4, 1]"});
  expect_error_with([&] { native_group_norm(x, Tensor(), Tensor(), 1, 4, k2_62, 2, 1e-5); },
                    {"native_group_norm: expected the product of the sizes of (N, C, HxW)", "fit in int64"});
  const Tensor empty_stats = zeros({0});
  expect_error_with(
      [&] { native_group_norm_backward(x, x, empty_stats, empty_stats, Tensor(), k2_62, 4, 1, 2); },
      {"native_group_norm_backward: expected the product of the sizes of (N, C, HxW)"});
  // Found by fuzz_op_args: N = 0 empties the input, but C * HxW still indexes the kernels.
  const int64_t max64 = std::numeric_limits<int64_t>::max();
  expect_error_with(
      [&] { native_group_norm_backward(x, x, empty_stats, empty_stats, Tensor(), 0, 4, max64, 2); },
      {"native_group_norm_backward: expected the product of the nonzero sizes of (N, C, HxW)"});
  GroupNormGrads one_channel =
      native_group_norm_backward(zeros({0, 1}), zeros({0, 1}), empty_stats, empty_stats, Tensor(), 0, 1, max64, 1);
  EXPECT_EQ(one_channel.grad_input.numel(), 0);
  // C = 0 makes N * C * HxW = 0 honestly, but mean and rstd would be [N, group] = [2^62, 4].
  expect_error_with([&] { native_group_norm(zeros({0}), Tensor(), Tensor(), k2_62, 0, 1, 4, 1e-5); },
                    {"native_group_norm: expected N * group", "to fit in int64"});
  // The honest empty case still works.
  GroupNormResult r = native_group_norm(x, Tensor(), Tensor(), 0, 4, 1, 2, 1e-5);
  EXPECT_EQ(r.mean.shape(), (Shape{0, 2}));
  EXPECT_EQ(r.mean.numel(), 0);
}

// ---- item 4: tensors, views and factories ----

TEST(HostileSizes, FactoriesRefuseShapesWhoseProductOverflows) {
  expect_error_with([] { Tensor::empty({k2_32, k2_32}); }, {"empty: expected the product of the sizes of shape"});
  expect_error_with([] { zeros({k2_32, k2_32}); }, {"empty", "[4294967296, 4294967296]"});
  expect_error_with([] { randn({k2_62, 4}); }, {"empty", "shape", "fit in int64"});
  expect_error_with([] { ones({k2_31, k2_31, 4}, DType::Float64); }, {"empty", "shape"});
  // A zero beside huge dims: numel 0, but contiguous_strides would overflow (UBSan).
  expect_error_with([] { Tensor::empty({0, k2_40 - 1, k2_40 - 1}); }, {"empty", "nonzero sizes of shape"});
  expect_error_with([] { zeros({k2_40, 0, k2_40}); }, {"empty", "nonzero sizes of shape"});
  // A zero beside sizes whose product fits is an ordinary empty tensor.
  Tensor e = Tensor::empty({0, k2_31, k2_31});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.strides(), (Shape{k2_62, k2_31, 1}));
  expect_error_with([] { arange(0, 1e30); }, {"arange: expected the number of elements", "fit in int64"});
}

TEST(HostileSizes, AllocationBeyondInt64BytesIsAnError) {
  // 2^61 float32 elements fit in int64, their 2^63 bytes do not.
  expect_error_with([] { Tensor::empty({int64_t(1) << 61}); },
                    {"empty: expected shape [2305843009213693952] of float32 to need at most 2^63 - 1 bytes"});
  expect_error_with([] { Tensor::empty({int64_t(1) << 60}, DType::Float64); }, {"empty", "bytes"});
}

TEST(HostileSizes, AllocationTheAllocatorCannotServeIsAnError) {
  // 2^58 floats = 2^60 bytes: a valid size no machine maps (beyond the 2^47-byte address space
  // even with overcommit), so the allocator fails and the std::bad_alloc becomes an Error.
  expect_error_with([] { Tensor::empty({int64_t(1) << 58}); },
                    {"empty: out of memory allocating 1152921504606846976 bytes for shape [288230376151711744]"});
  // 2^40 floats (4 TiB): refused by any allocator unless overcommit is unconditional.
  std::ifstream mode_file("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  if (!(mode_file >> mode) || mode == 1) GTEST_SKIP() << "overcommit_memory is 1: a 4 TiB allocation may succeed";
  expect_error_with([] { zeros({k2_40}); }, {"empty: out of memory allocating 4398046511104 bytes for shape [1099511627776]"});
}

TEST(HostileSizes, ViewsRefuseShapesWhoseProductOverflows) {
  const Tensor x = zeros({0});
  expect_error_with([&] { x.view({0, k2_62, k2_62}); }, {"view", "requested shape"});
  expect_error_with([&] { x.view({k2_62, k2_62, 0}); }, {"view: expected the product of the requested sizes"});
  expect_error_with([&] { x.reshape({k2_40, 0, k2_40}); }, {"reshape", "fit in int64"});
  expect_error_with([&] { zeros({4}).view({k2_62, 4, -1}); }, {"view", "requested sizes"});
  // expand allocates nothing, but numel() of the result must still fit.
  const Tensor one = ones({1, 1});
  expect_error_with([&] { one.expand({k2_32, k2_32}); }, {"expand: expected the product of the sizes of the target shape"});
  EXPECT_EQ(one.expand({k2_31, k2_31}).numel(), k2_62);  // large but countable: a valid view
}

// ---- item 4: loaders (a zero dim beside huge ones) ----

TEST(HostileSizes, IdxRefusesDimsWhoseProductOverflows) {
  const std::string dir = fresh_temp_dir("hostile_idx");
  // 00000803 00000000 fffc0000 e7ffffff: 3 dims (0, 4294705152, 3892314111), no data.
  const std::string bytes("\x00\x00\x08\x03\x00\x00\x00\x00\xff\xfc\x00\x00\xe7\xff\xff\xff", 16);
  write_bytes(dir + "/zero_beside_huge.idx", bytes);
  expect_error_with([&] { read_idx(dir + "/zero_beside_huge.idx"); },
                    {"read_idx", "zero_beside_huge.idx: dims", "[0, 4294705152, 3892314111]", "fit in int64"});
  expect_error_with([&] { load_idx_images(dir + "/zero_beside_huge.idx"); }, {"read_idx", "dims"});
}

TEST(HostileSizes, NpyRefusesShapeWhoseProductOverflows) {
  const std::string dir = fresh_temp_dir("hostile_npy");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1099511627775, 1099511627775), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string file = "\x93NUMPY\x01";
  file.push_back('\0');
  file.push_back(static_cast<char>(header.size() & 0xff));
  file.push_back(static_cast<char>(header.size() >> 8));
  write_bytes(dir + "/zero_beside_huge.npy", file + header);
  expect_error_with([&] { load_npy(dir + "/zero_beside_huge.npy"); },
                    {"load_npy", "zero_beside_huge.npy: shape", "[0, 1099511627775, 1099511627775]", "fit in int64"});
}

TEST(HostileSizes, SafetensorsRefusesShapeWhoseProductOverflows) {
  const std::string dir = fresh_temp_dir("hostile_st");
  const std::string header =
      R"({"x":{"dtype":"F32","shape":[0,1099511627776,1099511627776,1099511627776],"data_offsets":[0,0]}})";
  std::string file;
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  write_bytes(dir + "/zero_beside_huge.safetensors", file + header);
  expect_error_with([&] { load_safetensors(dir + "/zero_beside_huge.safetensors"); },
                    {"load_safetensors", "tensor \"x\"", "nonzero sizes of shape", "fit in int64"});
}

// ---- item 4: the operators' output sizes ----

TEST(HostileSizes, AffineGridRefusesSizeWhoseGridOverflows) {
  const Tensor theta = zeros({1, 2, 3});
  expect_error_with([&] { affine_grid(theta, {1, 1, k2_32, k2_32}); },
                    {"affine_grid: expected the product of the sizes of the grid shape [N, H, W, 2] of size",
                     "[1, 4294967296, 4294967296, 2]"});
  expect_error_with([&] { affine_grid_generator_backward(zeros({1, 2, 2, 2}), {1, 1, k2_32, k2_32}, false); },
                    {"affine_grid_generator_backward", "size"});
  // N = 0: an empty grid whatever H and W say; the kernel's row tables of 2^40 entries are not
  // built (found by fuzz/fuzz_op_args.cpp: std::bad_alloc ending in std::terminate).
  EXPECT_EQ(affine_grid(zeros({0, 2, 3}), {0, 1, k2_40, 4}).shape(), (Shape{0, k2_40, 4, 2}));
  EXPECT_EQ(affine_grid_generator_backward(zeros({0, k2_40, 4, 2}), {0, 1, k2_40, 4}, true).shape(),
            (Shape{0, 2, 3}));
}

TEST(HostileSizes, UpsampleRefusesOutputAndInputSizesThatOverflow) {
  const Tensor x = zeros({4, 4, 1, 1});
  expect_error_with([&] { upsample_bilinear2d(x, {k2_31, k2_31}, false); },
                    {"upsample_bilinear2d: expected the product of the sizes of the output shape (N, C, output_size)",
                     "[4, 4, 2147483648, 2147483648]"});
  expect_error_with([&] { upsample_bilinear2d(x, {k2_62, 4}, true); }, {"upsample_bilinear2d", "output shape"});
  expect_error_with([&] { interpolate(x, std::array<int64_t, 2>{k2_31, k2_31}); }, {"upsample_bilinear2d", "output"});
  expect_error_with([&] { upsample_bilinear2d_backward(zeros({4, 4, 2, 2}), {2, 2}, {4, 4, k2_31, k2_31}, false); },
                    {"upsample_bilinear2d_backward: expected the product of the sizes of input_size",
                     "[4, 4, 2147483648, 2147483648]"});
}

TEST(HostileSizes, InterpolateRefusesScaleFactorsOutOfRange) {
  const Tensor x = zeros({1, 1, 2, 2});
  expect_error_with([&] { interpolate(x, 1e30); }, {"interpolate: expected scale_factor * input size to fit in int64"});
  expect_error_with([&] { interpolate(x, std::nan("")); }, {"interpolate: expected scale_factor to be a positive finite"});
  expect_error_with([&] { interpolate(x, INFINITY); }, {"interpolate", "scale_factor"});
  expect_error_with([&] { interpolate(x, -2.0); }, {"interpolate", "scale_factor"});
  // Fits in int64 but not in any output: refused by the output shape check, before allocation.
  expect_error_with([&] { interpolate(x, 1e18); }, {"upsample_bilinear2d", "output shape"});
}

TEST(HostileSizes, GridSampleRefusesOutputThatOverflowsBeforeCopying) {
  // Expanded views: 2^32 channels and a 2^16 x 2^16 grid with no memory behind them.
  const Tensor input = zeros({1, 1, 1, 1}).expand({1, k2_32, 1, 1});
  const Tensor grid = zeros({1, 1, 1, 2}).expand({1, 1 << 16, 1 << 16, 2});
  expect_error_with([&] { grid_sample(input, grid); },
                    {"grid_sample: expected the product of the sizes of the output shape [N, C, Ho, Wo]"});
  expect_error_with([&] { grid_sampler_2d_backward(zeros({1, 1, 1, 1}), input, grid, 0, 0, false); },
                    {"grid_sampler_2d_backward", "output shape"});
}

TEST(HostileSizes, ConvRefusesPaddingDilationStrideThatOverflow) {
  const Tensor x = zeros({1, 1, 5, 5}), w = zeros({1, 1, 3, 3});
  expect_error_with([&] { conv2d(x, w, Tensor(), {1}, {kMax}); },
                    {"conv2d: expected input size + padding to fit in int64"});
  expect_error_with([&] { conv2d(x, w, Tensor(), {1}, {1}, {k2_62}); },
                    {"conv2d: expected dilation * (kernel size - 1) to fit in int64", "4611686018427387904 * 2"});
  // Padding that fits but makes an output of 2^64 elements.
  expect_error_with([&] { conv2d(x, w, Tensor(), {1}, {k2_31}); },
                    {"conv2d: expected the product of the sizes of the output shape"});
  expect_error_with([&] { conv_transpose2d(x, w, Tensor(), {k2_62}); },
                    {"conv_transpose2d: expected (input size - 1) * stride to fit in int64"});
  expect_error_with([&] { conv_transpose2d(x, w, Tensor(), {1}, {0}, {0}, 1, {k2_62}); },
                    {"conv_transpose2d: expected dilation * (kernel size - 1)"});
  // groups * weight.size(1) wrapped to 0 and matched an empty input.
  expect_error_with([&] { conv2d(zeros({1, 0, 5, 5}), zeros({0, 4, 3, 3}), Tensor(), {1}, {0}, {1}, k2_62); },
                    {"conv2d: expected groups * weight.size(1) to fit in int64"});
  expect_error_with(
      [&] { convolution(zeros({1, 0, 5, 5}), zeros({0, 4, 3, 3}), Tensor(), {1}, {0}, {1}, true, {0}, k2_62); },
      {"convolution", "out_channels (weight.size(1) * groups)"});
  // The kernel API goes through the same checks.
  expect_error_with(
      [&] { convolution_backward(zeros({1, 1, 3, 3}), x, w, {}, {1}, {k2_62 + k2_62 / 2}, {1}, false, {0}, 1); },
      {"convolution_backward: expected input size + padding"});
}

TEST(HostileSizes, ConvWithHugeStrideAndOneOutputIsComputed) {
  // stride 2^62 on a 5x5 input with a 3x3 kernel: one window, as PyTorch computes it. It used
  // to end in std::length_error (a box of 2^62 stride phases).
  const Tensor x = arange(0, 25, 1, DType::Float32).view({1, 1, 5, 5});
  const Tensor w = ones({1, 1, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), {k2_62});
  ASSERT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(y.item<float>(), 0 + 1 + 2 + 5 + 6 + 7 + 10 + 11 + 12);
  // Same for a transposed convolution of one input position, and a dilation of a 1-tap kernel.
  Tensor yt = conv_transpose2d(ones({1, 1, 1, 1}), w, Tensor(), {k2_62});
  EXPECT_EQ(yt.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(yt.to_vector<float>(), std::vector<float>(9, 1.0f));
  Tensor yd = conv2d(x, ones({1, 1, 1, 1}), Tensor(), {1}, {0}, {k2_62});
  EXPECT_TRUE(same_bits(yd, x));
  // Gradients through the same geometry.
  Tensor xg = x.detach().requires_grad_();
  conv2d(xg, w, Tensor(), {k2_62}).backward(ones({1, 1, 1, 1}));
  std::vector<float> g = xg.grad().to_vector<float>();
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[12], 1.0f);
  EXPECT_EQ(g[3], 0.0f);
}

TEST(HostileSizes, ConvRefusesWindowsThatSpanMostlyPadding) {
  // Padding 2^40 and stride 2^40: three outputs, but the kernels would pad the image to 2^41
  // positions per channel. Refused with the arguments named rather than exhausting memory.
  expect_error_with([&] { conv1d(zeros({1, 1, 5}), zeros({1, 1, 1}), Tensor(), {k2_40}, {k2_40}); },
                    {"conv1d: stride [1099511627776], padding [1099511627776]", "not supported"});
}

TEST(HostileSizes, PoolingRefusesSizesThatOverflow) {
  const Tensor x = zeros({1, 1, 4, 4});
  // PyTorch's int arguments: below 2^31 each (so dilation * (kernel_size - 1) cannot overflow)
  expect_error_with([&] { max_pool2d(x, {k2_62}, {1}, {0}, {3}); },
                    {"max_pool2d: expected kernel_size below 2^31, got [4611686018427387904, 4611686018427387904]"});
  expect_error_with([&] { avg_pool2d(x, {kMax}, {1}, {k2_62 - 1}); }, {"avg_pool2d: expected kernel_size below 2^31"});
  // an input of 2^63 - 1 rows (expanded): its padded extent overflows
  const Tensor tall = zeros({1, 1, 1, 1}).expand({1, 1, kMax, 1});
  expect_error_with([&] { avg_pool2d(tall, {3, 1}, {1}, {1, 0}); },
                    {"avg_pool2d: expected input size + 2 * padding to fit in int64"});
  expect_error_with([&] { adaptive_avg_pool2d(x, {k2_32, k2_32}); },
                    {"adaptive_avg_pool2d: expected the product of the sizes of the output shape"});
  const Tensor g = ones({1, 1, 1, 1}).expand({k2_31, k2_31, 1, 1});
  expect_error_with([&] { adaptive_avg_pool2d_backward(g, {k2_31, k2_31, 2, 2}); },
                    {"adaptive_avg_pool2d_backward: expected the product of the sizes of the input size"});
}

}  // namespace
}  // namespace tg
