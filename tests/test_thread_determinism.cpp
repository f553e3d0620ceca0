// The README's claim "same inputs, same bits, for any thread count", kernel by kernel: every
// kernel with a parallel reduction or scatter runs at 1, 2 and 3 threads, on shapes that take
// its small-parallel-dimension path (batch 1, one head, one group, few channels or rows but
// many positions, where a kernel is most tempted to cut a sum by the thread count), and its
// outputs and gradients must agree in every bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace tg {
namespace {

// Elements whose bits differ (as float64, exact for f32 and f64); -1 for a shape mismatch.
int64_t differing_elements(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return -1;
  if (!a.defined()) return 0;
  if (a.shape() != b.shape()) return -1;
  const std::vector<double> x = a.to(DType::Float64).to_vector<double>();
  const std::vector<double> y = b.to(DType::Float64).to_vector<double>();
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], sizeof(double)) != 0;
  return n;
}

// Runs fn at 1, 2 and 3 threads (restoring the thread count) and expects every tensor it
// returns to have the same bits at 2 and 3 threads as at 1. The generator is reseeded before
// each run, so fn may draw its upstream gradients.
void expect_same_bits_at_1_2_3_threads(const std::function<std::vector<Tensor>()>& fn) {
  const int saved = num_threads();
  set_num_threads(1);
  manual_seed(1234);
  const std::vector<Tensor> one = fn();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    manual_seed(1234);
    const std::vector<Tensor> other = fn();
    ASSERT_EQ(other.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(differing_elements(other[i], one[i]), 0)
          << "result " << i << " at " << threads << " threads differs from 1 thread";
  }
  set_num_threads(saved);
}

// The value of `out` and the gradients of <out, g> for every input, g fixed.
std::vector<Tensor> value_and_grads(const Tensor& out, const std::vector<Tensor>& inputs,
                                    const Tensor& g = Tensor()) {
  std::vector<Tensor> r{out};
  const std::vector<Tensor> grads = grad({out}, inputs, {g.defined() ? g : Tensor()});
  r.insert(r.end(), grads.begin(), grads.end());
  return r;
}

Tensor leaf(Tensor t) {
  t.requires_grad_();
  return t;
}

// ---- multi-scale deformable attention: few slices (bs * heads) and many queries, so that the
// backward must split a slice's queries over the threads and add grad_value partials.
struct MsdaCase {
  int64_t bs, heads, channels, queries;
  DType dtype;
};

void check_msda(const MsdaCase& mc) {
  SCOPED_TRACE("bs " + std::to_string(mc.bs) + " heads " + std::to_string(mc.heads) + " channels " +
               std::to_string(mc.channels) + " queries " + std::to_string(mc.queries));
  manual_seed(31);
  const int64_t levels = 2, points = 4;
  Tensor ss = from_vector(std::vector<int64_t>{16, 16, 8, 8}, {levels, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 256}, {levels});
  Tensor v = randn({mc.bs, 320, mc.heads, mc.channels}, mc.dtype);
  Tensor loc = rand({mc.bs, mc.queries, mc.heads, levels, points, 2}, mc.dtype);
  Tensor attn = rand({mc.bs, mc.queries, mc.heads, levels, points}, mc.dtype);
  Tensor g = randn({mc.bs, mc.queries, mc.heads * mc.channels}, mc.dtype);
  for (std::array<bool, 3> mask : {std::array<bool, 3>{true, true, true}, std::array<bool, 3>{true, false, false},
                                   std::array<bool, 3>{false, true, true}}) {
    SCOPED_TRACE("mask " + std::to_string(mask[0]) + std::to_string(mask[1]) + std::to_string(mask[2]));
    expect_same_bits_at_1_2_3_threads([&] {
      MsDeformAttnGrads r = ms_deform_attn_backward(v, ss, lsi, loc, attn, g, mask);
      return std::vector<Tensor>{ms_deform_attn(v, ss, lsi, loc, attn), r.grad_value, r.grad_sampling_locations,
                                 r.grad_attention_weights};
    });
  }
}

