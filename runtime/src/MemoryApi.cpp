// Entry points of runtime.h's "Memory" section: device and pinned allocations, copies, memset,
// pointer queries.
#include <openreg/runtime.h>
#include <openreg/activity.hpp>
#include <openreg/task.hpp>

#include <cstring>
#include <stdexcept>

#include "Activity.h"
#include "Capture.h"
#include "GuardedCopy.h"
#include "HostMemory.h"
#include "Ipc.h"
#include "Poison.h"
#include "Runtime.h"

using namespace openreg;

namespace {

// What one side of a copy points at.
struct Side {
  Device* device = nullptr;  // non-null for device memory
  bool pinned = false;       // pinned host memory (orMallocHost)
};

Side classify(const void* p, std::size_t count) {
  Side side;
  side.device = deviceOfPointer(p);
  if (side.device == nullptr) side.pinned = hostMemory().findRange(p, count, nullptr, nullptr);
  return side;
}

// `parameter` names the pointer argument (dst, src, devPtr).
orError_t checkDeviceRange(const char* call, const char* parameter, const Side& side, const void* p,
                           std::size_t count) {
  if (side.device->memory.containsRange(p, count)) return orSuccess;
  return fail(orErrorInvalidValue, call,
              "the " + std::to_string(count) + "-byte range at " + parameter +
                  " is not inside one live allocation on device " +
                  std::to_string(side.device->index) + " (nor mapped in whole in one reservation)");
}

const char* kindName(orMemcpyKind kind) {
  switch (kind) {
    case orMemcpyHostToHost:
      return "host to host";
    case orMemcpyHostToDevice:
      return "host to device";
    case orMemcpyDeviceToHost:
      return "device to host";
    case orMemcpyDeviceToDevice:
      return "device to device";
    case orMemcpyDefault:
      return "default";
  }
  return "unknown";
}

// The kind as the caller passed it. C callers may pass any int; loading an out-of-range value
// through the enum type would be undefined behaviour in C++, so read the bytes.
int rawKind(const orMemcpyKind& kind) {
  static_assert(sizeof(orMemcpyKind) == sizeof(int));
  int value;
  std::memcpy(&value, &kind, sizeof value);
  return value;
}

// Validates a copy and resolves orMemcpyDefault. On success *kind is the actual direction.
orError_t checkCopy(const char* call, void* dst, const void* src, std::size_t count,
                    orMemcpyKind* kind, Side* d, Side* s) {
  const int requested = rawKind(*kind);
  if (requested < orMemcpyHostToHost || requested > orMemcpyDefault) {
    return fail(orErrorInvalidValue, call, "unknown orMemcpyKind " + std::to_string(requested));
  }
  if (dst == nullptr) return nullArgument(call, "dst");
  if (src == nullptr) return nullArgument(call, "src");
  if (reinterpret_cast<std::uintptr_t>(dst) + count < reinterpret_cast<std::uintptr_t>(dst) ||
      reinterpret_cast<std::uintptr_t>(src) + count < reinterpret_cast<std::uintptr_t>(src)) {
    return fail(orErrorInvalidValue, call,
                "count " + std::to_string(count) + " overflows the address space");
  }
  *d = classify(dst, count);
  *s = classify(src, count);
  const orMemcpyKind actual =
      d->device != nullptr ? (s->device != nullptr ? orMemcpyDeviceToDevice : orMemcpyHostToDevice)
                           : (s->device != nullptr ? orMemcpyDeviceToHost : orMemcpyHostToHost);
  if (*kind == orMemcpyDefault) {
    *kind = actual;
  } else if (*kind != actual) {
    return fail(orErrorInvalidMemcpyDirection, call,
                std::string("the copy is declared ") + kindName(*kind) + " but the pointers are " +
                    kindName(actual));
  }
  if (d->device != nullptr) {
    if (orError_t e = checkDeviceRange(call, "dst", *d, dst, count); e != orSuccess) return e;
  }
  if (s->device != nullptr) {
    if (orError_t e = checkDeviceRange(call, "src", *s, src, count); e != orSuccess) return e;
  }
  return orSuccess;
}

// [marker: copy-task]
// The copy as a task. Device sides are reached through kernel-window addresses, host sides are
// copied with a guard (Note [Fault-guarded copies] in GuardedCopy.h). It reads its source and
// covers its destination, so a copy of poisoned memory fails with the failure that poisoned it,
// and a successful copy makes its destination data again (Note [Poisoned memory] in Poison.h).
// A caller that waits for the copy passes `fault` to receive a fault; without one, a fault
// becomes the stream's task error.
struct CopyTask {
  const char* call;
  void* dst;
  const void* src;
  std::size_t count;
  bool hostDst;
  bool hostSrc;
  CopyFault* fault;
  void operator()() const {
    const CopyFault f = guardedCopy(dst, hostDst, src, hostSrc, count);
    if (!f) return;
    if (fault == nullptr) throw std::runtime_error(copyFaultMessage(call, f, dst, src, count));
    *fault = f;
  }
  void accesses(AccessList& out) const {
    out.push_back({src, count, /*read=*/true, /*write=*/false, /*cover=*/false});
    out.push_back({dst, count, /*read=*/false, /*write=*/true, /*cover=*/true});
  }
  const char* name() const { return call; }
};

// orMemReuse's operation: it runs nothing, and covers the range, so that its success clears the
// range's poison in stream order (Note [Poisoned memory]).
struct ReuseTask {
  void* dst;
  std::size_t count;
  void operator()() const {}
  const char* name() const { return "reuse"; }
  void accesses(AccessList& out) const {
    out.push_back({dst, count, /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

struct MemsetTask {
  void* dst;
  int value;
  std::size_t count;
  void operator()() const { std::memset(dst, value, count); }
  const char* name() const { return "memset"; }
  void accesses(AccessList& out) const {
    out.push_back({dst, count, /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

// The copy as a stream operation.
StreamOp copyOp(const char* call, void* dst, const void* src, std::size_t count, const Side& d,
                const Side& s, CopyFault* fault) {
  void* kdst = d.device != nullptr ? d.device->memory.toKernel(dst) : dst;
  const void* ksrc = s.device != nullptr ? s.device->memory.toKernel(src) : src;
  const bool hostDst = d.device == nullptr;
  const bool hostSrc = s.device == nullptr;
  StreamOp op;
  op.task = Task(CopyTask{call, kdst, ksrc, count, hostDst, hostSrc, fault});
  return op;
}

// What a profiler calls the copy (Note [Task activity]).
ScopedTaskLabel copyLabel(const Side& d, const Side& s) {
  const char* name = d.device != nullptr ? (s.device != nullptr ? "Memcpy DtoD" : "Memcpy HtoD")
                                         : (s.device != nullptr ? "Memcpy DtoH" : "Memcpy HtoH");
  return ScopedTaskLabel(orTaskKindMemcpy, name);
}

// A copy that completes before the call returns: orMemcpy, and orMemcpyAsync with pageable memory.
// [marker: copy-inline]
// Note [Blocking copies run on the caller]
// The caller waits for the copy anyway. Handed to the stream's worker, the copy would cost a
// task's round trip between two threads (.item() on an idle stream took 3 µs, the CPU's 0.2 µs);
// so the caller waits for the work queued before the copy (a synchronization, as before), then
// makes the copy itself, with the stream's queue lock held so that nothing enqueued meanwhile by
// another thread runs before it (Stream::runIfIdle): the stream's order is kept, and the copy's
// poison checks and failures are the worker's (Stream::runTask). A stream that another thread
// filled again in between, a stream under capture and a recording profiler (whose copy rows come
// from the worker's clock) take the worker's way.
orError_t copyAndWait(const char* call, Stream& stream, void* dst, const void* src,
                      std::size_t count, const Side& d, const Side& s) {
  CopyFault fault;
  StreamOp op = copyOp(call, dst, src, count, d, s, &fault);
  if (!recordingActivity() && gActiveCaptures.load(std::memory_order_relaxed) == 0) {
    // Note [A waiting host runs the queued tasks] in Stream.cpp; counted as the wait it replaces.
    if (stream.runQueuedOnCaller()) {
      countSynchronization();
    } else {
      stream.waitFor(stream.submitted());
    }
    FailureRef own;
    if (stream.runIfIdle(op, &own)) {
      if (fault) return fail(orErrorInvalidValue, copyFaultMessage(call, fault, dst, src, count));
      return stream.takeError(own);
    }
  }
  const orError_t e = launchOp(stream, std::move(op), /*mustComplete=*/true);
  // The copy's own fault first; else its own failure (poisoned source), or the stream's.
  if (fault) return fail(orErrorInvalidValue, copyFaultMessage(call, fault, dst, src, count));
  return e;
}

// A host-to-host copy, made on the calling thread.
orError_t hostCopy(const char* call, void* dst, const void* src, std::size_t count) {
  if (const CopyFault fault = guardedCopy(dst, true, src, true, count)) {
    return fail(orErrorInvalidValue, copyFaultMessage(call, fault, dst, src, count));
  }
  return orSuccess;
}

orError_t notDeviceMemory(const char* call) {
  return fail(orErrorInvalidDevicePointer, call, "devPtr is not device memory");
}

// orMemset and orMemsetAsync: validates and enqueues the fill, then ends as every launch does.
orError_t enqueueMemset(const char* call, Stream& stream, void* devPtr, int value,
                        std::size_t count, bool mustComplete) {
  if (count == 0) return orSuccess;
  Device* d = deviceOfPointer(devPtr);
  if (d == nullptr) return notDeviceMemory(call);
  if (orError_t e = checkDeviceRange(call, "devPtr", Side{d, false}, devPtr, count); e != orSuccess)
    return e;
  StreamOp op;
  op.task = Task(MemsetTask{d->memory.toKernel(devPtr), value, count});
  const ScopedTaskLabel label(orTaskKindMemset, "Memset");
  return launchOp(stream, std::move(op), mustComplete);
}

}  // namespace

extern "C" {

orError_t orMalloc(void** devPtr, size_t size) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(devPtr);
  if (size == 0) {
    *devPtr = nullptr;
    return orSuccess;
  }
  // Allocations freed while other processes still mapped them may be releasable now.
  if (ipc::gRetired.load(std::memory_order_relaxed) > 0) ipc::collectRetired();
  std::string message;
  const orError_t e = device(currentDevice()).memory.allocate(size, devPtr, &message);
  return e == orSuccess ? e : fail(e, __func__, message);
}

orError_t orFree(void* devPtr) {
  OR_ENTER_SYNCHRONIZING();
  if (devPtr == nullptr) return orSuccess;
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  Device* d = deviceOfPointer(devPtr);
  DeviceMemory::Allocation a;
  // Checked before synchronizing: a rejected free must not consume a pending task error.
  if (DeviceMemory::ReservationInfo r; d != nullptr && d->memory.findReservation(devPtr, &r)) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "devPtr is in a reservation (orMemAddressReserve), not an "
                "allocation: release its memory with orMemUnmap and the range with "
                "orMemAddressFree");
  }
  if (d == nullptr || !d->memory.find(devPtr, &a) ||
      a.base != reinterpret_cast<std::uintptr_t>(devPtr)) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "devPtr is not the start of a live device allocation (an interior "
                "pointer, a double free, or not from orMalloc)");
  }
  if (a.importedFrom != 0) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "devPtr is memory shared by process " + std::to_string(a.importedFrom) +
                    "; close it with orIpcCloseMemHandle");
  }
  // Work queued on a stream of any device may still use the memory, since every device reaches
  // every device's memory (cudaFree synchronizes too). A task failure stays pending for the next
  // synchronizing call: freeing never reports one (Note [Task errors] in Stream.cpp), so a caller
  // that frees never mistakes it for its own.
  waitForAllDevices();
  // [marker: free-exported]
  // Shared with other processes that still map it: kept until they let go (Ipc.h).
  if (ipc::retireIfExported(*d, devPtr)) {
    poisonMap().clear(a.base, a.reserved);
    return orSuccess;
  }
  if (d->memory.release(devPtr) != orSuccess) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "devPtr was freed by another thread meanwhile (double free)");
  }
  poisonMap().clear(a.base, a.reserved);
  return orSuccess;
}

