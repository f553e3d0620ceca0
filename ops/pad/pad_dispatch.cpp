// The padding kernels' public API (pad_kernels.h): entry points that forward to the copy of the
// kernels (pad_kernels.cpp) compiled for the active instruction set (ops/internal/isa_dispatch.h).
#include "pad_kernels.h"

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T> void pad_forward(const T*, T*, const PadGeometry&, PadMode);
    template <class T> void pad_backward(const T*, T*, const PadGeometry&, PadMode);)

template <class T>
void pad_forward(const T* x, T* y, const PadGeometry& g, PadMode mode) {
  TG_ISA_DISPATCH(pad_forward<T>)(x, y, g, mode);
}

template <class T>
void pad_backward(const T* grad_y, T* grad_x, const PadGeometry& g, PadMode mode) {
  TG_ISA_DISPATCH(pad_backward<T>)(grad_y, grad_x, g, mode);
}

TG_PAD_INSTANTIATE_ALL

}  // namespace tg::kernels
