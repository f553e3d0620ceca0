// Edges of the shape and index ops found by differential testing against PyTorch 1.13: sizes whose
// sums overflow int64 (once undefined behaviour that skipped narrow's check), narrow's negative
// start, chunk of an empty dim, the dims a 0-d tensor takes, and scatter_add_along's checks
// (it once wrote out of bounds for a negative dim or an index past the dim). Expected values are
// PyTorch's, exact here.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

namespace {

using namespace tg;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(ShapeEdges, NarrowCountsANegativeStartFromTheEnd) {
  const Tensor x = arange(0, 5).to(DType::Float64);
  EXPECT_EQ(x.narrow(0, -2, 1).to_vector<double>(), std::vector<double>{3});
  EXPECT_EQ(x.narrow(0, -5, 5).to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(x.narrow(0, 5, 0).numel(), 0);  // start == size with length 0, as PyTorch
  EXPECT_EQ(error_of([&] { x.narrow(0, -6, 1); }), "narrow: start -6 is out of range for dim 0 of size 5");
  EXPECT_EQ(error_of([&] { x.narrow(0, -1, 2); }), "narrow: start (4) + length (2) exceeds dimension size (5) of dim 0");
  // start + length would overflow int64: still the error (it once wrapped around and passed)
  EXPECT_EQ(error_of([&] { x.narrow(0, 1, kMax); }),
            "narrow: start (1) + length (9223372036854775807) exceeds dimension size (5) of dim 0");
}

TEST(ShapeEdges, HugeStepsAndSizesDoNotOverflow) {
  const Tensor x = arange(0, 5).to(DType::Float64);
  EXPECT_EQ(x.slice(0, 0, 5, kMax).to_vector<double>(), std::vector<double>{0});  // x[0:5:huge]
  EXPECT_EQ(x.slice(0, 2, 5, kMax - 1).to_vector<double>(), std::vector<double>{2});
  EXPECT_EQ(error_of([&] { split(x, std::vector<int64_t>{kMax, kMax, 2}, 0); }),
            "split: split sizes [9223372036854775807, 9223372036854775807, 2] must sum to the size of dim 0 (5)");
  EXPECT_EQ(error_of([&] { split(zeros({0}), std::vector<int64_t>{kMax, 1}, 0); }),
            "split: split sizes [9223372036854775807, 1] must sum to the size of dim 0 (0)");
  // more chunks than elements: one element each
  std::vector<Tensor> pieces = chunk(x, kMax);
  ASSERT_EQ(pieces.size(), 5u);
  for (const Tensor& p : pieces) EXPECT_EQ(p.shape(), Shape{1});
}

TEST(ShapeEdges, ChunkOfAnEmptyDimGivesChunksEmptyPieces) {
  std::vector<Tensor> pieces = chunk(zeros({0, 2}), 3);
  ASSERT_EQ(pieces.size(), 3u);
  for (const Tensor& p : pieces) EXPECT_EQ(p.shape(), (Shape{0, 2}));
  EXPECT_EQ(chunk(zeros({2, 0}), 4, 1).size(), 4u);
  EXPECT_EQ(error_of([&] { chunk(zeros({0}), kMax); }),
            "chunk: expected at most 1048576 chunks of an empty dim (each is a tensor), got 9223372036854775807");
  // a split size of an empty dim still gives one empty piece, as PyTorch
  EXPECT_EQ(split(zeros({0, 2}), 2).size(), 1u);
}

TEST(ShapeEdges, AZeroDimTensorTakesDimZeroOrMinusOne) {
  const Tensor s = scalar_tensor(1.5, DType::Float64);
  EXPECT_EQ(s.squeeze(0).dim(), 0);
  EXPECT_EQ(s.squeeze(-1).dim(), 0);
  EXPECT_EQ(s.flatten(0, -1).shape(), Shape{1});
  for (auto f : {+[](const Tensor& t) { t.squeeze(5); }, +[](const Tensor& t) { t.flatten(3); },
                 +[](const Tensor& t) { t.flatten(0, 2); }}) {
    const std::string e = error_of([&] { f(s); });
    EXPECT_TRUE(e.rfind("squeeze: ", 0) == 0 || e.rfind("flatten: ", 0) == 0) << e;
  }
}

TEST(ShapeEdges, ScatterAddAlongWrapsTheDimAndChecksIndices) {
  const Tensor src = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor idx = from_vector(std::vector<int64_t>{0, 2, 1, 1}, {2, 2});
  // PyTorch: torch.zeros(2, 3).scatter_add(-1, idx, src)
  EXPECT_EQ(scatter_add_along({2, 3}, -1, idx, src).to_vector<double>(), (std::vector<double>{1, 0, 2, 0, 7, 0}));
  const Tensor past = from_vector(std::vector<int64_t>{0, 7, 1, 1}, {2, 2});
  EXPECT_EQ(error_of([&] { scatter_add_along({2, 3}, 1, past, src); }),
            "scatter_add_along: index 7 is out of bounds for dimension 1 with size 3");
  EXPECT_EQ(error_of([&] { scatter_add_along({2, 3}, 2, idx, src); }).rfind("scatter_add_along: ", 0), 0u);
  EXPECT_EQ(error_of([&] { scatter_add_along({1, 3}, 1, idx, src); }),
            "scatter_add_along: expected index [2, 2] to fit in the output shape [1, 3] apart from dimension 1");
  EXPECT_EQ(error_of([&] { scatter_add_along({2, 3}, 1, idx, zeros({2, 3}, DType::Float64)); }),
            "scatter_add_along: expected index and src of the same shape, got [2, 2] and [2, 3]");
  EXPECT_EQ(error_of([&] { scatter_add_along({6}, 0, idx, src); }),
            "scatter_add_along: expected index with the 1 dims of the output shape [6] (at least one), got [2, 2]");
}

// cat converts to the promoted dtype (PyTorch: int32 with float16 is float16) and skips the legacy
// empty tensor (1-D of size 0) beside tensors of other shapes; gradients return in each dtype.
TEST(ShapeEdges, CatPromotesDtypesAndSkipsLegacyEmptyTensors) {
  Tensor y = cat({from_vector(std::vector<int32_t>{1, 2}, {2}), full({1}, 0.5, DType::Float16)});
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(y.to(DType::Float64).to_vector<double>(), (std::vector<double>{1, 2, 0.5}));
  Tensor a = ones({2}, DType::Float32).requires_grad_(), b = ones({1}, DType::Float64).requires_grad_();
  Tensor z = cat({a, b});
  EXPECT_EQ(z.dtype(), DType::Float64);
  sum(mul(z, from_vector(std::vector<double>{1, 2, 3}, {3}))).backward();
  EXPECT_EQ(a.grad().dtype(), DType::Float32);
  EXPECT_EQ(a.grad().to(DType::Float64).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>{3});
  EXPECT_EQ(stack({ones({2}, DType::Int64), ones({2}, DType::Float32)}).dtype(), DType::Float32);
  // the legacy empty tensor
  EXPECT_EQ(cat({randn({2, 3}), zeros({0})}, 0).shape(), (Shape{2, 3}));
  EXPECT_EQ(cat({zeros({0}), randn({2, 3}), zeros({0})}, 1).shape(), (Shape{2, 3}));
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).shape(), Shape{0});
  EXPECT_EQ(cat({randn({3}), zeros({0})}).shape(), Shape{3});
  // only legacy empty tensors: an empty result on the graph, whatever dim (PyTorch: size [0])
  Tensor e = zeros({0}, DType::Float64).requires_grad_();
  Tensor ee = cat({e, zeros({0}, DType::Float32)}, 5);
  EXPECT_EQ(ee.shape(), Shape{0});
  EXPECT_EQ(ee.dtype(), DType::Float64);
  sum(ee).backward();
  EXPECT_EQ(e.grad().shape(), Shape{0});
  Tensor e2 = zeros({0}).requires_grad_();
  EXPECT_TRUE(cat({zeros({0}), e2}).requires_grad());  // whichever of them requires grad
  // a skipped legacy empty tensor is still an input: it makes the result require grad and gets
  // an empty gradient in its dtype, as PyTorch (it got none: .grad() stayed undefined)
  Tensor skipped = zeros({0}, DType::Float64).requires_grad_(), kept = ones({2, 3}).requires_grad_();
  Tensor ks = cat({kept, skipped, randn({1, 3})}, 0);
  EXPECT_TRUE(ks.requires_grad());
  EXPECT_EQ(ks.dtype(), DType::Float64);
  sum(mul(ks, full({3, 3}, 2.0, DType::Float64))).backward();
  ASSERT_TRUE(skipped.grad().defined());
  EXPECT_EQ(skipped.grad().shape(), Shape{0});
  EXPECT_EQ(skipped.grad().dtype(), DType::Float64);
  EXPECT_EQ(kept.grad().dtype(), DType::Float32);
  EXPECT_EQ(kept.grad().to_vector<float>(), std::vector<float>(6, 2.0f));
  Tensor only_skipped = zeros({0}).requires_grad_();
  EXPECT_TRUE(cat({randn({2}), only_skipped}).requires_grad());
  // messages name the tensor's place in the caller's list, legacy empty tensors counted
  EXPECT_EQ(error_of([&] { cat({zeros({0}), zeros({2, 3}), zeros({3, 3})}, 1); }),
            "cat: sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 for tensor "
            "number 2 in the list");
  EXPECT_EQ(error_of([&] { cat({zeros({0}), zeros({2}), zeros({2, 3})}); }),
            "cat: tensors must have the same number of dimensions: got 1 and 2 (tensor 2)");
  EXPECT_EQ(error_of([&] { cat({zeros({0}), scalar_tensor(1.0)}); }),
            "cat: zero-dimensional tensor (at position 1) cannot be concatenated");
}

