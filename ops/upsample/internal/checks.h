// Argument checks the upsampling ops share (ops/upsample/*.cpp).
#pragma once

#include <cmath>
#include <optional>

#include "../../../framework/check.h"

namespace tg::upsample_checks {

// A user scale factor, when given, must be a positive finite number.
inline void check_scale(const char* op, const char* name, std::optional<double> s) {
  TG_CHECK(!s || (std::isfinite(*s) && *s > 0), op, ": expected ", name, " to be a positive finite number, got ",
           s ? *s : 0.0);
}

}  // namespace tg::upsample_checks
