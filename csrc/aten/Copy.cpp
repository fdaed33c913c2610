#include "aten/Copy.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <openreg/activity.hpp>
#include <openreg/task.hpp>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/TaskWarnings.h"
#include "core/allocator/DeviceAllocator.h"
#include "core/allocator/HostAllocator.h"

namespace openreg {
namespace {

// Orders `later` after the work queued so far on `earlier` (streams of any devices).
void streamWait(const OpenRegStream& later, const OpenRegStream& earlier) {
  if (later == earlier) return;
  DeviceScope scope(earlier.device_index());
  orEvent_t event = nullptr;
  OPENREG_CHECK(orEventCreateWithFlags(&event, orEventDisableTiming));
  OPENREG_CHECK(orEventRecord(event, earlier.stream()));
  OPENREG_CHECK(orStreamWaitEvent(later.stream(), event, 0));
  OPENREG_CHECK(orEventDestroy(event));  // the wait keeps its record alive
}

bool plainBytes(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.sizes().equals(dst.sizes()) && src.is_contiguous() &&
         dst.is_contiguous() && !src.is_conj() && !dst.is_conj() && !src.is_neg() && !dst.is_neg();
}

}  // namespace

// [marker: copy-from]
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(at::is_expandable_to(self.sizes(), dst.sizes()),
              OR_DEVICE_NAME ": copy_: the source shape ", self.sizes(),
              " cannot be broadcast to the destination shape ", dst.sizes());
  if (dst.numel() == 0) return dst;
  // The CPU's copy_ (a TensorIterator) refuses these, in these words.
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  const bool toDevice = isOpenReg(dst);
  const bool fromDevice = isOpenReg(self);
  TORCH_CHECK(toDevice || fromDevice,
              OR_DEVICE_NAME ": _copy_from needs an openreg tensor on one side");
  const at::Tensor& deviceSide = toDevice ? dst : self;
  const OpenRegStream stream = getCurrentOpenRegStream(deviceSide.device().index());
  const bool crossDevice = toDevice && fromDevice && self.device() != dst.device();
  if (crossDevice) streamWait(stream, getCurrentOpenRegStream(self.device().index()));

  // A copy the caller does not wait for: between device memories, or with pinned host memory and
  // non_blocking. Any other copy returns complete, with its own failure if it failed (reading
  // memory a failed task left behind: Note [Poisoned memory] in runtime/src/Poison.h), whatever
  // another thread's synchronization reported meanwhile.
  const at::Tensor& hostSide = toDevice ? self : dst;
  const bool pinned = !(toDevice && fromDevice) && isPinnedPtr(hostSide.data_ptr());
  const bool asynchronous = (toDevice && fromDevice) || (non_blocking && pinned);
  const orStream_t handle = stream.stream();
  // Plain bytes go through the runtime's copy (one memmove), unless the caller waits for a
  // pinned host side, or for a copy of 1 MiB or more: the CPU's copy_ in a task then copies with
  // the intra-op threads (figures in docs/memory.md, "Tensors and copies"). With pageable memory
  // orMemcpyAsync completes the copy itself and returns the copy's own failure; .item() and small
  // .cpu() calls take that path, where a task running copy_ costs several times more.
  constexpr size_t kParallelCopyBytes = size_t{1} << 20;
  if (plainBytes(self, dst) && (asynchronous || (!pinned && dst.nbytes() < kParallelCopyBytes))) {
    const orMemcpyKind kind = toDevice
                                  ? (fromDevice ? orMemcpyDeviceToDevice : orMemcpyHostToDevice)
                                  : orMemcpyDeviceToHost;
    OPENREG_CHECK(orMemcpyAsync(dst.data_ptr(), self.data_ptr(), dst.nbytes(), kind, handle));
  } else {
    // Aliases only, see Note [Tasks hold no Python-visible tensor]. Host memory stays valid:
    // either this call waits for the copy, or it is pinned and protected by record_event.
    at::Tensor to = toDevice ? kernelAlias(dst) : hostAlias(dst);
    at::Tensor from = fromDevice ? kernelAlias(self) : hostAlias(self);
    auto task =
        kernelTask("aten::copy_", {self}, {dst},
                   [to = std::move(to), from = std::move(from)]() mutable { to.copy_(from); });
    // A profiler shows it as the copy it is, not as a kernel (Note [Task activity]).
    const openreg::ScopedTaskLabel label(
        orTaskKindMemcpy, toDevice ? (fromDevice ? "Memcpy DtoD" : "Memcpy HtoD") : "Memcpy DtoH");
    OPENREG_CHECK(asynchronous ? openreg::launch(handle, std::move(task))
                               : openreg::launchAndWait(handle, std::move(task)));
  }

  if (!asynchronous) deliverTaskWarnings();  // the host has met the device (Note [Task warnings])
  if (crossDevice) {
    // The source's blocks are reused in its own stream's order: make that stream wait for the copy.
    streamWait(getCurrentOpenRegStream(self.device().index()), stream);
  } else if (!(toDevice && fromDevice) && asynchronous) {
    // Truly asynchronous: the pinned block must not be reused before the copy has run.
    hostAllocator()->record_event(hostSide.data_ptr(), hostSide.storage().data_ptr().get_context(),
                                  stream.unwrap());
  }
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copyFrom(self, dst, /*non_blocking=*/false);
}

}  // namespace openreg