// A 0-d self (or gather's 0-d index) counts as a vector of one element, as PyTorch: index_select
// gives a 0-d result, gather the index's shape; gradients flow back to the 0-d tensor.
TEST(ShapeEdges, ZeroDimSelfAndIndexSelectAndGather) {
  Tensor x = scalar_tensor(5.0, DType::Float64).requires_grad_();
  const Tensor i1 = from_vector(std::vector<int64_t>{0}, {1}), i0 = scalar_tensor(0.0).to(DType::Int64);
  for (const Tensor& i : {i1, i0}) {
    Tensor y = index_select(x, 0, i);
    EXPECT_EQ(y.shape(), Shape{});
    EXPECT_EQ(y.item(), 5.0);
    EXPECT_EQ(gather(x, -1, i).shape(), i.shape());
  }
  sum(gather(x, 0, from_vector(std::vector<int64_t>{0, 0}, {2}))).backward();
  EXPECT_EQ(x.grad().shape(), Shape{});
  EXPECT_EQ(x.grad().item(), 2.0);
  Tensor v = from_vector(std::vector<double>{1, 2, 3}, {3});
  Tensor g = gather(v, 0, scalar_tensor(2.0).to(DType::Int64));
  EXPECT_EQ(g.shape(), Shape{});
  EXPECT_EQ(g.item(), 3.0);
  EXPECT_EQ(error_of([&] { index_select(x, 0, from_vector(std::vector<int64_t>{0, 0}, {2})); }),
            "index_select: index to a 0-d self can have only 1 value, got 2");
  EXPECT_NE(error_of([&] { index_select(x, 1, i1); }).find("index_select: "), std::string::npos);
  EXPECT_NE(error_of([&] { gather(x, 0, from_vector(std::vector<int64_t>{1}, {1})); }).find("gather: "),
            std::string::npos);
}

