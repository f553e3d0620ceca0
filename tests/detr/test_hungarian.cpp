// Our Hungarian algorithm against brute force (every injective row->column map) on random
// square and rectangular matrices, plus a case with a known unique answer.
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <limits>
#include <functional>
#include <numeric>
#include <set>

#include "detr/hungarian.h"
#include <tapegrad/tapegrad.h>

namespace tg::detr {
namespace {

using Pair = std::pair<int64_t, int64_t>;

double brute_force_min(const std::vector<double>& cost, int64_t rows, int64_t cols) {
  // Assign each element of the shorter side to a distinct element of the longer side.
  const bool by_rows = rows <= cols;
  const int64_t n = by_rows ? rows : cols, m = by_rows ? cols : rows;
  std::vector<char> used(m, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int64_t, double)> go = [&](int64_t i, double acc) {
    if (i == n) {
      best = std::min(best, acc);
      return;
    }
    for (int64_t j = 0; j < m; ++j) {
      if (used[j]) continue;
      used[j] = 1;
      go(i + 1, acc + (by_rows ? cost[i * cols + j] : cost[j * cols + i]));
      used[j] = 0;
    }
  };
  go(0, 0.0);
  return best;
}

TEST(DetrHungarian, MatchesBruteForceOnRandomMatrices) {
  Generator g(7);
  int checked = 0;
  for (int64_t rows = 1; rows <= 6; ++rows) {
    for (int64_t cols = 1; cols <= 6; ++cols) {
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<double> cost(rows * cols);
        // Integers on half the trials: many ties, the hard case for a wrong implementation.
        for (double& c : cost) c = trial % 2 ? g.next_double() * 10 - 3 : static_cast<double>(g.next_u64() % 4);
        auto pairs = linear_sum_assignment(cost, rows, cols);
        ASSERT_EQ(static_cast<int64_t>(pairs.size()), std::min(rows, cols));
        std::set<int64_t> rs, cs;
        double total = 0;
        for (auto [r, c] : pairs) {
          ASSERT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols);
          rs.insert(r);
          cs.insert(c);
          total += cost[r * cols + c];
        }
        EXPECT_EQ(rs.size(), pairs.size());
        EXPECT_EQ(cs.size(), pairs.size());
        EXPECT_TRUE(std::is_sorted(pairs.begin(), pairs.end()));
        // Sums of at most 6 values of magnitude <= 10: 1e-9 is far above the rounding.
        EXPECT_NEAR(total, brute_force_min(cost, rows, cols), 1e-9) << rows << "x" << cols << " trial " << trial;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * 6 * 8);
}

TEST(DetrHungarian, KnownAnswer) {
  // The greedy choice (row 0 -> col 0, cost 1) is wrong: the optimum is 0->1, 1->0 (2 + 2).
  std::vector<double> cost = {1, 2, 2, 100};
  auto pairs = linear_sum_assignment(cost, 2, 2);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0], Pair(0, 1));
  EXPECT_EQ(pairs[1], Pair(1, 0));
  // Tall: 3 queries, 1 target; the cheapest query wins.
  auto tall = linear_sum_assignment({5, -1, 3}, 3, 1);
  ASSERT_EQ(tall.size(), 1u);
  EXPECT_EQ(tall[0], Pair(1, 0));
  EXPECT_TRUE(linear_sum_assignment({}, 4, 0).empty());
}

TEST(DetrHungarian, RejectsBadInput) {
  EXPECT_THROW(linear_sum_assignment({1, 2, 3}, 2, 2), Error);
  EXPECT_THROW(linear_sum_assignment(std::vector<double>{1, std::nan(""), 3, 4}, 2, 2), Error);
  // rows * cols overflowed int64 to 0, so no costs passed the size check.
  EXPECT_THROW(linear_sum_assignment({}, int64_t(1) << 62, 4), Error);
  EXPECT_THROW(linear_sum_assignment({}, int64_t(1) << 32, int64_t(1) << 32), Error);
  EXPECT_THROW(linear_sum_assignment({1}, 1, 0), Error);
}

// Costs near the double range: the reduced costs overflowed to inf and the search never ended
// (scipy returns the optimum). The optimum is unique here, so the pairs are known.
TEST(DetrHungarian, CostsNearTheDoubleRangeFindTheOptimum) {
  const double big = std::numeric_limits<double>::max();
  for (double c : {big, 1e308, 9e307}) {
    auto pairs = linear_sum_assignment({c, -c, -c, c}, 2, 2);
    ASSERT_EQ(pairs.size(), 2u) << c;
    EXPECT_EQ(pairs[0], Pair(0, 1)) << c;
    EXPECT_EQ(pairs[1], Pair(1, 0)) << c;
  }
  auto wide = linear_sum_assignment({big, -big, 0, -big, big, 1e-300}, 2, 3);
  ASSERT_EQ(wide.size(), 2u);
  EXPECT_EQ(wide[0], Pair(0, 1));
  EXPECT_EQ(wide[1], Pair(1, 0));
}

}  // namespace
}  // namespace tg::detr
