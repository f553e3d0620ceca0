// The 16-bit floating dtypes and int32 as tensors: conversions bit for bit (every pattern, and
// PyTorch's rounding on edge values), creation, printing, item, views and copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <tapegrad/tapegrad.h>

#include "golden.h"

namespace tg {
namespace {

template <class H>
std::vector<H> all_patterns() {
  std::vector<H> v(65536);
  for (uint32_t b = 0; b < 65536; ++b) v[b] = H::from_bits(static_cast<uint16_t>(b));
  return v;
}

// Through float32 every pattern comes back bit for bit (the conversions are integer operations).
// Through float64 too, except that a signalling NaN comes back quiet (its quiet bit set, sign and
// payload kept): the FPU's float -> double conversion quiets it, as it does for any float.
template <class H>
void expect_round_trip(DType dtype, DType via) {
  Tensor t = from_vector(all_patterns<H>(), {65536});
  Tensor back = t.to(via).to(dtype);
  const H* p = back.data<H>();
  const uint16_t exponent = std::is_same_v<H, BFloat16> ? 0x7f80 : 0x7c00;
  const uint16_t quiet = std::is_same_v<H, BFloat16> ? 0x0040 : 0x0200;
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const bool signalling_nan = (b & exponent) == exponent && (b & ~exponent & 0x7fff) != 0 && !(b & quiet);
    const uint32_t want = via == DType::Float64 && signalling_nan ? (b | quiet) : b;
    if (p[b].bits != want && mismatches++ < 5) ADD_FAILURE() << dtype_name(dtype) << " pattern 0x" << std::hex << b
                                                          << " came back from " << dtype_name(via) << " as 0x"
                                                          << p[b].bits;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Dtypes16Bit, EveryPatternSurvivesFloat32AndFloat64) {
  expect_round_trip<BFloat16>(DType::BFloat16, DType::Float32);
  expect_round_trip<BFloat16>(DType::BFloat16, DType::Float64);
  expect_round_trip<Float16>(DType::Float16, DType::Float32);
  expect_round_trip<Float16>(DType::Float16, DType::Float64);
}

// An independent decoding of float16: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double decode_fp16(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? std::nan("") : INFINITY) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

TEST(Dtypes16Bit, Float16DecodesToItsValue) {
  Tensor t = from_vector(all_patterns<Float16>(), {65536}).to(DType::Float64);
  const double* p = t.data<double>();
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode_fp16(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(p[b])) << std::hex << b;
      ASSERT_EQ(std::signbit(p[b]), (b >> 15) != 0) << std::hex << b;
    } else {
      ASSERT_EQ(p[b], want) << std::hex << b;
      ASSERT_EQ(std::signbit(p[b]), std::signbit(want)) << std::hex << b;  // -0 stays -0
    }
  }
}

TEST(Dtypes16Bit, BFloat16DecodesToTheTopHalfOfAFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t u = b << 16;
    float want;
    std::memcpy(&want, &u, 4);
    const float got = BFloat16::from_bits(static_cast<uint16_t>(b));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << b;
    else ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << std::hex << b;
  }
}

// PyTorch 1.13's rounding of 9,324 float32 values (tools/fixtures/half_conversions.py): ties at
// many exponents and their neighbours, float16 subnormals, overflow to inf, signed zeros, NaN.
// Non-NaN results must match bit for bit. NaN must stay NaN; its bits are not compared because
// PyTorch itself gives different NaN patterns on its scalar and vector paths.
template <class H>
void expect_matches_pytorch(DType dtype, const char* bits_file) {
  Tensor values = load_npy(testing::data_path("half_conversions/values.npy"));
  Tensor want = load_npy(testing::data_path(std::string("half_conversions/") + bits_file));
  ASSERT_EQ(values.numel(), want.numel());
  Tensor got = values.to(dtype);
  const H* g = got.data<H>();
  const float* v = values.data<float>();
  const int64_t* w = want.data<int64_t>();
  int mismatches = 0;
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(g[i]))) << "NaN at " << i;
      EXPECT_EQ(g[i].bits >> 15, static_cast<uint16_t>(std::signbit(v[i]))) << "NaN sign at " << i;
      continue;
    }
    if (g[i].bits != w[i] && mismatches++ < 8)
      ADD_FAILURE() << dtype_name(dtype) << ": " << std::setprecision(9) << v[i] << " rounded to 0x" << std::hex
                    << g[i].bits << ", PyTorch gives 0x" << w[i];
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Dtypes16Bit, Float32RoundsAsPyTorchDoes) {
  expect_matches_pytorch<BFloat16>(DType::BFloat16, "bf16_bits.npy");
  expect_matches_pytorch<Float16>(DType::Float16, "fp16_bits.npy");
}

