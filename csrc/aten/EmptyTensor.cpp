#include "aten/EmptyTensor.h"

#include <ATen/EmptyTensor.h>

#include "core/allocator/DeviceAllocator.h"

namespace openreg {

at::Tensor emptyStridedOnDevice(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, &deviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype);
}

}  // namespace openreg
