// The factory of openreg tensors, as at::cuda::empty_strided_cuda is CUDA's.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include "core/Macros.h"

namespace openreg {

// A new tensor in the current device's memory, from the caching allocator on the current stream:
// what openreg's empty_strided kernel returns, and what the engine gives its outputs without a
// dispatch (csrc/aten/engine/AsyncPath.cpp).
OPENREG_TORCH_API at::Tensor emptyStridedOnDevice(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                                  c10::ScalarType dtype);

}  // namespace openreg
