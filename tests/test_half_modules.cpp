// Layers in bfloat16 and float16, end to end: a module converted with Module::to runs forward
// and backward in its 16-bit dtype, its parameters' gradients come back in that dtype, and the
// result is the float32 layer's on the same (rounded) weights and inputs, to the 16-bit dtype's
// accuracy. MSDeformAttn also takes int32 spatial shapes and level starts.
#include <gtest/gtest.h>

#include <cmath>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

// max |a - b| / max |b|, in float64.
double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor da = a.to(DType::Float64), db = b.to(DType::Float64);
  return max(abs(sub(da, db))).item() / std::max(max(abs(db)).item(), 1e-30);
}

struct MsdaInputs {
  Tensor query, reference, flat, shapes, starts;
};

MsdaInputs make_inputs(DType dt, DType index_dtype) {
  manual_seed(5);
  const int64_t N = 2, Lq = 7, D = 32;
  MsdaInputs in;
  in.shapes = from_vector(std::vector<int64_t>{6, 5, 3, 3, 2, 1}, {3, 2}).to(index_dtype);
  in.starts = from_vector(std::vector<int64_t>{0, 30, 39}, {3}).to(index_dtype);
  in.query = randn({N, Lq, D}).to(dt);
  in.reference = rand({N, Lq, 3, 2}).to(dt);
  in.flat = randn({N, 41, D}).to(dt);
  return in;
}

// The layer in `dt` against the same layer in float32 on the dt-rounded weights and inputs.
void check_msda_layer(DType dt, double tol) {
  SCOPED_TRACE(dtype_name(dt));
  manual_seed(1);
  MSDeformAttn low(32, 3, 4, 2);
  {
    NoGradGuard no_grad;  // random weights: the initial zero offsets and weights would test less
    for (Tensor& p : low.parameters()) p.copy_(mul(randn(p.shape()), 0.3));
  }
  low.to(dt);  // the weights rounded once
  MSDeformAttn ref(32, 3, 4, 2);
  ref.load_state_dict(low.state_dict());  // converted back to float32: the same values, exact
  for (auto& [name, p] : low.named_parameters()) EXPECT_EQ(p.dtype(), dt) << name;

  MsdaInputs a = make_inputs(dt, DType::Int32), b = make_inputs(DType::Float32, DType::Int64);
  b.query = a.query.to(DType::Float32);
  b.reference = a.reference.to(DType::Float32);
  b.flat = a.flat.to(DType::Float32);
  a.query.requires_grad_();
  b.query.requires_grad_();
  Tensor out = low.forward(a.query, a.reference, a.flat, a.shapes, a.starts);
  Tensor want = ref.forward(b.query, b.reference, b.flat, b.shapes, b.starts);
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_LT(relative_error(out, want), tol);
  sum(mul(out, out)).backward();
  sum(mul(want, want)).backward();
  ASSERT_TRUE(a.query.grad().defined());
  EXPECT_EQ(a.query.grad().dtype(), dt);
  EXPECT_LT(relative_error(a.query.grad(), b.query.grad()), 4 * tol);
  for (auto& [name, p] : low.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().dtype(), dt) << name;
  }
}

// Tolerances: a bfloat16 value carries 8 significant bits (relative step 2^-8), float16 11
// (2^-11). The layer chains four linear maps, a softmax and the sampling, each rounding its
// output once, so its output is within a few steps; the backward rounds as many times again.
TEST(HalfModules, MSDeformAttnInBFloat16AndFloat16WithInt32Shapes) {
  check_msda_layer(DType::BFloat16, 8 * std::ldexp(1.0, -8));
  check_msda_layer(DType::Float16, 8 * std::ldexp(1.0, -11));
}

TEST(HalfModules, Int32AndInt64ShapesGiveTheSameBits) {
  manual_seed(1);
  MSDeformAttn layer(32, 3, 4, 2);
  MsdaInputs a = make_inputs(DType::Float32, DType::Int32), b = make_inputs(DType::Float32, DType::Int64);
  Tensor x = layer.forward(a.query, a.reference, a.flat, a.shapes, a.starts);
  Tensor y = layer.forward(b.query, b.reference, b.flat, b.shapes, b.starts);
  EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
  EXPECT_THROW(layer.forward(a.query, a.reference, a.flat, a.shapes.to(DType::Float32), a.starts), Error);
}

TEST(HalfModules, ConvGroupNormStackTrainsInBFloat16) {
  manual_seed(2);
  Sequential net;
  net.push_back(std::make_shared<Conv2d>(3, 8, IntList{3}, IntList{1}, IntList{1}));
  net.push_back(std::make_shared<GroupNorm>(2, 8));
  net.push_back(std::make_shared<ReLU>());
  net.push_back(std::make_shared<Conv2d>(8, 2, IntList{1}));
  net.to(DType::BFloat16);
  SGD opt(net.parameters(), SGDOptions{0.05});
  Tensor x = randn({4, 3, 8, 8}).to(DType::BFloat16), target = randn({4, 2, 8, 8}).to(DType::BFloat16);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(net.forward(x), target);
    EXPECT_EQ(loss.dtype(), DType::BFloat16);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.9 * first) << "the bf16 stack should learn";
  for (const Tensor& p : net.parameters()) EXPECT_EQ(p.dtype(), DType::BFloat16);
}

}  // namespace
}  // namespace tg
