// Bad inputs of the convolutions (shapes, groups, stride/padding/dilation, output_padding,
// the kernel API): each throws tg::Error naming the op, the argument, what was
// expected and what was given.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "test_util.h"

namespace tg {
namespace {

// ---- bad input: each names the op and the argument ----

void expect_error(const std::string& msg, std::initializer_list<const char*> pieces) {
  EXPECT_NE(msg, "<no error>");
  for (const char* p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(ConvErrors, WrongRank) {
  Tensor w = randn({4, 3, 3, 3});
  // (C, H, W) is an unbatched input (tests/test_pad.cpp); two dims are neither form
  expect_error(error_of([&] { conv2d(randn({8, 8}), w); }),
               {"conv2d", "input", "3-D (unbatched) or 4-D (batched)", "[8, 8]"});
  expect_error(error_of([&] { conv2d(randn({1, 3, 8, 8}), randn({4, 3, 3})); }), {"conv2d", "weight", "[4, 3, 3]"});
  expect_error(error_of([&] { conv1d(randn({1, 3, 8, 8}), w); }), {"conv1d", "input", "2-D (unbatched) or 3-D"});
  expect_error(error_of([&] { conv1d(randn({1, 3, 8}), w); }), {"conv1d", "weight", "3 dims"});
  expect_error(error_of([&] {
                 convolution(randn({1, 3, 8}), randn({4, 3}), Tensor(), {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution", "weight", "3, 4 or 5 dims"});
  expect_error(error_of([&] { conv3d(randn({3, 8, 8}), randn({4, 3, 3, 3, 3})); }),
               {"conv3d", "input", "4-D (unbatched) or 5-D (batched)", "[3, 8, 8]"});
}

TEST(ConvErrors, ChannelsAndGroups) {
  // C_in != groups * weight.size(1)
  expect_error(error_of([&] {
                 conv2d(randn({1, 5, 8, 8}), randn({4, 3, 3, 3}));
               }),
               {"conv2d", "input", "channels", "got 5"});
  expect_error(error_of([&] {
                 conv2d(randn({1, 6, 8, 8}), randn({4, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 2);
               }),
               {"conv2d", "2 * 2 = 4", "got 6"});
  // the transposed rule: C_in == weight.size(0)
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 3, 8, 8}), randn({4, 2, 3, 3}));
               }),
               {"conv_transpose2d", "weight.size(0) = 4", "got 3"});
  // channels not divisible by groups
  expect_error(error_of([&] {
                 conv2d(randn({1, 8, 8, 8}), randn({6, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 4);
               }),
               {"conv2d", "out_channels", "divisible by groups (4)"});
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 6, 8, 8}), randn({6, 2, 3, 3}), Tensor(), {1}, {0}, {0}, 4);
               }),
               {"conv_transpose2d", "in_channels (6)", "divisible by groups (4)"});
  expect_error(error_of([&] {
                 conv2d(randn({1, 3, 8, 8}), randn({4, 3, 3, 3}), Tensor(), {1}, {0}, {1}, 0);
               }),
               {"conv2d", "groups", "positive", "got 0"});
}

TEST(ConvErrors, StrideDilationPadding) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {0}); }), {"conv2d", "stride", "positive"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1, -1}); }), {"conv2d", "stride", "[1, -1]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {0}); }), {"conv2d", "dilation", "positive", "[0, 0]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {-1}); }), {"conv2d", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0, 1, 0, -2}); }),
               {"conv2d", "padding", "non-negative", "[0, 1, 0, -2]"});
  // negative dilation, the second dim alone; other ranks and the transposed path
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {1, -2}); }), {"conv2d", "dilation", "[1, -2]"});
  expect_error(error_of([&] { conv1d(randn({1, 3, 8}), randn({4, 3, 3}), Tensor(), {-1}); }),
               {"conv1d", "stride", "positive", "[-1]"});
  expect_error(error_of([&] {
                 conv3d(randn({1, 3, 6, 6, 6}), randn({4, 3, 3, 3, 3}), Tensor(), {1}, {0}, {1, 0, 1});
               }),
               {"conv3d", "dilation", "positive", "[1, 0, 1]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2, 0}); }),
               {"conv_transpose2d", "stride", "positive", "[2, 0]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {-1}); }),
               {"conv_transpose2d", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {1}, {0}, 1, {0}); }),
               {"conv_transpose2d", "dilation", "positive", "[0, 0]"});
}

