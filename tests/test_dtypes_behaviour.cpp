// Types, what a classifier loop needs (issue 25): sum(eq(pred, y)) counts, integer reductions
// and arithmetic are exact, errors name the op. The values against PyTorch are in
// test_dtypes_golden.cpp.
#include <gtest/gtest.h>

#include "test_util.h"

namespace tg {
namespace {

Tensor longs(std::vector<int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape);
}

TEST(DtypesBehaviour, CountingCorrectPredictionsIsAnInt64Sum) {
  Tensor logits = from_vector(std::vector<float>{0.1f, 2, 0.3f, 5, 1, 0, 0, 0, 9}, {3, 3});
  Tensor y = longs({1, 0, 1});
  // A comparison is int64 0/1 (PyTorch's is bool, which tapegrad does not have); its sum is
  // int64, as PyTorch's sum of a bool tensor.
  Tensor eq_ = eq(argmax(logits, 1), y);
  EXPECT_EQ(eq_.dtype(), DType::Int64);
  Tensor correct = sum(eq_);
  EXPECT_EQ(correct.dtype(), DType::Int64);
  EXPECT_EQ(correct.shape(), Shape{});
  EXPECT_EQ(correct.item<int64_t>(), 2);  // argmax [1, 0, 2] against [1, 0, 1]
  // Accuracy: the count converted, or divided (int / number is float32, as in PyTorch).
  EXPECT_EQ(div(correct, 3.0).dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(div(correct, 3.0).item<float>(), 2.0f / 3);
}

TEST(DtypesBehaviour, IntegerSumsAreExactAndWrapAsPyTorch) {
  const int64_t big = int64_t{1} << 60;
  EXPECT_EQ(sum(longs({big, big + 1, -3})).item<int64_t>(), 2 * big - 2);  // beyond double's 53 bits
  EXPECT_EQ(sum(from_vector(std::vector<int32_t>{2147483647, 2147483647}, {2})).item<int64_t>(), 4294967294);
  EXPECT_EQ(sum(from_vector(std::vector<int32_t>{1, 2}, {2})).dtype(), DType::Int64);
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(sum(longs({max, 1})).item<int64_t>(), std::numeric_limits<int64_t>::min());  // two's complement
  EXPECT_EQ(mul(longs({max}), longs({2})).item<int64_t>(), -2);
  // Empty: 0, over every dim or one.
  EXPECT_EQ(sum(zeros({0, 3}, DType::Int64)).item<int64_t>(), 0);
  EXPECT_EQ(sum(zeros({0, 3}, DType::Int64), {0}).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(sum(zeros({0, 3})).item<float>(), 0.0f);
  EXPECT_EQ(sum(zeros({0, 3}), {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(sum(zeros({2, 0}), {1}, true).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(DtypesBehaviour, ReductionsWithoutAnIdentityNameTheOp) {
  // PyTorch: "max(): Expected reduction dim to be specified for input.numel() == 0."
  EXPECT_EQ(error_of([] { max(zeros({0, 3}, DType::Int64)); }),
            "max: expected a non-empty tensor, got shape [0, 3] (the reduction has no identity; give a dim to reduce "
            "over)");
  EXPECT_EQ(error_of([] { min(zeros({0})); }),
            "min: expected a non-empty tensor, got shape [0] (the reduction has no identity; give a dim to reduce "
            "over)");
  EXPECT_EQ(error_of([] { max(zeros({0, 3}, DType::Int64), 0); }),
            "max: cannot reduce over a zero-size dimension 0 of shape [0, 3]");
  // mean of integers: an error in PyTorch too.
  EXPECT_EQ(error_of([] { mean(longs({1, 2})); }),
            "mean: expected a floating tensor, got int64 (convert it first: x.to(tg::DType::Float32))");
}

TEST(DtypesBehaviour, IntegerArithmeticAndScalars) {
  Tensor a = longs({7, -7}), b = longs({2, 2});
  EXPECT_EQ(add(a, b).to_vector<int64_t>(), (std::vector<int64_t>{9, -5}));
  EXPECT_EQ(sub(a, b, 3).to_vector<int64_t>(), (std::vector<int64_t>{1, -13}));
  EXPECT_EQ(mul(a, b).to_vector<int64_t>(), (std::vector<int64_t>{14, -14}));
  EXPECT_EQ(div(a, b).dtype(), DType::Float32);  // true division
  EXPECT_EQ(div(a, b).to_vector<float>(), (std::vector<float>{3.5f, -3.5f}));
  EXPECT_EQ(add(a, 1.0).dtype(), DType::Int64);
  EXPECT_EQ(add(a, 0.5).dtype(), DType::Float32);
  EXPECT_EQ(rsub(a, 1.0).to_vector<int64_t>(), (std::vector<int64_t>{-6, 8}));
  EXPECT_EQ(neg(a).to_vector<int64_t>(), (std::vector<int64_t>{-7, 7}));
  EXPECT_EQ(where(longs({1, 0}), a, b).to_vector<int64_t>(), (std::vector<int64_t>{7, 2}));
  // A fractional scalar beside integers compares as a float, as PyTorch's.
  EXPECT_EQ(eq(longs({0, 1}), 0.5).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(lt(longs({0, 1}), 0.5).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(eq(longs({0, 1}), 1.0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  Tensor i32 = from_vector(std::vector<int32_t>{1, 2}, {2});
  EXPECT_EQ(add(i32, i32).dtype(), DType::Int32);
  EXPECT_EQ(add(i32, a).dtype(), DType::Int64);
}

// A float parameter times an integer tensor: the parameter's gradient in its dtype, none for the
// integer (which cannot require grad).
TEST(DtypesBehaviour, GradientsReturnInEachInputsDtype) {
  Tensor w = from_vector(std::vector<float>{0.5f, -1}, {2}).requires_grad_();
  Tensor n = longs({3, 4});
  Tensor d = from_vector(std::vector<double>{2}, {1}).requires_grad_();
  Tensor y = sum(mul(mul(w, n), d));
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.backward();
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{6, 8}));
  EXPECT_EQ(d.grad().dtype(), DType::Float64);
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{-2.5}));
  EXPECT_FALSE(n.grad().defined());
}

TEST(DtypesBehaviour, ResultTypeCountsAZeroDimOperandByCategoryOnly) {
  const Tensor f32 = zeros({3}), f64_0 = scalar_tensor(1, DType::Float64), i64 = zeros({3}, DType::Int64);
  EXPECT_EQ(result_type(f32, f64_0), DType::Float32);
  EXPECT_EQ(result_type(i64, f64_0), DType::Float64);
  EXPECT_EQ(result_type(f64_0, scalar_tensor(1, DType::Float32)), DType::Float64);
  EXPECT_EQ(result_type(zeros({3}, DType::Int32), scalar_tensor(1, DType::Int64)), DType::Int32);
  EXPECT_EQ(mul(f32, f64_0).dtype(), DType::Float32);
}

}  // namespace
}  // namespace tg
