#include "hungarian.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <tapegrad/tapegrad.h>

namespace tg::detr {

std::vector<std::pair<int64_t, int64_t>> linear_sum_assignment(const std::vector<double>& cost, int64_t rows,
                                                               int64_t cols) {
  // rows * cols is compared without forming it (it could overflow int64).
  TG_CHECK(rows >= 0 && cols >= 0 && (cols == 0 ? cost.empty() : rows == static_cast<int64_t>(cost.size() / cols) &&
                                                                      cost.size() % cols == 0),
           "linear_sum_assignment: expected ", rows, " x ", cols, " costs, got ", cost.size());
  double largest = 0;
  for (double c : cost) {
    TG_CHECK(std::isfinite(c), "linear_sum_assignment: costs must be finite, got ", c);
    largest = std::max(largest, std::abs(c));
  }
  if (rows == 0 || cols == 0) return {};

  // The algorithm wants n <= m: work on the transpose when there are more rows than columns.
  const bool transposed = rows > cols;
  const int64_t n = transposed ? cols : rows, m = transposed ? rows : cols;
  // Reduced costs a - u - v span up to twice the costs' range: costs near the double range
  // (+-1e308) would overflow them to inf and the search would never end. A power of two
  // scales them exactly (the optimal assignment is the same; only subnormal costs, far below
  // an ulp of costs that large, lose bits) into a range that cannot.
  const double scale = largest > std::ldexp(1.0, 1000) ? std::ldexp(1.0, -24) : 1.0;
  auto a = [&](int64_t i, int64_t j) { return scale * (transposed ? cost[j * cols + i] : cost[i * cols + j]); };

  // 1-based arrays; column 0 is the virtual start of each augmenting path.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1, 0.0), v(m + 1, 0.0);
  std::vector<int64_t> p(m + 1, 0), way(m + 1, 0);  // p[j]: the row assigned to column j
  for (int64_t i = 1; i <= n; ++i) {
    p[0] = i;
    int64_t j0 = 0;
    std::vector<double> minv(m + 1, inf);
    std::vector<char> used(m + 1, 0);
    do {  // Dijkstra on reduced costs until a free column is reached
      used[j0] = 1;
      const int64_t i0 = p[j0];
      double delta = inf;
      int64_t j1 = 0;
      for (int64_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = a(i0 - 1, j - 1) - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int64_t j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      TG_CHECK(j1 != 0, "linear_sum_assignment: internal error: no column reachable from row ", i0 - 1);
      j0 = j1;
    } while (p[j0] != 0);
    do {  // flip the augmenting path
      const int64_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }

  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t j = 1; j <= m; ++j) {
    if (p[j] == 0) continue;
    if (transposed)
      out.emplace_back(j - 1, p[j] - 1);
    else
      out.emplace_back(p[j] - 1, j - 1);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tg::detr
