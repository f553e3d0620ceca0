// The matrix products on every instruction-set path (ops/matmul_kernels.cpp is compiled once
// per path): matmul and linear, forward and backward, against the generic path; and the raw
// kernel's layouts (transposes, leading dims, batch strides, a transposed C, accumulation)
// against a float64 reference.
#include <gtest/gtest.h>

#include <tapegrad/tapegrad.h>

#include <tapegrad/ops/matmul.h>
#include <tapegrad/ops/matmul_kernels.h>

#include "isa_test_util.h"
#include "test_util.h"

namespace tg {
namespace {

// Paths differ only in rounding: the generic path (x86-64-v2) multiplies and adds, AVX2 and
// AVX-512 fuse them, and the tiles differ in width. Each sum of k terms is in k order on every
// path, so the difference stays within a few k ulps of the largest term; relative to the
// largest output (what expect_same_on_every_isa scales by) that is below 1e-5 in float32 for
// the depths here (<= 300) and below 1e-12 in float64.
double tolerance(DType dt) { return dt == DType::Float32 ? 1e-5 : 1e-12; }

struct Case {
  const char* name;
  std::function<std::vector<Tensor>(DType)> inputs;  // requires_grad is set on each by the test
  std::function<Tensor(const std::vector<Tensor>&)> op;
};

Tensor random_tensor(Shape s, DType dt) { return randn(std::move(s)).to(dt); }

std::vector<Case> cases() {
  auto mm = [](const char* name, Shape sa, Shape sb) {
    return Case{name, [sa, sb](DType dt) { return std::vector<Tensor>{random_tensor(sa, dt), random_tensor(sb, dt)}; },
                [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }};
  };
  return {
      mm("2-D 37x50 @ 50x29", {37, 50}, {50, 29}),
      mm("1x1 @ 1x1", {1, 1}, {1, 1}),
      mm("ragged 17x33 @ 33x5", {17, 33}, {33, 5}),
      mm("batched 3x20x30 @ 3x30x40", {3, 20, 30}, {3, 30, 40}),
      mm("broadcast 2x1x17x33 @ 3x33x5", {2, 1, 17, 33}, {3, 33, 5}),
      mm("stacked 4x64x48 @ 48x40 (one B)", {4, 64, 48}, {48, 40}),
      mm("vector 33 @ 33x19", {33}, {33, 19}),
      mm("split 300x200 @ 200x260", {300, 200}, {200, 260}),
      {"transposed and sliced operands",
       [](DType dt) { return std::vector<Tensor>{random_tensor({60, 45}, dt), random_tensor({70, 90}, dt)}; },
       [](const std::vector<Tensor>& x) {  // a^T (45 x 60) @ a slice of b^T (60 x 70, row stride 70)
         return matmul(x[0].transpose(0, 1), x[1].transpose(0, 1).narrow(0, 5, 60));
       }},
      {"linear with bias 5x7x33, W 17x33",
       [](DType dt) { return std::vector<Tensor>{random_tensor({5, 7, 33}, dt), random_tensor({17, 33}, dt), random_tensor({17}, dt)}; },
       [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); }},
      {"linear 600x128, W 96x128, no bias (B transposed once up front)",
       [](DType dt) { return std::vector<Tensor>{random_tensor({600, 128}, dt), random_tensor({96, 128}, dt)}; },
       [](const std::vector<Tensor>& x) { return linear(x[0], x[1]); }},
  };
}

TEST(IsaMatmul, ForwardAndBackwardMatchTheGenericPath) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + ", " + dtype_name(dt));
      manual_seed(3);
      const std::vector<Tensor> inputs = c.inputs(dt);
      Tensor g;
      testing::expect_same_on_every_isa(
          [&] {
            std::vector<Tensor> x;
            for (const Tensor& t : inputs) x.push_back(t.detach().requires_grad_());
            Tensor y = c.op(x);
            if (!g.defined()) {
              manual_seed(5);
              g = random_tensor(y.shape(), dt);
            }
            y.backward(g);
            std::vector<Tensor> out{y.detach()};
            for (const Tensor& t : x) out.push_back(t.grad());
            return out;
          },
          tolerance(dt));
    }
}

// C[b] = op(A[b]) op(B[b]) (+ C[b]) in float64, from the layouts as the kernel reads them.
double element(const std::vector<double>& x, kernels::MatrixLayout l, int64_t b, int64_t i, int64_t j) {
  return x[b * l.batch_stride + (l.trans ? j * l.ld + i : i * l.ld + j)];
}

TEST(IsaMatmul, KernelLayoutsMatchAFloat64ReferenceOnEveryPath) {
  struct Layouts {
    kernels::MatrixLayout a, b, c;
    int64_t batch, n, k, m;
  };
  // ld > stored width everywhere; batch strides 0 (broadcast) and larger than a matrix.
  const Layouts shapes[] = {
      {{40, 0, false}, {60, 2000, false}, {70, 5000, false}, 3, 25, 33, 50},  // one A for every b
      {{30, 1000, true}, {45, 0, true}, {40, 1500, true}, 2, 28, 31, 37},      // all transposed, one B
      {{20, 0, false}, {20, 0, true}, {20, 0, false}, 1, 1, 1, 1},            // 1x1x1
      {{300, 0, false}, {300, 0, false}, {300, 0, false}, 1, 129, 260, 270},  // cut among threads
  };
  for (const Layouts& s : shapes)
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::to_string(s.n) + "x" + std::to_string(s.k) + "x" + std::to_string(s.m) +
                   (accumulate ? " accumulate" : ""));
      auto span = [&](kernels::MatrixLayout l, int64_t rows, int64_t cols) {
        const int64_t stored_rows = l.trans ? cols : rows;
        return (s.batch - 1) * l.batch_stride + stored_rows * l.ld;
      };
      manual_seed(9);
      std::vector<double> a = randn({span(s.a, s.n, s.k)}).to(DType::Float64).to_vector<double>();
      std::vector<double> b = randn({span(s.b, s.k, s.m)}).to(DType::Float64).to_vector<double>();
      std::vector<double> c0 = randn({span(s.c, s.n, s.m)}).to(DType::Float64).to_vector<double>();
      std::vector<double> want = c0;
      for (int64_t bi = 0; bi < s.batch; ++bi)
        for (int64_t i = 0; i < s.n; ++i)
          for (int64_t j = 0; j < s.m; ++j) {
            double sum = accumulate ? element(c0, s.c, bi, i, j) : 0.0;
            for (int64_t p = 0; p < s.k; ++p) sum += element(a, s.a, bi, i, p) * element(b, s.b, bi, p, j);
            (s.c.trans ? want[bi * s.c.batch_stride + j * s.c.ld + i] : want[bi * s.c.batch_stride + i * s.c.ld + j]) =
                sum;
          }
      for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(isa)) continue;
        IsaGuard guard(isa);
        std::vector<double> got = c0;  // float64: elements the product does not own must stay c0's
        kernels::gemm_batched<double>(a.data(), s.a, b.data(), s.b, got.data(), s.c, s.batch, s.n, s.k, s.m,
                                      accumulate);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-12 * (s.k + 1) * 8) << isa_name(isa) << " at " << i;
      }
    }
}

}  // namespace
}  // namespace tg