TEST(ShapeEdges, Int32IndicesSelectAndEmbed) {
  const Tensor x = arange(0, 5).to(DType::Float64);
  const Tensor i32 = from_vector(std::vector<int32_t>{1, 2}, {2});
  EXPECT_EQ(index_select(x, 0, i32).to_vector<double>(), (std::vector<double>{1, 2}));
  Tensor w = arange(0, 8).to(DType::Float64).reshape({4, 2}).requires_grad_();
  Tensor e = embedding(w, i32);
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{2, 3, 4, 5}));
  sum(e).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(error_of([&] { index_select(x, 0, from_vector(std::vector<double>{1}, {1})); }),
            "index_select: expected index of dtype int64 or int32, got float64");
}

// fill_ and masked_fill of a finite value past the floating dtype's range are errors, as in
// PyTorch (they wrote Inf); Inf and NaN themselves, and arithmetic, are not.
TEST(ShapeEdges, FillsPastAFloatingRangeAreRefused) {
  Tensor f = zeros({3});
  EXPECT_EQ(error_of([&] { f.fill_(1e300); }), "fill_: value 1e+300 cannot be converted to float32 without overflow");
  const Tensor mask = from_vector(std::vector<int64_t>{1, 0, 1}, {3});
  EXPECT_EQ(error_of([&] { masked_fill(f, mask, -1e39); }),
            "masked_fill: value -1e+39 cannot be converted to float32 without overflow");
  EXPECT_EQ(error_of([&] { zeros({2}, DType::BFloat16).fill_(1e39); }),
            "fill_: value 1e+39 cannot be converted to bfloat16 without overflow");
  EXPECT_EQ(error_of([&] { zeros({2}, DType::Float16).fill_(70000); }),
            "fill_: value 70000 cannot be converted to float16 without overflow");
  EXPECT_EQ(zeros({2}, DType::Float16).fill_(65504).to(DType::Float64).to_vector<double>(),
            (std::vector<double>{65504, 65504}));
  EXPECT_EQ(masked_fill(f, mask, std::numeric_limits<double>::infinity()).to_vector<float>()[0],
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(add(f, 1e300).to_vector<float>()[0], std::numeric_limits<float>::infinity());
}

}  // namespace
