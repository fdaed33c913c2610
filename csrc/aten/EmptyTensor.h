// The factories of openreg tensors, as ATen's cuda/EmptyTensor.h has CUDA's (empty_cuda,
// empty_strided_cuda): new tensors in the current device's memory, from the caching allocator on
// the current stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <optional>

#include "core/Macros.h"

namespace openreg {

// What openreg's empty kernel returns.
OPENREG_TORCH_API at::Tensor emptyOnDevice(c10::IntArrayRef sizes, c10::ScalarType dtype,
                                           std::optional<c10::MemoryFormat> memoryFormat);

// What openreg's empty_strided kernel returns, and what the engine gives its outputs without a
// dispatch (csrc/aten/engine/AsyncPath.cpp).
OPENREG_TORCH_API at::Tensor emptyStridedOnDevice(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                                  c10::ScalarType dtype);

}  // namespace openreg
