// Tensor basics: factories, views sharing storage, strides, copies, dtypes, the version counter,
// printing and the errors a user sees.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include "test_util.h"

#include <string>

namespace tg {
namespace {

TEST(Tensor, FactoriesFillValuesAndShapes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(full({2}, 2.5, DType::Float64).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(arange(0, 5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25, DType::Float64).to_vector<double>(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  Tensor s = scalar_tensor(3.0, DType::Float64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_DOUBLE_EQ(s.item(), 3.0);
  EXPECT_EQ(zeros({0, 4}).numel(), 0);
}

TEST(Tensor, RandomStreamIsSeededAndIndependentOfThreads) {
  manual_seed(42);
  std::vector<float> a = randn({1000}).to_vector<float>();
  int threads = num_threads();
  set_num_threads(1);
  manual_seed(42);
  std::vector<float> b = randn({1000}).to_vector<float>();
  set_num_threads(threads);
  EXPECT_EQ(a, b);
  double mean = 0, var = 0;
  for (float v : a) mean += v / 1000.0;
  for (float v : a) var += (v - mean) * (v - mean) / 1000.0;
  EXPECT_NEAR(mean, 0.0, 0.1);  // 1000 normal samples: the mean's stddev is 0.03
  EXPECT_NEAR(var, 1.0, 0.15);
  Tensor u = uniform({1000}, -2, 3, DType::Float64);
  for (double v : u.to_vector<double>()) EXPECT_TRUE(v >= -2 && v < 3);
  std::vector<int64_t> p = randperm(10).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  EXPECT_EQ(p, arange(0, 10).to_vector<int64_t>());
}

TEST(Tensor, ViewsShareStorageAndHaveTheRightStrides) {
  Tensor x = arange(0, 24, 1, DType::Float64).reshape({2, 3, 4});
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.at<double>({3, 2, 1}), x.at<double>({1, 2, 3}));
  Tensor n = x.narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.at<double>({1, 0, 0}), 13.0);
  Tensor s = x.slice(1, 0, 3, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s.at<double>({0, 1, 0}), 8.0);
  Tensor sel = x.select(0, -1);
  EXPECT_EQ(sel.shape(), (Shape{3, 4}));
  EXPECT_EQ(sel.at<double>({0, 0}), 12.0);
  Tensor e = from_vector(std::vector<double>{1, 2, 3}, {3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.at<double>({1, 2, 3}), 3.0);
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.view({-1, 4}).shape(), (Shape{6, 4}));
  // A write through a view is seen by the base.
  n.fill_(-1);
  EXPECT_EQ(x.at<double>({0, 0, 1}), -1.0);
  EXPECT_EQ(x.at<double>({0, 0, 0}), 0.0);
}

TEST(Tensor, ContiguousCloneAndConversionCopyInCOrder) {
  Tensor x = arange(0, 6, 1, DType::Float64).reshape({2, 3});
  Tensor t = x.transpose(0, 1).contiguous();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor c = x.clone();
  c.fill_(7);
  EXPECT_EQ(x.at<double>({0, 0}), 0.0);
  EXPECT_EQ(x.to(DType::Float32).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(x.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  Tensor y = zeros({2, 3}, DType::Float64);
  y.copy_(from_vector(std::vector<float>{1, 2, 3}, {3}));  // broadcast and convert
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  y.add_(x, 2.0);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 4, 7, 7, 10, 13}));
}

// Copies of 16 MB and more store past the caches (framework/tensor.cpp, copy_bytes): the same
// bytes as a plain copy, whatever the alignment of either end, the length and the threads.
TEST(Tensor, LargeCopiesAreExactAtAnyAlignmentAndThreadCount) {
  const int threads = num_threads();
  const int64_t n = (int64_t{17} << 20) / 4 + 7;  // over the streaming size, not a multiple of a line
  Tensor src = randn({n + 8});
  const std::vector<float> want = src.to_vector<float>();
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (int64_t src_at : {0, 1, 3}) {
      for (int64_t dst_at : {0, 2, 5}) {
        Tensor dst = zeros({n + 8});
        dst.narrow(0, dst_at, n).copy_(src.narrow(0, src_at, n));
        const std::vector<float> got = dst.to_vector<float>();
        for (int64_t i = 0; i < n + 8; ++i) {
          const float expect = i >= dst_at && i < dst_at + n ? want[i - dst_at + src_at] : 0.0f;
          ASSERT_EQ(got[i], expect) << "threads " << t << ", src at " << src_at << ", dst at " << dst_at << ", i " << i;
        }
      }
    }
    Tensor c = src.clone();
    ASSERT_EQ(c.to_vector<float>(), want) << "threads " << t;
  }
  set_num_threads(threads);
}

// A source that shares memory with the destination unevenly is read as it was before the copy
// (x[1:] = x[:-1] shifts x), at any size and thread count; the same view onto itself is a no-op
// and adding a tensor to itself doubles it.
TEST(Tensor, CopyAndAddBetweenOverlappingViewsReadTheSourceFirst) {
  const int threads = num_threads();
  for (int64_t n : {int64_t{10}, int64_t{1} << 16, (int64_t{17} << 20) / 4}) {
    for (int t : {1, 2}) {
      set_num_threads(t);
      Tensor x = arange(0, static_cast<double>(n), 1, DType::Float32);
      x.narrow(0, 1, n - 1).copy_(x.narrow(0, 0, n - 1));
      std::vector<float> got = x.to_vector<float>();
      ASSERT_EQ(got[0], 0.0f);
      for (int64_t i = 1; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(i - 1)) << "n " << n << ", threads " << t;
      x = arange(0, static_cast<double>(n), 1, DType::Float32);
      x.narrow(0, 0, n - 1).copy_(x.narrow(0, 1, n - 1));
      got = x.to_vector<float>();
      for (int64_t i = 0; i + 1 < n; ++i) ASSERT_EQ(got[i], static_cast<float>(i + 1)) << "n " << n << ", threads " << t;
      x = arange(0, static_cast<double>(n), 1, DType::Float32);
      x.narrow(0, 1, n - 1).add_(x.narrow(0, 0, n - 1));
      got = x.to_vector<float>();
      for (int64_t i = 1; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(2 * i - 1)) << "n " << n << ", threads " << t;
      x = arange(0, static_cast<double>(n), 1, DType::Float32);
      x.copy_(x);
      x.add_(x);
      got = x.to_vector<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(2 * i)) << "n " << n << ", threads " << t;
    }
  }
  // Rows 1 and 2 from rows 0 and 1 (one contiguous run), a transpose onto itself (element by
  // element, it would read elements it has already written), and a row broadcast from the
  // tensor's own last row.
  Tensor m = arange(0, 12, 1, DType::Float32).reshape({3, 4});
  m.narrow(0, 1, 2).copy_(m.narrow(0, 0, 2));
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7}));
  Tensor q = arange(0, 9, 1, DType::Float32).reshape({3, 3});
  q.copy_(q.transpose(0, 1));
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  Tensor r = arange(0, 12, 1, DType::Float32).reshape({3, 4});
  r.copy_(r.select(0, 2));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11}));
  set_num_threads(threads);
}