// The chunked backward's grad_value is still the adjoint of the forward (which is linear in
// value): <grad_value, u> = <grad_output, forward(u)> for any u, here in float64.
TEST(ThreadDeterminism, MsDeformAttnChunkedGradValueIsTheAdjoint) {
  manual_seed(30);
  Tensor ss = from_vector(std::vector<int64_t>{16, 16, 8, 8}, {2, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 256}, {2});
  for (int64_t heads : {1, 3}) {
    const int64_t q = 3000, C = 8;
    Tensor v = randn({1, 320, heads, C}, DType::Float64), u = randn({1, 320, heads, C}, DType::Float64);
    Tensor loc = rand({1, q, heads, 2, 4, 2}, DType::Float64), attn = rand({1, q, heads, 2, 4}, DType::Float64);
    Tensor g = randn({1, q, heads * C}, DType::Float64);
    Tensor gv = ms_deform_attn_backward(v, ss, lsi, loc, attn, g, {true, false, false}).grad_value;
    const double lhs = sum(mul(gv, u)).item<double>();
    const double rhs = sum(mul(g, ms_deform_attn(u, ss, lsi, loc, attn))).item<double>();
    EXPECT_NEAR(lhs, rhs, 1e-9 * std::abs(rhs) + 1e-9) << heads << " heads";
  }
}

// 320 keys, 8 samples per query: one slice of 3000 queries is cut into 8 chunks, 2 slices of
// 1500 into 4 chunks each, 3 of 1000 into 3 (the last one shorter), 16 slices not at all.
TEST(ThreadDeterminism, MsDeformAttnOneSlice) {
  check_msda({1, 1, 32, 3000, DType::Float32});  // C = whole vectors: a specialised loop
  check_msda({1, 1, 5, 2000, DType::Float32});   // the generic loop, a remainder
  check_msda({1, 1, 8, 2000, DType::Float64});
}

TEST(ThreadDeterminism, MsDeformAttnFewSlices) {
  check_msda({1, 2, 16, 1500, DType::Float32});
  check_msda({2, 1, 8, 1200, DType::Float32});
  check_msda({1, 3, 4, 1000, DType::Float32});
  check_msda({2, 8, 8, 400, DType::Float32});  // 16 slices: whole slices per task
}

TEST(ThreadDeterminism, MsDeformAttnDoubleBackward) {
  manual_seed(32);
  const int64_t levels = 2, points = 2, queries = 800, C = 8;
  Tensor ss = from_vector(std::vector<int64_t>{16, 16, 8, 8}, {levels, 2});
  Tensor lsi = from_vector(std::vector<int64_t>{0, 256}, {levels});
  Tensor v = leaf(randn({1, 320, 1, C})), loc = leaf(rand({1, queries, 1, levels, points, 2}));
  Tensor attn = leaf(rand({1, queries, 1, levels, points}));
  Tensor g = randn({1, queries, C});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = ms_deform_attn(v, ss, lsi, loc, attn);
    std::vector<Tensor> g1 = grad({out}, {v, loc, attn}, {g}, false, true, true);
    Tensor s = sum(mul(g1[0], g1[0])) + sum(mul(g1[1], g1[1])) + sum(mul(g1[2], g1[2]));
    std::vector<Tensor> r = grad({s}, {v, loc, attn});
    r.insert(r.end(), g1.begin(), g1.end());
    return r;
  });
}

// ---- grid_sample: one or a few samples with few channels (the split passes cut the channels by
// the thread count), every mode.
TEST(ThreadDeterminism, GridSampleBackward) {
  for (int64_t N : {1, 3}) {
    for (GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Nearest, GridSampleMode::Bicubic}) {
      SCOPED_TRACE("N " + std::to_string(N) + " mode " + std::to_string(static_cast<int>(mode)));
      manual_seed(33);
      Tensor x = leaf(randn({N, 5, 40, 36}));
      Tensor grid = leaf(rand({N, 128, 128, 2}) * 2.2 - 1.1);  // parallel even for nearest (1 tap)
      expect_same_bits_at_1_2_3_threads([&] {
        Tensor out = grid_sample(x, grid, mode, GridSamplePadding::Zeros, false);
        return value_and_grads(out, {x, grid}, randn(out.shape()));
      });
    }
  }
}