// [marker: mem-reuse]
orError_t orMemReuse(void* devPtr, size_t size, orStream_t streamHandle) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(devPtr);
  // Called on every allocation of the caching allocator: with nothing poisoned, one atomic load.
  // Poison that appears later in the range (a failing task queued before, writing the old owner's
  // bytes) is cleared by the new owner's first covering write, or carried by an uncovered read.
  if (!poisonMap().active()) return orSuccess;
  Device* d = deviceOfPointer(devPtr);
  DeviceMemory::Allocation a;
  const auto begin = reinterpret_cast<std::uintptr_t>(devPtr);
  const bool inAllocation = d != nullptr && d->memory.find(devPtr, &a) && size <= a.reserved &&
                            begin - a.base <= a.reserved - size;
  if (!inAllocation && (d == nullptr || !d->memory.containsMapped(devPtr, size))) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "the range is not inside one live device allocation, nor "
                "mapped in whole in one reservation");
  }
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) return invalidStream(__func__);
  StreamOp op;
  op.task = Task(ReuseTask{d->memory.toKernel(devPtr), size});
  return launchOp(*stream, std::move(op), /*mustComplete=*/false);
}

orError_t orMallocHost(void** ptr, size_t size) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(ptr);
  if (size == 0) {
    *ptr = nullptr;
    return orSuccess;
  }
  if (hostMemory().allocate(size, ptr) != orSuccess) {
    return fail(orErrorMemoryAllocation, __func__,
                "cannot allocate " + std::to_string(size) + " bytes of pinned host memory");
  }
  return orSuccess;
}

