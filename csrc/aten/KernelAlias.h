// Kernel-window aliases: how a task computes on device memory with ATen's own CPU kernels.
//
// kernelAlias(t) is a CPU tensor with t's sizes, strides and dtype whose data pointer is the
// kernel-window address of t's data (orGetKernelPointer). It owns nothing: the device tensor's
// storage keeps the memory alive, and stream order keeps it from being reused while a task that
// holds the alias is queued (see Note [Caching allocator]). Only tasks may touch an alias's data;
// creating it touches no data, so it is cheap and safe on the host.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/Macros.h"

namespace openreg {

OPENREG_TORCH_API at::Tensor kernelAlias(const at::Tensor& deviceTensor);

}  // namespace openreg