TEST(ConvErrors, WrongNumberOfValues) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1, 1, 1}); }), {"conv2d", "stride", "1 or 2 values", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {1, 1, 1}); }), {"conv2d", "padding", "1, 2 or 4", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {1}, {0}, {1, 2, 3}); }), {"conv2d", "dilation", "got 3"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {1, 1, 1});
               }),
               {"conv_transpose2d", "output_padding", "got 3"});
  expect_error(error_of([&] { conv2d(x, w, Tensor(), {}); }), {"conv2d", "stride", "got 0 values"});
  // per rank: 4 padding values are (before, after) in 2-D, wrong in 1-D and 3-D
  Tensor x1 = randn({1, 3, 8}), w1 = randn({4, 3, 3});
  Tensor x3 = randn({1, 3, 6, 6, 6}), w3 = randn({4, 3, 3, 3, 3});
  expect_error(error_of([&] { conv1d(x1, w1, Tensor(), {1, 1}); }), {"conv1d", "stride", "1-D", "got 2 values"});
  expect_error(error_of([&] { conv1d(x1, w1, Tensor(), {1}, {1, 1, 1, 1}); }),
               {"conv1d", "padding", "1, 1 or 2", "got 4 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1}, {1, 1, 1, 1}); }),
               {"conv3d", "padding", "1, 3 or 6", "got 4 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1}, {0}, {1, 1}); }),
               {"conv3d", "dilation", "1 or 3 values", "got 2 values"});
  expect_error(error_of([&] { conv3d(x3, w3, Tensor(), {1, 2}); }), {"conv3d", "stride", "1 or 3 values", "got 2"});
  expect_error(error_of([&] {
                 conv_transpose3d(x3, randn({3, 2, 3, 3, 3}), Tensor(), {2}, {0}, {1, 1});
               }),
               {"conv_transpose3d", "output_padding", "1 or 3 values", "got 2"});
}

TEST(ConvErrors, OutputTooSmall) {
  expect_error(error_of([&] {
                 conv2d(randn({1, 3, 3, 3}), randn({4, 3, 5, 5}));
               }),
               {"conv2d", "output size is too small", "[-1, -1]"});
  expect_error(error_of([&] {
                 conv1d(randn({1, 3, 5}), randn({4, 3, 3}), Tensor(), {1}, {0}, {3});
               }),
               {"conv1d", "output size", "[-1]"});
  // a transposed convolution with padding that eats all of its output
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 1}), randn({3, 2, 1}), Tensor(), {1}, {1});
               }),
               {"conv_transpose1d", "output size", "[-1]"});
  // exactly 0 is too small too: a 4-tall kernel on 3 rows, one of two dims
  expect_error(error_of([&] { conv2d(randn({1, 3, 3, 8}), randn({4, 3, 4, 3})); }),
               {"conv2d", "output size", "[0, 6]"});
  // a window larger than the input with a stride: (3 - 4) / 2 + 1 is 1 with a division that
  // truncates, 0 with PyTorch's floor
  expect_error(error_of([&] { conv2d(randn({1, 3, 3, 8}), randn({4, 3, 4, 3}), Tensor(), {2}); }),
               {"conv2d", "output size", "[0, 3]"});
  // transposed, 0: asymmetric padding (1, 0) of a 1-long output
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 1}), randn({3, 2, 1}), Tensor(), {1}, {1, 0});
               }),
               {"conv_transpose1d", "output size", "[0]"});
  // 3-D, the middle dim only
  expect_error(error_of([&] { conv3d(randn({1, 2, 4, 2, 4}), randn({2, 2, 3, 3, 3})); }),
               {"conv3d", "output size", "[2, 0, 2]"});
  // and one more row is enough
  EXPECT_EQ(conv2d(randn({1, 3, 4, 8}), randn({4, 3, 4, 3})).shape(), (Shape{1, 4, 1, 6}));
}

