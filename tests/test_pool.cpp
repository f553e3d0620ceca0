// Pooling against PyTorch (tools/fixtures/pool.py): max (indices, ties, NaN, dilation,
// ceil_mode), average (count_include_pad, ceil_mode, divisor_override), adaptive (windows that
// do not divide the input, more outputs than inputs), 3-D inputs; the kernel API backward;
// strided inputs; the same bits at 1 and 2 threads; the modules; every bad input.
#include <gtest/gtest.h>

#include "golden.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::GoldenCase;
using testing::load_golden_cases;

IntList list(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

std::optional<int64_t> optional_divisor(const nlohmann::json& j) {
  return j.is_null() ? std::nullopt : std::optional<int64_t>(j.get<int64_t>());
}

// Runs the case's op on x (recording), and its kernel API backward for grad_output.
struct PoolRun {
  Tensor output, indices, kernel_api_grad;
};

PoolRun run_case(const GoldenCase& c, const Tensor& x, const Tensor& grad_output) {
  const auto& j = c.json;
  const std::string op = j["op"];
  PoolRun r;
  if (op == "max_pool2d") {
    ValuesIndices v = max_pool2d_with_indices(x, list(j["kernel_size"]), list(j["stride"]), list(j["padding"]),
                                              list(j["dilation"]), j["ceil_mode"]);
    r.output = v.values, r.indices = v.indices;
    r.kernel_api_grad = max_pool2d_with_indices_backward(grad_output, x.shape(), v.indices);
  } else if (op == "avg_pool2d") {
    r.output = avg_pool2d(x, list(j["kernel_size"]), list(j["stride"]), list(j["padding"]), j["ceil_mode"],
                          j["count_include_pad"], optional_divisor(j["divisor_override"]));
    r.kernel_api_grad =
        avg_pool2d_backward(grad_output, x.shape(), list(j["kernel_size"]), list(j["stride"]), list(j["padding"]),
                            j["ceil_mode"], j["count_include_pad"], optional_divisor(j["divisor_override"]));
  } else {
    r.output = adaptive_avg_pool2d(x, list(j["output_size"]));
    r.kernel_api_grad = adaptive_avg_pool2d_backward(grad_output, x.shape());
  }
  return r;
}

TEST(Pool, MatchesPyTorchThroughTheTapeAndTheKernelApi) {
  auto cases = load_golden_cases("pool");
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    // The fixture's tolerance: 0 for max pooling (it selects an element); for the averages an
    // ulp or so in float32 (we sum windows in double, aten in float), 1e-12 in float64.
    const double rtol = c.json["tolerance"]["rtol"], atol = c.json["tolerance"]["atol"];
    Tensor x = c.tensor("input").requires_grad_();
    Tensor g = c.tensor("grad_output");
    PoolRun r = run_case(c, x, g);
    EXPECT_EQ(r.output.dtype(), c.dtype());
    expect_close(r.output, c.tensor("output"), rtol, atol, "output");
    if (c.has("indices")) {
      ASSERT_EQ(r.indices.shape(), c.tensor("indices").shape());
      EXPECT_EQ(r.indices.to_vector<int64_t>(), c.tensor("indices").to_vector<int64_t>()) << "indices";
    }
    r.output.backward(g);
    expect_close(x.grad(), c.tensor("grad_input"), rtol, atol, "grad_input (tape)");
    expect_close(r.kernel_api_grad, c.tensor("grad_input"), rtol, atol, "grad_input (kernel API)");
  }
}

TEST(Pool, NaNWinsAndTiesGoToTheFirstMaximum) {
  // One plane, one 2x2 window each: [1, 3; 3, 2] has its max 3 twice; [NaN, 5; 7, NaN] two NaNs.
  const double nan = std::nan("");
  Tensor x = from_vector(std::vector<double>{1, 3, nan, 5, 3, 2, 7, nan}, {1, 2, 4}).requires_grad_();
  ValuesIndices v = max_pool2d_with_indices(x, {2});
  EXPECT_EQ(v.values.to_vector<double>()[0], 3);
  EXPECT_TRUE(std::isnan(v.values.to_vector<double>()[1]));
  // Row-major positions in the 2x4 plane: the first 3 is at 1 (not 4); the last NaN at 7.
  EXPECT_EQ(v.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 7}));
  v.values.backward(from_vector(std::vector<double>{10, 20}, {1, 1, 2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 10, 0, 0, 0, 0, 0, 20}));
}

TEST(Pool, StridedInputsGiveTheContiguousResult) {
  manual_seed(3);
  Tensor nhwc = randn({2, 9, 8, 3});
  Tensor view = nhwc.permute({0, 3, 1, 2});  // (N, C, H, W) view of channels-last memory
  Tensor dense = view.contiguous();
  EXPECT_TRUE(same_bits(max_pool2d(view, {3}, {2}, {1}), max_pool2d(dense, {3}, {2}, {1})));
  EXPECT_TRUE(same_bits(avg_pool2d(view, {3}, {2}, {1}, true, false), avg_pool2d(dense, {3}, {2}, {1}, true, false)));
  EXPECT_TRUE(same_bits(adaptive_avg_pool2d(view, {5, 3}), adaptive_avg_pool2d(dense, {5, 3})));
}