TEST(ThreadDeterminism, GridSampleDoubleBackward) {
  manual_seed(34);
  Tensor x = leaf(randn({1, 5, 50, 50}));
  Tensor grid = leaf(rand({1, 80, 80, 2}) * 2 - 1);
  Tensor g = randn({1, 5, 80, 80});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = grid_sample(x, grid);
    std::vector<Tensor> g1 = grad({out}, {x, grid}, {g}, false, true, true);
    std::vector<Tensor> r = grad({sum(mul(g1[1], g1[1]))}, {x, grid});
    r.insert(r.end(), g1.begin(), g1.end());
    return r;
  });
}

// ---- grid_sample on volumes: N = 1 and 3 (split passes, channels cut by the thread count) and
// N = 2 (the fused pass), both modes, and the second-order term.
TEST(ThreadDeterminism, GridSample3dBackward) {
  for (int64_t N : {1, 2, 3}) {
    for (GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Nearest}) {
      SCOPED_TRACE("N " + std::to_string(N) + " mode " + std::to_string(static_cast<int>(mode)));
      manual_seed(36);
      Tensor x = leaf(randn({N, 5, 10, 12, 9}));
      Tensor grid = leaf(rand({N, 24, 24, 24, 3}) * 2.2 - 1.1);  // parallel even for nearest
      expect_same_bits_at_1_2_3_threads([&] {
        Tensor out = grid_sample(x, grid, mode, GridSamplePadding::Reflection, false);
        return value_and_grads(out, {x, grid}, randn(out.shape()));
      });
    }
  }
}

TEST(ThreadDeterminism, GridSample3dDoubleBackward) {
  manual_seed(37);
  Tensor x = leaf(randn({1, 3, 12, 12, 12}));
  Tensor grid = leaf(rand({1, 20, 20, 20, 3}) * 2 - 1);
  Tensor g = randn({1, 3, 20, 20, 20});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = grid_sample(x, grid);
    std::vector<Tensor> g1 = grad({out}, {x, grid}, {g}, false, true, true);
    std::vector<Tensor> r = grad({sum(mul(g1[1], g1[1]))}, {x, grid});
    r.insert(r.end(), g1.begin(), g1.end());
    return r;
  });
}

// ---- upsample: one plane (the row blocks depend on the thread count).
TEST(ThreadDeterminism, UpsampleBilinearBackward) {
  for (bool ac : {false, true}) {
    manual_seed(35);
    Tensor x = leaf(randn({1, 1, 70, 50}));
    expect_same_bits_at_1_2_3_threads([&] {
      Tensor out = upsample_bilinear2d(x, {150, 110}, ac);
      return value_and_grads(out, {x}, randn(out.shape()));
    });
  }
}

// ---- group_norm: one or two groups of many elements (the (group, chunk) path is taken when
// there are fewer groups than threads), and the weight/bias gradients summed over the batch.
TEST(ThreadDeterminism, GroupNormForwardBackward) {
  struct Case {
    int64_t N, C, G, H, W;
  };
  for (const Case& c : {Case{1, 4, 1, 100, 100}, Case{1, 6, 2, 100, 100}, Case{2, 3, 1, 130, 130},
                        Case{5, 8, 4, 40, 40}}) {
    SCOPED_TRACE("N " + std::to_string(c.N) + " G " + std::to_string(c.G));
    manual_seed(36);
    Tensor x = leaf(randn({c.N, c.C, c.H, c.W}) * 3 + 1);
    Tensor w = leaf(randn({c.C})), b = leaf(randn({c.C}));
    expect_same_bits_at_1_2_3_threads([&] {
      Tensor out = group_norm(x, c.G, w, b);
      return value_and_grads(out, {x, w, b}, randn(out.shape()));
    });
  }
}

