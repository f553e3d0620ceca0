#include "math_mode.h"

#include "check.h"

namespace tg {

namespace {
thread_local Float32Math t_math = Float32Math::Float32;
}

Float32Math to_float32_math(MathPrecision p) {
  switch (p) {
    case MathPrecision::Highest: return Float32Math::Float32;
    case MathPrecision::High: return Float32Math::BFloat16x3;
    case MathPrecision::Medium: return Float32Math::BFloat16;
  }
  TG_CHECK(false, "set_float32_math_precision: precision: expected Highest, High or Medium, got ", int(p));
  return Float32Math::Float32;
}

Float32Math to_float32_math(CubeMathType t) {
  switch (t) {
    case CubeMathType::KeepDtype: return Float32Math::Float32;
    case CubeMathType::AllowFp32DownPrecision: return Float32Math::BFloat16;
    case CubeMathType::UseFp16: return Float32Math::Float16;
    case CubeMathType::UseHf32: return Float32Math::BFloat16x3;
  }
  TG_CHECK(false, "cubeMathType: expected 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), 2 (USE_FP16) or ",
           "3 (USE_HF32), got ", int(t));
  return Float32Math::Float32;
}

Float32Math float32_math() { return t_math; }
void set_float32_math(Float32Math m) { t_math = m; }
void set_float32_math_precision(MathPrecision p) { t_math = to_float32_math(p); }

MathPrecision float32_math_precision() {
  switch (t_math) {
    case Float32Math::Float32: return MathPrecision::Highest;
    case Float32Math::BFloat16x3: return MathPrecision::High;
    case Float32Math::BFloat16:
    case Float32Math::Float16: break;
  }
  return MathPrecision::Medium;
}

const char* float32_math_name(Float32Math m) {
  switch (m) {
    case Float32Math::Float32: return "float32";
    case Float32Math::BFloat16x3: return "bf16x3";
    case Float32Math::BFloat16: return "bf16";
    case Float32Math::Float16: return "fp16";
  }
  return "?";
}

}  // namespace tg
