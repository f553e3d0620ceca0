// Running a computation on every instruction-set path this CPU has (framework/isa.h) and
// comparing each path's tensors with the generic path's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::testing {

// Runs fn on each supported path. Every tensor it returns must match the generic path's:
// |x - x_generic| <= tol * max|x_generic| elementwise (NaN where the generic path has NaN,
// the same infinities), or bit for bit when tol == 0. Paths this CPU lacks are listed in the
// test's output as skipped.
inline void expect_same_on_every_isa(const std::function<std::vector<Tensor>()>& fn,
                                     double tol) {
  std::vector<Tensor> reference;
  {
    IsaGuard guard(Isa::Generic);
    reference = fn();
  }
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) {
      std::cout << "[ skipped ] path " << isa_name(isa) << ": this CPU lacks it\n";
      continue;
    }
    std::vector<Tensor> got;
    {
      IsaGuard guard(isa);
      got = fn();
    }
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(std::string("path ") + isa_name(isa) + ", output " + std::to_string(i));
      ASSERT_EQ(got[i].shape(), reference[i].shape());
      std::vector<double> a = got[i].to(DType::Float64).to_vector<double>();
      std::vector<double> b = reference[i].to(DType::Float64).to_vector<double>();
      double scale = 0;
      for (double v : b)
        if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
      double worst = 0;
      size_t mismatches = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        if (std::isnan(b[k]) || std::isinf(b[k])) {
          if (!(std::isnan(b[k]) ? std::isnan(a[k]) : a[k] == b[k])) ++mismatches;
          continue;
        }
        double d = std::fabs(a[k] - b[k]);
        if (!(d <= tol * scale)) ++mismatches;
        if (std::isfinite(d)) worst = std::max(worst, d);
      }
      EXPECT_EQ(mismatches, 0u) << "worst |difference| " << worst << ", max|generic| " << scale
                                << ", tolerance " << tol << " x max";
    }
  }
}

}  // namespace tg::testing
