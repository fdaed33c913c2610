#include "aten/EmptyTensor.h"

#include <ATen/EmptyTensor.h>

#include "core/allocator/DeviceAllocator.h"

namespace openreg {
namespace {

constexpr c10::DispatchKeySet kOpenRegKeys{c10::DispatchKey::PrivateUse1};

}  // namespace

at::Tensor emptyOnDevice(c10::IntArrayRef sizes, c10::ScalarType dtype,
                         std::optional<c10::MemoryFormat> memoryFormat) {
  return at::detail::empty_generic(sizes, &deviceAllocator(), kOpenRegKeys, dtype, memoryFormat);
}

// [marker: empty-strided-on-device]
at::Tensor emptyStridedOnDevice(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, &deviceAllocator(), kOpenRegKeys, dtype);
}

}  // namespace openreg
