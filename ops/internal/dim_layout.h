// A tensor seen along one dim, as the kernels of ops that work lane by lane (softmax, index_select,
// gather) walk it: outer x D x inner in C order, D the size of the dim, a lane the D elements
// inner apart. A 0-d tensor is one lane of one element.
#pragma once

#include <cstdint>

#include "../../framework/tensor.h"

namespace tg {

struct DimLayout {
  int64_t outer = 1, D = 1, inner = 1;
};

inline DimLayout dim_layout(const Shape& shape, int64_t dim) {
  DimLayout l;
  if (shape.empty()) return l;
  for (int64_t d = 0; d < dim; ++d) l.outer *= shape[d];
  l.D = shape[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) l.inner *= shape[d];
  return l;
}

}  // namespace tg
