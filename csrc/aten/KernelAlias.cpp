#include "aten/KernelAlias.h"

#include <ATen/ops/from_blob.h>
#include <openreg/runtime.h>

#include "core/Exception.h"

namespace openreg {

// [marker: kernel-alias]
at::Tensor kernelAlias(const at::Tensor& deviceTensor) {
  void* kernelPtr = nullptr;
  if (deviceTensor.data_ptr() != nullptr) {
    OPENREG_CHECK(orGetKernelPointer(&kernelPtr, deviceTensor.data_ptr()));
  }
  return at::from_blob(
      kernelPtr, deviceTensor.sizes(), deviceTensor.strides(), [](void*) {},
      deviceTensor.options().device(at::kCPU));
}

}  // namespace openreg