// ---- batch_norm: fewer channels than threads, many positions per channel (each thread owns
// whole channels: a thread may get none), training (batch statistics, running statistics
// updated) and eval.
TEST(ThreadDeterminism, BatchNormForwardBackward) {
  for (const Shape& shape : {Shape{1, 1, 150, 150}, Shape{4, 2, 90, 90}, Shape{3, 5, 40, 40}}) {
    SCOPED_TRACE(format_shape(shape));
    manual_seed(37);
    Tensor x = leaf(randn(shape) * 3 + 1);
    Tensor w = leaf(randn({shape[1]})), b = leaf(randn({shape[1]}));
    for (bool training : {true, false}) {
      expect_same_bits_at_1_2_3_threads([&] {
        Tensor rm = zeros({shape[1]}), rv = ones({shape[1]});
        Tensor out = batch_norm(x, rm, rv, w, b, training);
        std::vector<Tensor> r = value_and_grads(out, {x, w, b}, randn(out.shape()));
        r.push_back(rm);
        r.push_back(rv);
        return r;
      });
    }
  }
}

// ---- convolution: batch 1, few channels, many positions: the GEMM path (weight gradient slots
// and blocks), the direct paths and the bias gradient; normal and transposed.
TEST(ThreadDeterminism, ConvolutionBatchOne) {
  struct Case {
    Shape x, w;
    int64_t stride, pad, groups;
    bool transposed;
  };
  for (const Case& c : {Case{{1, 3, 96, 96}, {4, 3, 3, 3}, 1, 1, 1, false}, Case{{1, 2, 80, 80}, {3, 2, 5, 5}, 2, 2, 1, false},
                        Case{{1, 4, 64, 64}, {4, 1, 3, 3}, 1, 1, 4, false}, Case{{1, 3, 100, 100}, {5, 3, 1, 1}, 1, 0, 1, false},
                        Case{{1, 20, 64, 64}, {40, 20, 3, 3}, 1, 1, 1, false},
                        Case{{1, 3, 48, 48}, {3, 2, 3, 3}, 2, 1, 1, true}}) {
    SCOPED_TRACE(format_shape(c.x) + " w " + format_shape(c.w));
    manual_seed(37);
    Tensor x = leaf(randn(c.x)), w = leaf(randn(c.w));
    Tensor b = leaf(randn({c.transposed ? c.w[1] * c.groups : c.w[0]}));
    expect_same_bits_at_1_2_3_threads([&] {
      Tensor out = convolution(x, w, b, {c.stride}, {c.pad}, {1}, c.transposed, {c.transposed ? 1 : 0}, c.groups);
      return value_and_grads(out, {x, w, b}, randn(out.shape()));
    });
  }
}

// ---- pooling: few planes of many positions (a plane is the unit of parallel work).
TEST(ThreadDeterminism, PoolingBackward) {
  manual_seed(38);
  Tensor x = leaf(randn({1, 3, 200, 190}));
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = max_pool2d(x, {3}, {2}, {1});
    return value_and_grads(out, {x}, randn(out.shape()));
  });
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = avg_pool2d(x, {3}, {2}, {1});
    return value_and_grads(out, {x}, randn(out.shape()));
  });
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = adaptive_avg_pool2d(x, {7, 9});
    return value_and_grads(out, {x}, randn(out.shape()));
  });
}

// ---- reductions over long rows, few of them (and over many rows, few columns).
TEST(ThreadDeterminism, Reductions) {
  manual_seed(39);
  Tensor a = leaf(randn({2, 60000}) * 5 + 3), t = leaf(randn({3, 40000}));
  Tensor tall = leaf(randn({40000, 3}));
  expect_same_bits_at_1_2_3_threads([&] {
    std::vector<Tensor> outs{sum(a), mean(a), sum(a, {1}), mean(a, {1}), var(a, {1}), var(a), sum(tall, {0}),
                             var(tall, {0}), max(a, 1).values, min(a, 1).values, max(a)};
    std::vector<Tensor> r = outs;
    Tensor s = sum(outs[0]) * 0.5;
    for (size_t i = 1; i < outs.size(); ++i) s = s + sum(outs[i]) * (0.1 * double(i));
    std::vector<Tensor> grads = grad({s}, {a, tall});
    r.insert(r.end(), grads.begin(), grads.end());
    return r;
  });
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor g = randn({3, 40000});
    std::vector<Tensor> r = value_and_grads(softmax(t, 1), {t}, g);
    std::vector<Tensor> r2 = value_and_grads(log_softmax(t, 1), {t}, g);
    std::vector<Tensor> r3 = value_and_grads(softmax(tall, 0), {tall}, randn({40000, 3}));
    r.insert(r.end(), r2.begin(), r2.end());
    r.insert(r.end(), r3.begin(), r3.end());
    return r;
  });
}

