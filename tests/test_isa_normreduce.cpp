// The norm, softmax and reduction kernels (layer_norm_kernels, batch_norm_kernels, softmax_kernels,
// reduce_kernels)
// on every instruction-set path this CPU has, against the generic path; and their results for
// 1 and 2 threads, bit for bit, on the active path.
//
// Tolerances (testing::expect_same_on_every_isa: |x - x_generic| <= tol * max|x_generic|):
//   float32 2e-6, float64 1e-13. Every path sums in the same order (32 fixed double lanes,
//   ops/internal/lane_sums.h) and uses the same exp; what differs is where the compiler fuses
//   a multiply and an add into an FMA on AVX2 / AVX-512 (the generic x86-64-v2 path has none):
//   one rounding less per fused step, a few units in the last place of float32 (6e-8) or
//   float64 (1e-16), which the backward formulas' cancellations (sum g y subtracted from g)
//   scale up by at most the row length's order of magnitude. Indices (argmax, min/max) and
//   NaN / Inf positions must match exactly.
#include "isa_test_util.h"
#include "test_util.h"

#include <cmath>
#include <limits>

namespace tg {
namespace {

double tol(DType dt) { return dt == DType::Float32 ? 2e-6 : 1e-13; }

// randn of `shape` with a NaN, a +inf and a -inf planted in the rows that `specials` asks for
// (row = a slice of the last dim): row 0 gets a NaN, row 1 a +inf, row 2 a -inf.
Tensor input(const Shape& shape, DType dt, bool specials, uint64_t seed) {
  manual_seed(seed);
  Tensor x = randn(shape, DType::Float64);
  if (!specials) return x.to(dt);
  std::vector<double> v = x.to_vector<double>();
  const int64_t n = shape.empty() ? 1 : shape.back();
  const double planted[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity()};
  for (int64_t r = 0; r < 3 && (r + 1) * n <= static_cast<int64_t>(v.size()); ++r)
    v[r * n + (n / 2)] = planted[r];
  return from_vector(v, shape).to(dt);
}

// fn's tensors for 1 and for 2 threads must be the same bits (on the active path).
void expect_same_for_1_and_2_threads(const std::function<std::vector<Tensor>()>& fn) {
  const int saved = num_threads();
  set_num_threads(1);
  std::vector<Tensor> one = fn();
  set_num_threads(2);
  std::vector<Tensor> two = fn();
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], two[i])) << "output " << i;
}

// Both checks for one computation.
void check(const std::function<std::vector<Tensor>()>& fn, DType dt) {
  testing::expect_same_on_every_isa(fn, tol(dt));
  expect_same_for_1_and_2_threads(fn);
}

const DType kTypes[] = {DType::Float32, DType::Float64};

TEST(IsaNormReduce, LayerNormForwardBackward) {
  // Row lengths around the 8- and 32-element blocks of the lane sums, and a large one.
  const std::vector<Shape> shapes = {{5, 1}, {4, 7}, {3, 33}, {2, 3, 40}, {64, 768}, {48, 1000}};
  for (DType dt : kTypes)
    for (const Shape& shape : shapes)
      for (bool affine : {false, true})
        for (bool specials : {false, true}) {
          // Rows of one element with a weight: dx is 0 exactly on the generic path, and
          // g w - round(g w) (the weighted gradient's rounding error, times rstd) where the
          // compiler fuses that product and difference into an FMA; all of dx is 0, so the
          // tolerance relative to its largest element would ask for exact zeros.
          if (affine && shape.back() == 1) continue;
          SCOPED_TRACE(format_shape(shape) + " " + dtype_name(dt) + (affine ? " affine" : "") +
                       (specials ? " with NaN/Inf" : ""));
          const Shape norm{shape.back()};
          Tensor x = input(shape, dt, specials, 1), g = input(shape, dt, false, 2);
          // A large offset: the centred passes must keep the digits.
          if (!specials) x = add(x, 1000.0);
          Tensor w = input(norm, dt, false, 3), b = input(norm, dt, false, 4);
          check(
              [&] {
                Tensor xi = x.detach().requires_grad_();
                Tensor wi = affine ? w.detach().requires_grad_() : Tensor();
                Tensor bi = affine ? b.detach().requires_grad_() : Tensor();
                Tensor y = layer_norm(xi, norm, wi, bi);
                y.backward(g);
                std::vector<Tensor> out{y, xi.grad()};
                if (affine) out.insert(out.end(), {wi.grad(), bi.grad()});
                return out;
              },
              dt);
        }
}

TEST(IsaNormReduce, BatchNormForwardBackward) {
  // Runs of HxW around the lane sums' 8- and 32-element blocks, HxW = 1, and a large offset.
  const std::vector<Shape> shapes = {{6, 3}, {2, 3, 7}, {2, 3, 5, 7}, {4, 8, 33, 3}, {8, 16, 28, 28}};
  for (DType dt : kTypes)
    for (const Shape& shape : shapes)
      for (bool training : {true, false}) {
        SCOPED_TRACE(format_shape(shape) + " " + dtype_name(dt) + (training ? " training" : " eval"));
        const int64_t C = shape[1];
        Tensor x = add(input(shape, dt, false, 1), 1000.0), g = input(shape, dt, false, 2);
        Tensor w = input({C}, dt, false, 3), b = input({C}, dt, false, 4);
        Tensor rm = add(input({C}, dt, false, 5), 1000.0), rv = uniform({C}, 0.5, 1.5, dt);
        check(
            [&] {
              Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_(),
                     bi = b.detach().requires_grad_();
              Tensor rmi = rm.clone(), rvi = rv.clone();
              Tensor y = batch_norm(xi, rmi, rvi, wi, bi, training);
              y.backward(g);
              return std::vector<Tensor>{y, xi.grad(), wi.grad(), bi.grad(), rmi, rvi};
            },
            dt);
      }
}