orError_t orFreeHost(void* ptr) {
  OR_ENTER_SYNCHRONIZING();
  if (ptr == nullptr) return orSuccess;
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  void* base = nullptr;
  if (!hostMemory().findRange(ptr, 0, &base, nullptr) || base != ptr) {
    return fail(orErrorInvalidValue, __func__,
                "ptr is not the start of a live pinned allocation (an "
                "interior pointer, a double free, or not from orMallocHost)");
  }
  waitForAllDevices();  // copies queued on any stream may use it; never reports, as orFree
  if (hostMemory().release(ptr) != orSuccess) {
    return fail(orErrorInvalidValue, __func__,
                "ptr was freed by another thread meanwhile (double free)");
  }
  return orSuccess;
}

orError_t orPointerGetAttributes(orPointerAttributes* attributes, const void* ptr) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(attributes);
  *attributes = orPointerAttributes{};
  attributes->device = -1;
  if (Device* d = deviceOfPointer(ptr)) {
    DeviceMemory::Allocation a;
    DeviceMemory::ReservationInfo r;
    if (d->memory.find(ptr, &a)) {
      attributes->base = reinterpret_cast<void*>(a.base);
      attributes->size = a.size;
    } else if (d->memory.findReservation(ptr, &r) && r.mapped) {
      // The reservation, not the mapping: its range is what stays put as mappings come and go.
      attributes->base = reinterpret_cast<void*>(r.base);
      attributes->size = r.size;
    } else {
      return fail(orErrorInvalidDevicePointer, __func__,
                  r.size != 0 ? "ptr is in an unmapped part of a reservation (orMemMap backs it "
                                "with memory)"
                              : "ptr is device memory in no live allocation");
    }
    attributes->type = orMemoryTypeDevice;
    attributes->device = d->index;
    attributes->devicePointer = const_cast<void*>(ptr);
    return orSuccess;
  }
  void* base = nullptr;
  std::size_t size = 0;
  if (ptr != nullptr && hostMemory().findRange(ptr, 0, &base, &size)) {
    attributes->type = orMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(ptr);
    attributes->base = base;
    attributes->size = size;
  }
  return orSuccess;
}

