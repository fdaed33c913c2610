// DeviceTrace: the stream sanitizer's view of the device (torch.openreg.debug.stream_sanitizer,
// OPENREG_STREAM_SANITIZER), through PyTorch's device-generic GPU trace.
//
// Note [Device trace]
// PyTorch's CUDA sanitizer learns of event records and waits, synchronizations, allocations and
// frees from c10::impl::GPUTrace: the device code calls the Python interpreter's
// trace_gpu_*(device_type, ...) hooks, which fire the callbacks of torch.<device>._gpu_trace
// (torch.openreg._gpu_trace here). We make the same calls, with PrivateUse1, from the guard
// (events, stream and device synchronization) and the allocator (allocations and frees), so the
// sanitizer analyses our streams with PyTorch's own model (torch.cuda._sanitizer.EventHandler).
// Streams and events are named by their native handles (orStream_t, orEvent_t), as CUDA's are.
//
// GPUTrace, once activated by anyone, stays active for the process; so the calls are gated on our
// own flag as well, set only while the sanitizer is on. Off, each site costs one relaxed atomic
// load. On, each call takes the GIL and runs Python callbacks.
#pragma once

#include <c10/core/impl/GPUTrace.h>

#include <atomic>

#include "core/Macros.h"

namespace openreg::trace {

OPENREG_TORCH_API extern std::atomic<bool> gEnabled;

// The interpreter to report to, or null when the sanitizer is off.
inline const c10::impl::PyInterpreter* active() noexcept {
  return gEnabled.load(std::memory_order_relaxed) ? c10::impl::GPUTrace::get_trace() : nullptr;
}

inline uintptr_t handle(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p);
}

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

}  // namespace openreg::trace
