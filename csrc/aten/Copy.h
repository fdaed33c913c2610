// Copies between the CPU and openreg devices, and between openreg devices (aten::_copy_from).
//
// Note [Copy paths]
// - Same dtype, same shape, both contiguous: one runtime copy (orMemcpyAsync), no kernel; except
//   a copy the caller waits for that involves pinned host memory or 1 MiB or more, which goes as
//   below (the CPU's copy_ then copies with the intra-op threads).
// - Anything else (dtype conversion, broadcasting, strides, conjugate/negative views): one task
//   that runs ATen's CPU copy_ on kernel-window aliases of the device side(s) (KernelAlias.h), so
//   results are exactly the CPU's. A caller that waits gets the task's own failure
//   (openreg::launchAndWait), e.g. a copy of memory a failed kernel wrote (docs/errors.md).
// The work goes on the current stream of the openreg device involved (the destination's, for a
// copy between devices, ordered after the source device's current stream by events).
// Copies between devices are asynchronous, like CUDA's. A copy that involves host memory returns
// when it is complete, unless non_blocking=True and the host memory is pinned. With pageable
// memory a non_blocking copy still completes before returning, because the caller may reuse the
// buffer at once.
#pragma once

#include <ATen/core/Tensor.h>

namespace openreg {

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst);

}  // namespace openreg
