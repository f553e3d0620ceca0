// The pooling kernels' public API (pool_kernels.h): pool_output_size, and the entry points,
// which forward to the copy of the kernels (pool_kernels.cpp) compiled for the active
// instruction set (ops/internal/isa_dispatch.h).
#include "pool_kernels.h"

#include "../internal/isa_dispatch.h"

namespace tg::kernels {

namespace {

// floor(a / b) for b > 0, any sign of a (aten's div_rtn).
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  // In ceil mode the last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

TG_ISA_DECLARE(
    template <class T> void max_pool2d_forward(const T*, T*, int64_t*, const Pool2dParams&);
    template <class T> void max_pool2d_backward(const T*, const int64_t*, T*, const Pool2dParams&);
    template <class T> void max_pool2d_gather(const T*, const int64_t*, T*, const Pool2dParams&);
    template <class T> void avg_pool2d_forward(const T*, T*, const Pool2dParams&, bool, int64_t);
    template <class T> void avg_pool2d_backward(const T*, T*, const Pool2dParams&, bool, int64_t);
    template <class T> void adaptive_avg_pool3d_forward(const T*, T*, const AdaptivePoolParams&);
    template <class T> void adaptive_avg_pool3d_backward(const T*, T*, const AdaptivePoolParams&);)

template <class T>
void max_pool2d_forward(const T* x, T* y, int64_t* indices, const Pool2dParams& p) {
  TG_ISA_DISPATCH(max_pool2d_forward<T>)(x, y, indices, p);
}

template <class T>
void max_pool2d_backward(const T* grad_y, const int64_t* indices, T* grad_x, const Pool2dParams& p) {
  TG_ISA_DISPATCH(max_pool2d_backward<T>)(grad_y, indices, grad_x, p);
}

template <class T>
void max_pool2d_gather(const T* x, const int64_t* indices, T* y, const Pool2dParams& p) {
  TG_ISA_DISPATCH(max_pool2d_gather<T>)(x, indices, y, p);
}

template <class T>
void avg_pool2d_forward(const T* x, T* y, const Pool2dParams& p, bool count_include_pad, int64_t divisor_override) {
  TG_ISA_DISPATCH(avg_pool2d_forward<T>)(x, y, p, count_include_pad, divisor_override);
}

template <class T>
void avg_pool2d_backward(const T* grad_y, T* grad_x, const Pool2dParams& p, bool count_include_pad,
                         int64_t divisor_override) {
  TG_ISA_DISPATCH(avg_pool2d_backward<T>)(grad_y, grad_x, p, count_include_pad, divisor_override);
}

template <class T>
void adaptive_avg_pool3d_forward(const T* x, T* y, const AdaptivePoolParams& p) {
  TG_ISA_DISPATCH(adaptive_avg_pool3d_forward<T>)(x, y, p);
}

template <class T>
void adaptive_avg_pool3d_backward(const T* grad_y, T* grad_x, const AdaptivePoolParams& p) {
  TG_ISA_DISPATCH(adaptive_avg_pool3d_backward<T>)(grad_y, grad_x, p);
}

#define TG_INSTANTIATE_POOL(T)                                                                                   \
  template void max_pool2d_forward<T>(const T*, T*, int64_t*, const Pool2dParams&);                              \
  template void max_pool2d_backward<T>(const T*, const int64_t*, T*, const Pool2dParams&);                       \
  template void max_pool2d_gather<T>(const T*, const int64_t*, T*, const Pool2dParams&);                         \
  template void avg_pool2d_forward<T>(const T*, T*, const Pool2dParams&, bool, int64_t);                         \
  template void avg_pool2d_backward<T>(const T*, T*, const Pool2dParams&, bool, int64_t);                        \
  template void adaptive_avg_pool3d_forward<T>(const T*, T*, const AdaptivePoolParams&);                      \
  template void adaptive_avg_pool3d_backward<T>(const T*, T*, const AdaptivePoolParams&);
TG_INSTANTIATE_POOL(float)
TG_INSTANTIATE_POOL(double)
#undef TG_INSTANTIATE_POOL

}  // namespace tg::kernels
