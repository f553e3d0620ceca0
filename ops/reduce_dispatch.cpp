// The reduction kernels' entry points (reduce_kernels.h): each forwards to the copy of
// reduce_kernels.cpp compiled for the active instruction set (ops/internal/isa_dispatch.h).
#include "reduce_kernels.h"

#include "internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T> void sum_rows(const T*, T*, int64_t, int64_t, double);
    template <class T> void var_rows(const T*, T*, int64_t, int64_t, double);
    template <class T> void var_backward(const T*, const T*, T*, int64_t, int64_t, double);
    template <class T>
    void row_extremes(const T*, int64_t, int64_t, bool, T*, int64_t*);
    template <class T> void extreme_weights(const T*, int64_t, T, T, T*);)

template <class T>
void sum_rows(const T* x, T* out, int64_t outer, int64_t R, double scale) {
  TG_ISA_DISPATCH(sum_rows<T>)(x, out, outer, R, scale);
}

template <class T>
void var_rows(const T* x, T* out, int64_t outer, int64_t R, double correction) {
  TG_ISA_DISPATCH(var_rows<T>)(x, out, outer, R, correction);
}

template <class T>
void var_backward(const T* g, const T* x, T* dx, int64_t outer, int64_t R, double correction) {
  TG_ISA_DISPATCH(var_backward<T>)(g, x, dx, outer, R, correction);
}

template <class T>
void row_extremes(const T* x, int64_t outer, int64_t R, bool is_max, T* values, int64_t* indices) {
  TG_ISA_DISPATCH(row_extremes<T>)(x, outer, R, is_max, values, indices);
}

template <class T>
void extreme_weights(const T* x, int64_t n, T best, T total, T* w) {
  TG_ISA_DISPATCH(extreme_weights<T>)(x, n, best, total, w);
}

#define TG_INSTANTIATE(T)                                                                \
  template void sum_rows<T>(const T*, T*, int64_t, int64_t, double);                     \
  template void var_rows<T>(const T*, T*, int64_t, int64_t, double);                     \
  template void var_backward<T>(const T*, const T*, T*, int64_t, int64_t, double);       \
  template void extreme_weights<T>(const T*, int64_t, T, T, T*);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
template void row_extremes<float>(const float*, int64_t, int64_t, bool, float*, int64_t*);
template void row_extremes<double>(const double*, int64_t, int64_t, bool, double*, int64_t*);
template void row_extremes<int64_t>(const int64_t*, int64_t, int64_t, bool, int64_t*, int64_t*);
template void row_extremes<int32_t>(const int32_t*, int64_t, int64_t, bool, int32_t*, int64_t*);
template void row_extremes<BFloat16>(const BFloat16*, int64_t, int64_t, bool, BFloat16*, int64_t*);
template void row_extremes<Float16>(const Float16*, int64_t, int64_t, bool, Float16*, int64_t*);

}  // namespace tg::kernels