TEST(Pool, SameBitsAtOneAndTwoThreads) {
  manual_seed(4);
  // Large enough for the kernels to go parallel (above kParallelGrain), with overlapping
  // windows so that backward adds several contributions per input.
  Tensor x = randn({4, 16, 40, 36});
  auto all = [&] {
    std::vector<Tensor> out;
    for (int which = 0; which < 3; ++which) {
      Tensor xi = x.detach().requires_grad_();
      Tensor y = which == 0   ? max_pool2d(xi, {3}, {2}, {1}, {1}, true)
                 : which == 1 ? avg_pool2d(xi, {3}, {2}, {1}, true, false)
                              : adaptive_avg_pool2d(xi, {7, 11});
      sum(mul(y, y)).backward();
      out.push_back(y.detach());
      out.push_back(xi.grad());
    }
    return out;
  };
  const int before = num_threads();
  set_num_threads(1);
  std::vector<Tensor> one = all();
  set_num_threads(2);
  std::vector<Tensor> two = all();
  set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], two[i])) << "result " << i;
}

TEST(Pool, ModulesForwardToTheFunctionalOps) {
  manual_seed(5);
  Tensor x = randn({2, 3, 9, 9});
  MaxPool2d max_layer({3}, {2}, {1}, {1}, true);
  AvgPool2d avg_layer({2}, {}, {0}, false, true, 3);
  AdaptiveAvgPool2d adaptive_layer({4, 2});
  EXPECT_TRUE(same_bits(max_layer.forward(x), max_pool2d(x, {3}, {2}, {1}, {1}, true)));
  EXPECT_TRUE(same_bits(avg_layer.forward(x), avg_pool2d(x, {2}, {}, {0}, false, true, 3)));
  EXPECT_TRUE(same_bits(adaptive_layer.forward(x), adaptive_avg_pool2d(x, {4, 2})));
  EXPECT_EQ(max_layer.forward(x).shape(), (Shape{2, 3, 5, 5}));
  EXPECT_EQ(max_layer.num_parameters(), 0);
  EXPECT_EQ(avg_layer.name(), "AvgPool2d");
}

TEST(Pool, ModulesTakePlainIntsAsPyTorchDoes) {
  manual_seed(6);
  Tensor x = randn({2, 3, 9, 9});
  MaxPool2d max_int(3, 2, 1), max_list({3}, {2}, {1}), max_braces({3, 3});
  AvgPool2d avg_int(2), avg_list({2, 2});
  AdaptiveAvgPool2d adaptive_int(4), adaptive_list({4, 4});
  EXPECT_TRUE(same_bits(max_int.forward(x), max_list.forward(x)));
  EXPECT_TRUE(same_bits(MaxPool2d(3).forward(x), max_braces.forward(x)));
  EXPECT_TRUE(same_bits(avg_int.forward(x), avg_list.forward(x)));
  EXPECT_TRUE(same_bits(adaptive_int.forward(x), adaptive_list.forward(x)));
  EXPECT_EQ(max_int.stride, (IntList{2}));
  EXPECT_TRUE(MaxPool2d(2).stride.empty());  // stride {} still means the kernel size
}