TEST(IsaNormReduce, SoftmaxAndLogSoftmaxOverInnerAndOuterDims) {
  // (6, 37, 300): dim 2 is a contiguous row, dims 0 and 1 are lanes side by side (300 of them:
  // more than one block of columns).
  for (DType dt : kTypes)
    for (bool log : {false, true})
      for (int64_t dim : {0, 1, 2})
        for (bool specials : {false, true}) {
          SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim) +
                       " " + dtype_name(dt) + (specials ? " with NaN/Inf" : ""));
          Tensor x = mul(input({6, 37, 300}, dt, specials, 5), 4.0), g = input({6, 37, 300}, dt, false, 6);
          check(
              [&] {
                Tensor xi = x.detach().requires_grad_();
                Tensor y = log ? log_softmax(xi, dim) : softmax(xi, dim);
                y.backward(g);
                return std::vector<Tensor>{y, xi.grad()};
              },
              dt);
        }
}

TEST(IsaNormReduce, SoftmaxOfRaggedRows) {
  for (DType dt : kTypes)
    for (int64_t D : {1, 7, 31, 33, 1000}) {
      SCOPED_TRACE("D " + std::to_string(D) + " " + dtype_name(dt));
      Tensor x = input({40, D}, dt, false, 7);
      check([&] { return std::vector<Tensor>{softmax(x, 1), log_softmax(x, 1)}; }, dt);
    }
}

TEST(IsaNormReduce, SumMeanVarOverEachDimAndAll) {
  const Shape shape{6, 33, 170};
  const std::vector<std::vector<int64_t>> dim_sets = {{0}, {1}, {2}, {0, 2}, {}};
  for (DType dt : kTypes)
    for (const auto& dims : dim_sets)
      for (bool specials : {false, true}) {
        SCOPED_TRACE("dims " + format_shape(dims) + " " + dtype_name(dt) + (specials ? " with NaN/Inf" : ""));
        Tensor x = input(shape, dt, specials, 8);
        check(
            [&] {
              Tensor xs = x.detach().requires_grad_(), xv = x.detach().requires_grad_();
              Tensor s = sum(xs, dims), m = mean(x, dims), v = var(xv, dims);
              sum(mul(s, s)).backward();
              sum(v).backward();
              return std::vector<Tensor>{s, m, v, xs.grad(), xv.grad()};
            },
            dt);
      }
}

TEST(IsaNormReduce, SumOfALongTensorInChunks) {
  for (DType dt : kTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = input({3, 70001}, dt, false, 9);
    check([&] { return std::vector<Tensor>{sum(x), mean(x, {1}), var(x, {1})}; }, dt);
  }
}

TEST(IsaNormReduce, MinMaxArgmaxOverEachDimAndAll) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64})
    for (bool specials : {false, true}) {
      if (dt == DType::Int64 && specials) continue;
      SCOPED_TRACE(std::string(dtype_name(dt)) + (specials ? " with NaN/Inf" : ""));
      Tensor x = dt == DType::Int64 ? randint(-5, 5, {7, 33, 150}) : input({7, 33, 150}, dt, specials, 10);
      check(
          [&] {
            std::vector<Tensor> out{max(x), min(x), argmax(x)};
            for (int64_t d = 0; d < 3; ++d) {
              ValuesIndices mx = max(x, d), mn = min(x, d);
              out.insert(out.end(), {mx.values, mx.indices, mn.values, mn.indices, argmax(x, d)});
            }
            return out;
          },
          dt == DType::Int64 ? DType::Float64 : dt);
      if (dt == DType::Int64) continue;
      check(
          [&] {  // the gradients: to the first extreme of a dim, shared by the ties of all
            Tensor xd = x.detach().requires_grad_(), xa = x.detach().requires_grad_();
            sum(max(xd, 1).values).backward();
            max(xa).backward();
            return std::vector<Tensor>{xd.grad(), xa.grad()};
          },
          dt);
    }
}

TEST(IsaNormReduce, CrossEntropy) {
  struct Case {
    Shape logits;
    CrossEntropyOptions options;
  };
  const std::vector<Case> cases = {
      {{64, 1000}, {}},
      {{64, 1000}, {Reduction::None, 3, 0.1}},
      {{16, 7, 5, 9}, {Reduction::Mean, 2, 0.2}},
      {{16, 7, 5, 9}, {Reduction::Sum, -100, 0.0}},
  };
  for (DType dt : kTypes)
    for (const Case& c : cases)
      for (bool specials : {false, true}) {
        SCOPED_TRACE(format_shape(c.logits) + " " + dtype_name(dt) + (specials ? " with NaN/Inf" : ""));
        Tensor x = mul(input(c.logits, dt, specials, 11), 3.0);
        Shape tshape = c.logits;
        tshape.erase(tshape.begin() + 1);
        manual_seed(12);
        Tensor t = randint(0, c.logits[1], tshape);
        check(
            [&] {
              Tensor xi = x.detach().requires_grad_();
              Tensor loss = cross_entropy(xi, t, c.options);
              sum(loss).backward();
              return std::vector<Tensor>{loss, xi.grad()};
            },
            dt);
      }
}

}  // namespace
}  // namespace tg