TEST(Dtypes16Bit, NamedEdgeValues) {
  EXPECT_EQ(Float16(65504.0f).bits, 0x7bff);                  // largest finite
  EXPECT_EQ(Float16(65519.996f).bits, 0x7bff);                // just under the halfway point
  EXPECT_EQ(Float16(65520.0f).bits, 0x7c00);                  // the tie rounds to even: inf
  EXPECT_EQ(Float16(-1e6f).bits, 0xfc00);                     // -inf
  EXPECT_EQ(Float16(std::ldexp(1.0f, -24)).bits, 0x0001);     // smallest subnormal
  EXPECT_EQ(Float16(std::ldexp(1.0f, -25)).bits, 0x0000);     // its half: ties to even (0)
  EXPECT_EQ(Float16(std::ldexp(3.0f, -25)).bits, 0x0002);     // 1.5 steps: ties to even (2)
  EXPECT_EQ(Float16(-0.0f).bits, 0x8000);
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);  // tie, even below
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(3.0f, -8)).bits, 0x3f82);  // tie, even above
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // past bf16's largest: inf
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  // A NaN whose payload sits below the kept bits must not turn into inf.
  uint32_t low_payload_nan = 0x7f800001u;
  float f;
  std::memcpy(&f, &low_payload_nan, 4);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(f))));
}

TEST(Dtypes16Bit, Creation) {
  for (DType d : {DType::BFloat16, DType::Float16, DType::Int32}) {
    SCOPED_TRACE(dtype_name(d));
    EXPECT_EQ(dtype_size(d), d == DType::Int32 ? 4u : 2u);
    Tensor z = zeros({2, 3}, d), o = ones({2, 3}, d), f = full({4}, 2.5, d), e = Tensor::empty({5}, d);
    EXPECT_EQ(z.dtype(), d);
    EXPECT_EQ(e.shape(), Shape({5}));
    EXPECT_EQ(sum(z.to(DType::Float64)).item(), 0.0);
    EXPECT_EQ(sum(o.to(DType::Float64)).item(), 6.0);
    EXPECT_EQ(f.select(0, 1).item(), d == DType::Int32 ? 2.0 : 2.5);
    EXPECT_EQ(arange(0, 5, 1, d).to(DType::Float64).to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4}));
  }
  manual_seed(3);
  Tensor r = randn({10000}, DType::BFloat16);
  manual_seed(3);
  Tensor r32 = randn({10000}, DType::Float32);
  EXPECT_EQ(r.to(DType::Float32).to_vector<float>(), r32.to(DType::BFloat16).to(DType::Float32).to_vector<float>())
      << "randn in bf16 is randn in float32 rounded";
  EXPECT_THROW(randn({3}, DType::Int32), Error);
  Tensor v = from_vector(std::vector<int32_t>{1, -2, 3}, {3});
  EXPECT_EQ(v.dtype(), DType::Int32);
  EXPECT_EQ(v.at<int32_t>({1}), -2);
  Tensor h = from_vector(std::vector<Float16>{Float16(0.5f), Float16(-3.0f)}, {2});
  EXPECT_EQ(h.select(0, 0).item<Float16>().bits, Float16(0.5f).bits);
  EXPECT_EQ(h.select(0, 1).item(), -3.0);
}