TEST(Pool, RejectsBadInputNamingOpArgumentExpectedAndActual) {
  Tensor x = zeros({1, 2, 6, 6});
  EXPECT_EQ(error_of([&] { max_pool2d(zeros({6, 6}), {2}); }),
            "max_pool2d: expected input to have 3 (C, H, W) or 4 (N, C, H, W) dims, got [6, 6]");
  EXPECT_EQ(error_of([&] { avg_pool2d(zeros({1, 1, 1, 6, 6}), {2}); }),
            "avg_pool2d: expected input to have 3 (C, H, W) or 4 (N, C, H, W) dims, got [1, 1, 1, 6, 6]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool2d(zeros({2, 0, 6}), {2}); }),
            "adaptive_avg_pool2d: expected input with non-zero C, H and W, got [2, 0, 6]");
  EXPECT_EQ(error_of([&] { max_pool2d(zeros({1, 2, 6, 6}, DType::Int64), {2}); }),
            "max_pool2d: expected input to be floating, got int64");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2, 2, 2}); }),
            "max_pool2d: expected kernel_size to have 1 or 2 values, got 3 values [2, 2, 2]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {}); }),
            "max_pool2d: expected kernel_size to have 1 or 2 values, got 0 values []");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2}, {1, 1, 1}); }),
            "max_pool2d: expected stride to have 0, 1 or 2 values, got 3 values [1, 1, 1]");
  EXPECT_EQ(error_of([&] { avg_pool2d(x, {2}, {}, {0, 0, 0}); }),
            "avg_pool2d: expected padding to have 1 or 2 values, got 3 values [0, 0, 0]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2}, {}, {0}, {}); }),
            "max_pool2d: expected dilation to have 1 or 2 values, got 0 values []");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {0, 2}); }), "max_pool2d: expected kernel_size to be positive, got [0, 2]");
  EXPECT_EQ(error_of([&] { avg_pool2d(x, {2}, {2, -1}); }), "avg_pool2d: expected stride to be positive, got [2, -1]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2}, {2}, {0}, {0}); }),
            "max_pool2d: expected dilation to be positive, got [0, 0]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2}, {2}, {-1}); }),
            "max_pool2d: expected padding to be non-negative, got [-1, -1]");
  EXPECT_EQ(error_of([&] { avg_pool2d(x, {3}, {1}, {1, 2}); }),
            "avg_pool2d: expected padding to be at most half the kernel size, got padding [1, 2] with kernel_size "
            "[3, 3]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {7}); }),
            "max_pool2d: output size is too small: input [1, 2, 6, 6] with kernel_size [7, 7], stride [7, 7], "
            "padding [0, 0], dilation [1, 1], ceil_mode false gives [0, 0]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {3}, {1}, {0}, {3}); }),
            "max_pool2d: output size is too small: input [1, 2, 6, 6] with kernel_size [3, 3], stride [1, 1], "
            "padding [0, 0], dilation [3, 3], ceil_mode false gives [0, 0]");
  EXPECT_EQ(error_of([&] { avg_pool2d(x, {2}, {}, {0}, false, true, 0); }),
            "avg_pool2d: expected divisor_override to be non-zero, got 0");
  // PyTorch's int arguments: a kernel of [2^32, 2^32] (padding 2^31 allowed) gave an average's
  // divisor that overflowed to inf, [2^62, 2] one of the wrong sign
  const int64_t big = int64_t(1) << 31;
  EXPECT_EQ(error_of([&] { avg_pool2d(x, {2 * big, 2 * big}, {1}, {big, big}, false, true); }),
            "avg_pool2d: expected kernel_size below 2^31, got [4294967296, 4294967296]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {2}, {big}); }),
            "max_pool2d: expected stride below 2^31, got [2147483648, 2147483648]");
  EXPECT_EQ(error_of([&] { max_pool2d(x, {3}, {1}, {1}, {big}); }),
            "max_pool2d: expected dilation below 2^31, got [2147483648, 2147483648]");
  const Tensor widest = avg_pool2d(ones({1, 2, 6, 6}), {big - 1}, {1}, {big / 2 - 1}, false, true);
  EXPECT_EQ(widest.shape(), (Shape{1, 2, 6, 6}));  // each window: the 36 ones over (2^31 - 1)^2
  EXPECT_EQ(widest.to_vector<float>()[0], float(36.0 / (double(big - 1) * double(big - 1))));
  EXPECT_EQ(error_of([&] { adaptive_avg_pool2d(x, {2, 2, 2}); }),
            "adaptive_avg_pool2d: expected output_size to have 1 or 2 values, got 3 values [2, 2, 2]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool2d(x, {3, 0}); }),
            "adaptive_avg_pool2d: expected output_size to be positive, got [3, 0]");

  // The kernel API checks what a user may pass in.
  ValuesIndices v = max_pool2d_with_indices(x, {2});
  EXPECT_EQ(error_of([&] { max_pool2d_with_indices_backward(zeros({1, 2, 3, 4}), x.shape(), v.indices); }),
            "max_pool2d_with_indices_backward: expected grad_output to have the output's shape [1, 2, 3, 3], got "
            "[1, 2, 3, 4]");
  Tensor bad = full({1, 2, 3, 3}, 36, DType::Int64);
  EXPECT_EQ(error_of([&] { max_pool2d_with_indices_backward(zeros({1, 2, 3, 3}), x.shape(), bad); }),
            "max_pool2d_with_indices_backward: expected indices in [0, H * W) = [0, 36) (or -1), got 36 at element 0");
  EXPECT_EQ(error_of([&] { max_pool2d_with_indices_backward(zeros({1, 2, 3, 3}), x.shape(), zeros({1, 2, 3, 3})); }),
            "max_pool2d_with_indices_backward: expected int64 indices, got float32");
  Tensor unbatched = v.indices.reshape({2, 3, 3});
  EXPECT_EQ(error_of([&] { max_pool2d_with_indices_backward(zeros({2, 3, 3}), x.shape(), unbatched); }),
            "max_pool2d_with_indices_backward: expected indices with the leading dims of input_size [1, 2, 6, 6], "
            "got [2, 3, 3]");
  EXPECT_EQ(error_of([&] { avg_pool2d_backward(zeros({1, 2, 4, 4}), x.shape(), {2}, {}, {0}, false, true, {}); }),
            "avg_pool2d_backward: expected grad_output to have the output's shape [1, 2, 3, 3], got [1, 2, 4, 4]");
  EXPECT_EQ(error_of([&] { adaptive_avg_pool2d_backward(zeros({1, 3, 2, 2}), x.shape()); }),
            "adaptive_avg_pool2d_backward: expected grad_output with the leading dims of input_size [1, 2, 6, 6] and "
            "a non-empty output size, got [1, 3, 2, 2]");
}

}  // namespace
}  // namespace tg