// [marker: memcpy-async]
orError_t orMemcpyAsync(void* dst, const void* src, size_t count, orMemcpyKind kind,
                        orStream_t streamHandle) {
  OR_ENTER();
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) {
    return invalidStream(__func__);
  }
  if (count == 0) return orSuccess;
  Side d, s;
  if (orError_t e = checkCopy(__func__, dst, src, count, &kind, &d, &s); e != orSuccess) return e;
  if (kind == orMemcpyHostToHost && !d.pinned && !s.pinned) {
    return hostCopy(__func__, dst, src, count);  // synchronous in CUDA too
  }
  // Pageable host memory may be reused or freed as soon as the call returns (CUDA's semantics),
  // so such copies complete before returning; copies between pinned and device memory do not.
  const bool pageable = (d.device == nullptr && !d.pinned) || (s.device == nullptr && !s.pinned);
  const ScopedTaskLabel label = copyLabel(d, s);
  if (!pageable) {
    return launchOp(*stream, copyOp(__func__, dst, src, count, d, s, nullptr));
  }
  if (onDeviceWorker()) return synchronizingInTask(__func__);
  return copyAndWait(__func__, *stream, dst, src, count, d, s);
}

orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind) {
  OR_ENTER_SYNCHRONIZING();
  if (count == 0) return orSuccess;
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  Side d, s;
  if (orError_t e = checkCopy(__func__, dst, src, count, &kind, &d, &s); e != orSuccess) return e;
  if (kind == orMemcpyHostToHost) return hostCopy(__func__, dst, src, count);
  Stream& stream = *(s.device != nullptr ? s.device : d.device)->defaultStream;
  const ScopedTaskLabel label = copyLabel(d, s);
  return copyAndWait(__func__, stream, dst, src, count, d, s);
}

orError_t orMemsetAsync(void* devPtr, int value, size_t count, orStream_t streamHandle) {
  OR_ENTER();
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) {
    return invalidStream(__func__);
  }
  return enqueueMemset(__func__, *stream, devPtr, value, count, /*mustComplete=*/false);
}

orError_t orMemset(void* devPtr, int value, size_t count) {
  OR_ENTER_SYNCHRONIZING();
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  Device* d = deviceOfPointer(devPtr);
  if (d == nullptr) return notDeviceMemory(__func__);
  return enqueueMemset(__func__, *d->defaultStream, devPtr, value, count, /*mustComplete=*/true);
}

// [marker: get-kernel-pointer]
orError_t orGetKernelPointer(void** kernelPtr, const void* devPtr) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(kernelPtr);
  Device* d = deviceOfPointer(devPtr);
  if (d == nullptr) return notDeviceMemory(__func__);
  *kernelPtr = d->memory.toKernel(devPtr);
  return orSuccess;
}

}  // extern "C"
