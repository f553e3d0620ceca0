// The float32 math-mode setting itself (framework/math_mode.h): the names map as documented, the
// setting is per thread and scoped by its guard, and a cubeMathType outside the spec's four
// values is an error. What each mode computes is tested with the ops (test_gemm_reduced,
// test_conv_reduced).
#include <gtest/gtest.h>

#include <thread>

#include <tapegrad/tapegrad.h>

namespace tg {
namespace {

TEST(MathMode, DefaultIsFloat32AndNamesMapAsDocumented) {
  EXPECT_EQ(float32_math(), Float32Math::Float32);
  EXPECT_EQ(float32_math_precision(), MathPrecision::Highest);
  EXPECT_EQ(to_float32_math(MathPrecision::Highest), Float32Math::Float32);
  EXPECT_EQ(to_float32_math(MathPrecision::High), Float32Math::BFloat16x3);
  EXPECT_EQ(to_float32_math(MathPrecision::Medium), Float32Math::BFloat16);
  EXPECT_EQ(to_float32_math(CubeMathType::KeepDtype), Float32Math::Float32);
  EXPECT_EQ(to_float32_math(CubeMathType::AllowFp32DownPrecision), Float32Math::BFloat16);
  EXPECT_EQ(to_float32_math(CubeMathType::UseFp16), Float32Math::Float16);
  EXPECT_EQ(to_float32_math(CubeMathType::UseHf32), Float32Math::BFloat16x3);
  EXPECT_STREQ(float32_math_name(Float32Math::BFloat16x3), "bf16x3");
}

TEST(MathMode, GuardScopesAndRestores) {
  {
    Float32MathGuard outer(MathPrecision::Medium);
    EXPECT_EQ(float32_math(), Float32Math::BFloat16);
    {
      Float32MathGuard inner(Float32Math::Float16);
      EXPECT_EQ(float32_math(), Float32Math::Float16);
      EXPECT_EQ(float32_math_precision(), MathPrecision::Medium);
    }
    EXPECT_EQ(float32_math(), Float32Math::BFloat16);
    set_float32_math_precision(MathPrecision::High);
    EXPECT_EQ(float32_math(), Float32Math::BFloat16x3);
  }
  EXPECT_EQ(float32_math(), Float32Math::Float32);
}

TEST(MathMode, IsPerThread) {
  Float32MathGuard guard(MathPrecision::Medium);
  Float32Math seen = Float32Math::BFloat16;
  std::thread([&] { seen = float32_math(); }).join();
  EXPECT_EQ(seen, Float32Math::Float32);
  EXPECT_EQ(float32_math(), Float32Math::BFloat16);
}

TEST(MathMode, ExplicitCubeMathTypeOverridesTheThread) {
  Float32MathGuard guard(MathPrecision::Medium);
  EXPECT_EQ(float32_math_or(std::nullopt), Float32Math::BFloat16);
  EXPECT_EQ(float32_math_or(CubeMathType::KeepDtype), Float32Math::Float32);
}

TEST(MathMode, CubeMathTypeOutsideTheSpecIsAnError) {
  try {
    to_float32_math(static_cast<CubeMathType>(7));
    FAIL() << "expected tg::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cubeMathType"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got 7"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tg