// PyTorch: "Only zero batch or zero channel inputs are supported"; the spec: the input may be
// empty only in N or C. Padding would otherwise give such an input a non-empty output.
TEST(ConvErrors, EmptySpatialInput) {
  expect_error(error_of([&] { conv2d(randn({1, 3, 0, 8}), randn({4, 3, 1, 1}), Tensor(), {1}, {1}); }),
               {"conv2d", "input", "[1, 3, 0, 8]"});
  expect_error(error_of([&] { conv1d(randn({2, 3, 0}), randn({4, 3, 1}), Tensor(), {1}, {2}); }),
               {"conv1d", "input", "[2, 3, 0]"});
  expect_error(error_of([&] { conv_transpose2d(randn({1, 3, 4, 0}), randn({3, 4, 3, 3})); }),
               {"conv_transpose2d", "input", "[1, 3, 4, 0]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 2, 3, 3}), randn({1, 3, 0, 3, 3}), randn({4, 3, 1, 1, 1}), {},
                                      {1}, {1, 0, 0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "input", "[1, 3, 0, 3, 3]"});
}

TEST(ConvErrors, BiasAndDtype) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] { conv2d(x, w, randn({5})); }), {"conv2d", "bias", "[4]", "got [5]"});
  expect_error(error_of([&] { conv2d(x, w, randn({1, 4})); }), {"conv2d", "bias", "[1, 4]"});
  // transposed: out_channels = weight.size(1) * groups = 3 * 2, not weight.size(0) = 4
  expect_error(error_of([&] {
                 conv_transpose2d(randn({1, 4, 5, 5}), randn({4, 3, 3, 3}), randn({4}), {1}, {0}, {0}, 2);
               }),
               {"conv_transpose2d", "bias", "[6]", "got [4]"});
  EXPECT_EQ(conv_transpose2d(randn({1, 4, 5, 5}), randn({4, 3, 3, 3}), randn({6}), {1}, {0}, {0}, 2).shape(),
            (Shape{1, 6, 7, 7}));
  expect_error(error_of([&] { conv1d(randn({1, 3, 8}), randn({4, 3, 3}), randn({3})); }),
               {"conv1d", "bias", "[4]", "got [3]"});
  expect_error(error_of([&] { conv2d(x, w.to(DType::Float64)); }), {"conv2d", "weight", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x, w, randn({4}, DType::Float64)); }),
               {"conv2d", "bias", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x.to(DType::Float64), w); }), {"conv2d", "weight", "float64", "got float32"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}, DType::Float64));
               }),
               {"conv_transpose2d", "weight", "float32", "float64"});
  expect_error(error_of([&] { conv2d(x.to(DType::Int64), w.to(DType::Int64)); }), {"conv2d", "floating", "int64"});
}

TEST(ConvErrors, OutputPadding) {
  Tensor x = randn({1, 3, 8, 8});
  // out of range: must be smaller than stride or dilation
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {2});
               }),
               {"conv_transpose2d", "output_padding[0] = 2", "stride (2)", "dilation (1)"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {0}, {0, 1});
               }),
               {"conv_transpose2d", "output_padding[1] = 1"});
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {-1});
               }),
               {"conv_transpose2d", "output_padding", "non-negative"});
  // given without transposed
  expect_error(error_of([&] {
                 convolution(x, randn({4, 3, 3, 3}), Tensor(), {2}, {0}, {1}, false, {1}, 1);
               }),
               {"convolution", "output_padding", "only for transposed"});
  // smaller than the dilation is enough (PyTorch's rule)
  EXPECT_NO_THROW(conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {1}, {0}, {1}, 1, {2}));
  // but not equal to the larger of the two: stride 2, dilation 3 allow 2, not 3
  EXPECT_NO_THROW(conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {2}, 1, {3}));
  expect_error(error_of([&] {
                 conv_transpose2d(x, randn({3, 4, 3, 3}), Tensor(), {2}, {0}, {3}, 1, {3});
               }),
               {"conv_transpose2d", "output_padding[0] = 3", "stride (2)", "dilation (3)"});
  // other ranks
  expect_error(error_of([&] {
                 conv_transpose1d(randn({1, 3, 8}), randn({3, 2, 3}), Tensor(), {2}, {0}, {2});
               }),
               {"conv_transpose1d", "output_padding[0] = 2"});
  expect_error(error_of([&] {
                 conv_transpose3d(randn({1, 3, 4, 4, 4}), randn({3, 2, 3, 3, 3}), Tensor(), {2}, {0}, {1, 0, 2});
               }),
               {"conv_transpose3d", "output_padding[2] = 2", "stride (2)"});
  // given without transposed, in one dim of several
  expect_error(error_of([&] {
                 convolution(randn({1, 3, 4, 4, 4}), randn({2, 3, 3, 3, 3}), Tensor(), {2}, {0}, {1}, false, {0, 0, 1},
                             1);
               }),
               {"convolution", "output_padding", "only for transposed", "[0, 0, 1]"});
}

