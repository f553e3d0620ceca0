// The loops of the pointwise kernels (pointwise_kernels.cpp, activation_kernels.cpp): a
// function of one or two values over rows of any strides (framework/strided_loop.h), with the
// common layouts (contiguous, one operand broadcast) as loops the compiler vectorises. Only
// kernel files include this; each compile gets its own copy (ops/internal/isa_dispatch.h).
#pragma once

#include "../../framework/strided_loop.h"
#include "../pointwise_kernels.h"
#include "isa_dispatch.h"

#include <array>
#include <cstdint>
#include <vector>

namespace tg::kernels::TG_ISA_NS {

// y = f(x); strides in elements (see pointwise_kernels.h).
template <class T, class F>
void map_rows(const T* x, T* y, const std::vector<int64_t>& shape, const std::vector<int64_t>& x_strides,
              const std::vector<int64_t>& y_strides, F f) {
  for_each_row<2>(shape, {y_strides, x_strides}, [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
    T* yr = y + off[0];
    const T* xr = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) yr[i] = f(xr[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i * st[0]] = f(xr[i * st[1]]);
    }
  });
}

// out = f(a, b).
template <class T, class F>
void map_rows(const T* a, const T* b, T* out, const std::vector<int64_t>& shape, const std::vector<int64_t>& a_strides,
              const std::vector<int64_t>& b_strides, const std::vector<int64_t>& out_strides, F f) {
  for_each_row<3>(shape, {out_strides, a_strides, b_strides},
                  [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
                    T* o = out + off[0];
                    const T* ra = a + off[1];
                    const T* rb = b + off[2];
                    if (st[0] != 1) {
                      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(ra[i * st[1]], rb[i * st[2]]);
                    } else if (st[1] == 1 && st[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) o[i] = f(ra[i], rb[i]);
                    } else if (st[1] == 1 && st[2] == 0) {
                      const T s = *rb;
                      for (int64_t i = 0; i < n; ++i) o[i] = f(ra[i], s);
                    } else if (st[1] == 0 && st[2] == 1) {
                      const T s = *ra;
                      for (int64_t i = 0; i < n; ++i) o[i] = f(s, rb[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) o[i] = f(ra[i * st[1]], rb[i * st[2]]);
                    }
                  });
}

// The activations of Unary and Binary, in activation_kernels.cpp (pointwise_kernels.cpp holds
// the rest and hands these over): false when f is not one of them.
template <class T>
bool activation_unary(Unary f, const T* x, T* y, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides);
template <class T>
bool activation_binary(Binary f, const T* a, const T* b, T* out, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& a_strides, const std::vector<int64_t>& b_strides,
                       const std::vector<int64_t>& out_strides);

}  // namespace tg::kernels::TG_ISA_NS