TEST(Dtypes16Bit, ConversionsBetweenAllDtypes) {
  const std::vector<double> values{0.0, 1.0, -2.5, 100.0, 0.333251953125};
  const std::vector<DType> all{DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int32,
                               DType::Int64};
  Tensor src = from_vector(values, {5});
  for (DType a : all)
    for (DType b : all) {
      Tensor got = src.to(a).to(b).to(DType::Float64);
      Tensor want = src.to(a).to(DType::Float64).to(b).to(DType::Float64);  // through the exact double
      EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << dtype_name(a) << " -> " << dtype_name(b);
    }
  // 16-bit rounding of doubles goes through float32 (PyTorch's conversion does too).
  EXPECT_EQ(from_vector(std::vector<double>{1.0 + std::ldexp(1.0, -9)}, {1}).to(DType::BFloat16).item(), 1.0);
  EXPECT_EQ(from_vector(std::vector<double>{-7.9}, {1}).to(DType::Int32).item(), -7.0);  // toward zero
}

TEST(Dtypes16Bit, ViewsCopiesAndPrinting) {
  Tensor x = arange(0, 12, 1, DType::Float32).reshape({3, 4}).to(DType::BFloat16);
  Tensor t = x.transpose(0, 1);
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.dtype(), DType::BFloat16);
  EXPECT_EQ(c.to(DType::Float64).to_vector<double>(),
            (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor k = x.clone();
  EXPECT_NE(k.data<BFloat16>(), x.data<BFloat16>());
  EXPECT_EQ(x.narrow(1, 1, 2).select(0, 2).to(DType::Float64).to_vector<double>(), (std::vector<double>{9, 10}));
  const std::string s = x.to_string();
  EXPECT_NE(s.find("dtype=bfloat16"), std::string::npos) << s;
  EXPECT_NE(s.find("11"), std::string::npos) << s;
  EXPECT_NE(ones({2}, DType::Float16).to_string().find("dtype=float16"), std::string::npos);
  EXPECT_NE(ones({2}, DType::Int32).to_string().find("dtype=int32"), std::string::npos);
}

TEST(Dtypes16Bit, ToIsDifferentiableAndGradientsKeepTheInputDtype) {
  Tensor x = from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}).requires_grad_();
  Tensor h = x.to(DType::BFloat16);
  EXPECT_TRUE(h.requires_grad());
  Tensor y = h.to(DType::Float32);
  y.backward(ones({3}));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
  Tensor leaf = ones({2}, DType::Float16).requires_grad_();  // 16-bit leaves may require grad
  EXPECT_TRUE(leaf.requires_grad());
  EXPECT_THROW(ones({2}, DType::Int32).requires_grad_(), Error);
}

TEST(Dtypes16Bit, PromoteTypes) {
  using D = DType;
  EXPECT_EQ(promote_types(D::BFloat16, D::Float32), D::Float32);
  EXPECT_EQ(promote_types(D::Float16, D::BFloat16), D::Float32);
  EXPECT_EQ(promote_types(D::Float16, D::Float64), D::Float64);
  EXPECT_EQ(promote_types(D::Int64, D::Float16), D::Float16);
  EXPECT_EQ(promote_types(D::Int32, D::Int64), D::Int64);
  EXPECT_EQ(promote_types(D::Int32, D::Int32), D::Int32);
  EXPECT_EQ(promote_types(D::Float32, D::Float64), D::Float64);
}

TEST(Dtypes16Bit, FloatToIntegerRefusesWhatDoesNotFit) {
  for (double bad : {std::nan(""), static_cast<double>(INFINITY), 3e9, -3e9}) {
    Tensor t = from_vector(std::vector<double>{1.0, bad}, {2});
    EXPECT_THROW(t.to(DType::Int32), Error) << bad;
  }
  EXPECT_THROW(from_vector(std::vector<float>{1e19f}, {1}).to(DType::Int64), Error);
  EXPECT_EQ(from_vector(std::vector<float>{-2147483648.0f}, {1}).to(DType::Int32).item(), -2147483648.0);
}

}  // namespace
}  // namespace tg