TEST(ConvErrors, KernelApiBackward) {
  Tensor x = randn({1, 3, 8, 8}), w = randn({4, 3, 3, 3});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 7, 6}), x, w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "grad_output", "[1, 4, 6, 6]", "[1, 4, 7, 6]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}), x, w, {5}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "bias_sizes", "[5]"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}, DType::Float64), x, w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "grad_output", "float64"});
  expect_error(error_of([&] {
                 convolution_backward(randn({1, 4, 6, 6}), x, w, {4}, {0}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "stride"});
  // the kernel API checks the geometry as the forward does
  const Tensor g = randn({1, 4, 6, 6});
  expect_error(error_of([&] { convolution_backward(g, randn({3, 8, 8}), w, {4}, {1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "input", "4 dims", "[3, 8, 8]"});
  expect_error(error_of([&] {
                 convolution_backward(g, randn({1, 5, 8, 8}), w, {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "input", "channels", "got 5"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1}, {-1}, {1}, false, {0}, 1); }),
               {"convolution_backward", "padding", "non-negative", "[-1]"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1}, {0}, {0}, false, {0}, 1); }),
               {"convolution_backward", "dilation", "positive"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {1, 1, 1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "stride", "got 3 values"});
  expect_error(error_of([&] { convolution_backward(g, x, w, {4}, {2}, {0}, {1}, false, {1}, 1); }),
               {"convolution_backward", "output_padding", "only for transposed"});
  expect_error(error_of([&] {
                 convolution_backward(g, x, randn({3, 3, 3, 3}), {3}, {1}, {0}, {1}, false, {0}, 2);
               }),
               {"convolution_backward", "out_channels", "divisible by groups (2)"});
  expect_error(error_of([&] {
                 convolution_backward(g, x, w.to(DType::Float64), {4}, {1}, {0}, {1}, false, {0}, 1);
               }),
               {"convolution_backward", "weight", "float32", "float64"});
  expect_error(error_of([&] { convolution_backward(randn({1, 4, 1, 1}), randn({1, 3, 3, 3}), randn({4, 3, 4, 4}),
                                                   {4}, {1}, {0}, {1}, false, {0}, 1); }),
               {"convolution_backward", "output size", "[0, 0]"});
  // transposed: the input rule, the bias rule and output_padding's range
  const Tensor xt = randn({1, 4, 5, 5}), wt = randn({4, 3, 3, 3}), gt = randn({1, 6, 7, 7});
  EXPECT_NO_THROW(convolution_backward(gt, xt, wt, {6}, {1}, {0}, {1}, true, {0}, 2));
  expect_error(error_of([&] { convolution_backward(gt, xt, wt, {4}, {1}, {0}, {1}, true, {0}, 2); }),
               {"convolution_backward", "bias_sizes", "[6]", "[4]"});
  expect_error(error_of([&] {
                 convolution_backward(gt, randn({1, 3, 5, 5}), wt, {6}, {1}, {0}, {1}, true, {0}, 2);
               }),
               {"convolution_backward", "weight.size(0) = 4", "got 3"});
  expect_error(error_of([&] { convolution_backward(gt, xt, wt, {6}, {1}, {0}, {1}, true, {1}, 2); }),
               {"convolution_backward", "output_padding[0] = 1", "stride (1)", "dilation (1)"});
}


}  // namespace
}  // namespace tg
