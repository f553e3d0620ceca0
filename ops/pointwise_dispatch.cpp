// The pointwise kernels' public entry points (pointwise_kernels.h): each forwards to the copy of
// pointwise_kernels.cpp / activation_kernels.cpp compiled for the active instruction set
// (ops/internal/isa_dispatch.h).
#include "pointwise_kernels.h"

#include "internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void unary_pointwise(Unary, const PointwiseScalars&, const T*, T*, const std::vector<int64_t>&,
                         const std::vector<int64_t>&, const std::vector<int64_t>&);
    template <class T>
    void binary_pointwise(Binary, const PointwiseScalars&, const T*, const T*, T*, const std::vector<int64_t>&,
                          const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&);)

template <class T>
void unary_pointwise(Unary f, const PointwiseScalars& s, const T* x, T* y, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides) {
  TG_ISA_DISPATCH(unary_pointwise<T>)(f, s, x, y, shape, x_strides, y_strides);
}

template <class T>
void binary_pointwise(Binary f, const PointwiseScalars& s, const T* a, const T* b, T* out,
                      const std::vector<int64_t>& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, const std::vector<int64_t>& out_strides) {
  TG_ISA_DISPATCH(binary_pointwise<T>)(f, s, a, b, out, shape, a_strides, b_strides, out_strides);
}

#define TG_POINTWISE_INSTANTIATE(T)                                                                              \
  template void unary_pointwise<T>(Unary, const PointwiseScalars&, const T*, T*, const std::vector<int64_t>&,    \
                                   const std::vector<int64_t>&, const std::vector<int64_t>&);                    \
  template void binary_pointwise<T>(Binary, const PointwiseScalars&, const T*, const T*, T*,                     \
                                    const std::vector<int64_t>&, const std::vector<int64_t>&,                    \
                                    const std::vector<int64_t>&, const std::vector<int64_t>&);
TG_POINTWISE_INSTANTIATE(float)
TG_POINTWISE_INSTANTIATE(double)
#undef TG_POINTWISE_INSTANTIATE

}  // namespace tg::kernels
