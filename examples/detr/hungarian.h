// Minimum-cost assignment (scipy.optimize.linear_sum_assignment's contract), our own
// implementation: the O(n^2 m) shortest-augmenting-path Hungarian algorithm with potentials
// (Kuhn-Munkres as Jonker and Volgenant refined it). Rectangular matrices assign every row of
// the shorter side exactly once; DETR's matcher calls it with queries x targets.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tg::detr {

// cost: rows x cols, row-major, finite. Returns min(rows, cols) (row, col) pairs sorted by row
// whose total cost is minimal. Throws tg::Error on a size mismatch or a non-finite cost.
std::vector<std::pair<int64_t, int64_t>> linear_sum_assignment(const std::vector<double>& cost, int64_t rows,
                                                               int64_t cols);

}  // namespace tg::detr
