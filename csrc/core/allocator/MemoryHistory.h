// MemoryHistory: what the caching allocator did, with the stack of each call, for PyTorch's
// memory visualizer (torch.cuda._memory_viz, torch.openreg.memory._record_memory_history).
//
// Note [Memory history]
// While recording, every allocator event (alloc, free requested, free completed, segment alloc,
// segment free, segment map and unmap of an expandable segment, OOM) is appended to a bounded trace
// with the time, the stream and a torch::CapturedTraceback of the calling thread: PyTorch's own
// device-generic traceback, the one c10 CUDA records (Python frames always, C++ frames when asked
// for, since unwinding and symbolizing C++ costs far more). The traceback of each live allocation
// is also kept by address, so a snapshot can give every allocated block the stack that made it.
// Symbolizing happens only when a snapshot is taken (in the bindings, torch::py_symbolize), not per
// event.
//
// Cost: when not recording, the allocator pays one relaxed atomic load per malloc and free
// (recording()); nothing else runs. While recording, each event takes a global mutex and gathers a
// traceback (a walk of the Python frames; with C++ frames, an unwind).
//
// Threading: record() is noexcept and may run from any thread, with or without the GIL (a free
// from a device worker gathers no Python frames: CapturedTraceback checks it can). It never calls
// into the allocator, so it may run under the allocator's lock.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/Macros.h"

namespace openreg::allocator {

enum class TraceAction {
  Alloc,
  FreeRequested,
  FreeCompleted,
  SegmentAlloc,
  SegmentFree,
  SegmentMap,    // an expandable segment mapped memory (Note [Expandable segments])
  SegmentUnmap,  // and unmapped it
  Oom
};

struct TraceEntry {
  TraceAction action;
  c10::DeviceIndex device;
  size_t addr;  // for Oom: the bytes the device had free, as CUDA's trace records it
  size_t size;
  void* stream;  // the native stream handle (orStream_t), as in the allocator's snapshot
  int64_t timeUs;
  std::shared_ptr<c10::GatheredContext> context;  // null when the stack could not be gathered
};

class OPENREG_TORCH_API MemoryHistory {
 public:
  // The one check the allocator makes when not recording.
  static bool recording() noexcept { return recording_.load(std::memory_order_relaxed); }

  // Starts (or changes) recording: at most maxEntries trace entries are kept, the oldest dropped
  // first (0 keeps only the stacks of live allocations); cppFrames adds C++ frames. Stopping keeps
  // what was recorded until clear().
  static void start(size_t maxEntries, bool cppFrames);
  static void stop();
  static void clear();

  static void record(TraceAction action, c10::DeviceIndex device, const void* addr, size_t size,
                     c10::Stream stream) noexcept;

  // The trace of each device, oldest first (device_count() lists).
  static std::vector<std::vector<TraceEntry>> trace();
  // Sets context_when_allocated of every allocated block whose allocation was recorded.
  static void annotate(std::vector<c10::CachingDeviceAllocator::SegmentInfo>& segments);

 private:
  static std::atomic<bool> recording_;
};

}  // namespace openreg::allocator