TEST(Tensor, VersionCounterCountsInPlaceWritesAndIsSharedByViews) {
  Tensor x = zeros({4});
  Tensor v = x.narrow(0, 1, 2);
  const uint64_t v0 = x.version();
  v.fill_(1);
  EXPECT_EQ(x.version(), v0 + 1);
  x.add_(ones({4}));
  EXPECT_EQ(v.version(), v0 + 2);
  Tensor c = x.clone();
  EXPECT_EQ(c.version(), 0u);
}

TEST(Tensor, TypedAccessThrowsOnDtypeMismatchAndBadIndex) {
  Tensor x = zeros({2, 2});
  EXPECT_EQ(error_of([&] { x.data<double>(); }), "data: tensor has dtype float32, requested float64");
  EXPECT_EQ(error_of([&] { x.at<float>({2, 0}); }), "at: index 2 is out of range for dim 0 of size 2");
  EXPECT_EQ(error_of([&] { x.at<float>({0}); }), "at: expected 2 indices, got 1");
  EXPECT_EQ(error_of([&] { x.item<float>(); }), "item: expected a tensor with one element, got shape [2, 2]");
  EXPECT_EQ(error_of([&] { Tensor().shape(); }), "shape: the tensor is undefined");
}

TEST(Tensor, ShapeErrorsNameTheOpAndBothShapes) {
  Tensor x = zeros({2, 3});
  EXPECT_EQ(error_of([&] { x.view({4, 2}); }), "view: shape [4, 2] is invalid for input of size 6");
  EXPECT_EQ(error_of([&] { x.transpose(0, 1).view({6}); }),
            "view: the input of shape [3, 2] is not contiguous; use reshape() (which copies when it must) or "
            "contiguous() first");
  EXPECT_EQ(error_of([&] { x.expand({4, 3, 4}); }),
            "expand: the size of dim 1 (2) must match the target size 3 or be 1; input [2, 3], target [4, 3, 4]");
  EXPECT_EQ(error_of([&] { x.permute({0, 0}); }), "permute: dim 0 appears twice in [0, 0]");
  EXPECT_EQ(error_of([&] { x.narrow(1, 2, 2); }), "narrow: start (2) + length (2) exceeds dimension size (3) of dim 1");
  EXPECT_EQ(error_of([&] { x.size(2); }), "size: dimension out of range (expected to be in [-2, 1], but got 2)");
  EXPECT_EQ(error_of([&] { from_vector(std::vector<float>{1, 2}, {3}); }),
            "from_vector: got 2 values for shape [3] (3 elements)");
  EXPECT_EQ(error_of([&] { add(zeros({2, 3}), zeros({4})); }),
            "add: the shapes [2, 3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  // Two dtypes are promoted as PyTorch does (tests/test_half_core_ops.cpp, test_dtypes_golden.cpp);
  // integer operands compute in integers, but alpha must then be an integer, as in PyTorch.
  EXPECT_EQ(add(zeros({2}), zeros({2}, DType::Float64)).dtype(), DType::Float64);
  EXPECT_EQ(add(zeros({2}, DType::Int64), zeros({2}, DType::Int64)).dtype(), DType::Int64);
  EXPECT_EQ(error_of([&] { add(zeros({2}, DType::Int64), zeros({2}, DType::Int64), 0.5); }),
            "add: alpha must be an integer for integer operands, got 0.5");
}

TEST(Tensor, PrintingShowsShapeDtypeAndValues) {
  Tensor x = from_vector(std::vector<double>{1.5, -2, 3, 4}, {2, 2});
  std::string s = x.to_string();
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float64"), std::string::npos) << s;
  EXPECT_NE(s.find("[[1.5,  -2],\n [  3,   4]]"), std::string::npos) << s;
  x.requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_NE(y.to_string().find("grad_fn=mul_scalar"), std::string::npos);
}

TEST(Tensor, MemoryIsCountedAndReturned) {
  const int64_t before = memory_stats().allocated_bytes;
  {
    Tensor t = zeros({1000}, DType::Float64);
    EXPECT_EQ(memory_stats().allocated_bytes, before + 8000);
    EXPECT_GE(memory_stats().peak_bytes, before + 8000);
  }
  EXPECT_EQ(memory_stats().allocated_bytes, before);
}

// Large freed buffers are kept for the next request of the same size (no fresh pages to fault
// in), and the counters still report only live tensors.
TEST(Tensor, LargeFreedBufferIsReusedForTheSameSizeAndNotCounted) {
  const int64_t before = memory_stats().allocated_bytes;
  const void* first;
  {
    Tensor t = full({1 << 18}, 2.0, DType::Float32);  // 1 MB
    first = t.data<float>();
  }
  EXPECT_EQ(memory_stats().allocated_bytes, before);
  Tensor other = Tensor::empty({(1 << 18) + 16}, DType::Float32);  // another size: not that block
  EXPECT_NE(static_cast<const void*>(other.data<float>()), first);
  Tensor again = zeros({1 << 18}, DType::Float32);
  EXPECT_EQ(static_cast<const void*>(again.data<float>()), first);
  for (float v : again.to_vector<float>()) ASSERT_EQ(v, 0.0f);  // contents are the new tensor's
  EXPECT_EQ(memory_stats().allocated_bytes, before + 2 * (int64_t{1} << 20) + 64);
}

TEST(Tensor, ToBackwardConvertsTheGradientBack) {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2});
  x.requires_grad_();
  Tensor y = sum(mul(x.to(DType::Float32), 3.0));
  y.backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

}  // namespace
}  // namespace tg