TEST(ThreadDeterminism, Losses) {
  manual_seed(40);
  Tensor logits = leaf(randn({3, 30000})), logits_tall = leaf(randn({30000, 3}));
  Tensor target = randint(0, 30000, {3}), target_tall = randint(0, 3, {30000});
  Tensor x = leaf(randn({200000})), y = rand({200000});
  expect_same_bits_at_1_2_3_threads([&] {
    std::vector<Tensor> outs{cross_entropy(logits, target), cross_entropy(logits, target, {Reduction::Mean, -100, 0.1}),
                             cross_entropy(logits_tall, target_tall), mse_loss(x, y), l1_loss(x, y),
                             smooth_l1_loss(x, y), binary_cross_entropy_with_logits(x, y),
                             sigmoid_focal_loss(x, y, 0.25, 2.0, Reduction::Mean)};
    std::vector<Tensor> r = outs;
    Tensor s = outs[0];
    for (size_t i = 1; i < outs.size(); ++i) s = s + outs[i] * (0.3 * double(i));
    std::vector<Tensor> grads = grad({s}, {logits, logits_tall, x});
    r.insert(r.end(), grads.begin(), grads.end());
    return r;
  });
}

// ---- layer_norm: the weight and bias gradients sum over the rows.
TEST(ThreadDeterminism, LayerNorm) {
  manual_seed(41);
  for (Shape s : {Shape{30000, 8}, Shape{2, 70000}, Shape{3000, 64}}) {
    SCOPED_TRACE(format_shape(s));
    Tensor x = leaf(randn(s) * 2 + 1), w = leaf(randn({s[1]})), b = leaf(randn({s[1]}));
    expect_same_bits_at_1_2_3_threads([&] {
      Tensor out = layer_norm(x, {s[1]}, w, b);
      return value_and_grads(out, {x, w, b}, randn(s));
    });
  }
}

// ---- embedding and index backward: many tokens onto few rows (scatter-adds).
TEST(ThreadDeterminism, EmbeddingAndIndexBackward) {
  manual_seed(42);
  Tensor w = leaf(randn({5, 24})), idx = randint(0, 5, {4000, 30});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = embedding(w, idx);
    return value_and_grads(out, {w}, randn(out.shape()));
  });
  Tensor x = leaf(randn({6, 40})), sel = randint(0, 6, {20000});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = index_select(x, 0, sel);
    return value_and_grads(out, {x}, randn(out.shape()));
  });
  Tensor xt = leaf(randn({200, 6})), sel1 = randint(0, 6, {4000});
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = index_select(xt, 1, sel1);
    return value_and_grads(out, {xt}, randn(out.shape()));
  });
  Tensor gi = randint(0, 4, {2, 60000});
  Tensor xg = leaf(randn({2, 4}));
  expect_same_bits_at_1_2_3_threads([&] {
    Tensor out = gather(xg, 1, gi);
    return value_and_grads(out, {xg}, randn(out.shape()));
  });
}

// ---- sum_to: a broadcast operand's gradient sums over the broadcast rows.
TEST(ThreadDeterminism, BroadcastGradientSumTo) {
  manual_seed(43);
  Tensor a = leaf(randn({1, 16})), b = leaf(randn({50000, 16})), c = leaf(randn({30000, 1})),
         d = leaf(randn({1, 8}));
  expect_same_bits_at_1_2_3_threads([&] {
    std::vector<Tensor> r = value_and_grads(a * b, {a, b}, randn({50000, 16}));
    std::vector<Tensor> r2 = value_and_grads(c + d * 0.5, {c, d}, randn({30000, 8}));
    r.insert(r.end(), r2.begin(), r2.end());
    return r;
  });
}

}  // namespace
}  // namespace tg
