// The data pointer of an optional tensor argument (a weight, a bias, a gradient an output mask
// did not ask for): null when the tensor is undefined, for kernels that take null as "absent".
#pragma once

#include "../../framework/tensor.h"

namespace tg {

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* ptr_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace tg
