// Shared by the detectors' tests: what every Detector shows on a batch of random images.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>

#include "detr/detector.h"

namespace tg::detr {

// Runs `m` on `batch` random images [batch, 1, canvas, canvas] drawn from `g`; expects logits
// [batch, queries, 11] (the default 10 classes and "no object") and boxes [batch, queries, 4],
// and every one of `names` among the parameters. Returns the output for the caller's checks.
inline DetectorOutput detect_and_check_names(Detector& m, Generator& g, int64_t batch, int64_t canvas, int64_t queries,
                                             std::initializer_list<const char*> names) {
  DetectorOutput out = m.detect(rand({batch, 1, canvas, canvas}, DType::Float32, &g));
  EXPECT_EQ(out.logits.shape(), (Shape{batch, queries, 11}));
  EXPECT_EQ(out.boxes.shape(), (Shape{batch, queries, 4}));
  std::set<std::string> have;
  for (const auto& [n, t] : m.named_parameters()) have.insert(n);
  for (const char* n : names) EXPECT_TRUE(have.count(n)) << n;
  return out;
}

}  // namespace tg::detr
