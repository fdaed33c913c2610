// Walking an operator's boxed arguments: shared by the engine and the copying fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace openreg::engine {

inline bool isOpenReg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Applies `fn` to every tensor inside an argument (a tensor, a list, a list of optionals).
template <class F>
void forEachTensor(const c10::IValue& value, F&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

}  // namespace openreg::engine
