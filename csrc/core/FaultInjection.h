// FaultInjection: planted failures for testing error handling on a CPU-only machine
// (torch.openreg.debug.inject_faults, OPENREG_FAULT_INJECTION).
//
// Note [Fault injection]
// Three faults, each through the error model a real failure takes (docs/errors.md):
// - the Nth allocation (counted from arming, every device) raises torch.OutOfMemoryError from the
//   caching allocator, as a refused segment would: num_ooms counts it, the device keeps working;
// - the Nth kernel launched (native kernels and the engine's tasks, counted at launch, in program
//   order) fails when it runs on the worker: its outputs are poisoned, every reader and the
//   stream's next synchronization raise "a task failed ... injected kernel failure";
// - a lost device: every allocation on it raises at the call, and every kernel launched on it
//   fails on the worker as above, until the injection ends. (The runtime itself is untouched: its
//   calls, copies included, still work; what PyTorch code sees is what a library's error handling
//   meets on a real device that fell off the bus.)
// Counters and the lost device are process-wide, not per thread.
//
// Cost when not armed: one relaxed atomic load per allocation and per kernel launch.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/Macros.h"

namespace openreg {

class OPENREG_TORCH_API FaultInjection {
 public:
  static bool armed() noexcept { return armed_.load(std::memory_order_relaxed); }

  // oomAt, kernelAt: 1-based positions counted from now, 0 for none; lostDevice: -1 for none.
  // All zero/-1 disarms.
  static void configure(int64_t oomAt, int64_t kernelAt, int lostDevice);

  // At an allocation on `device`: throws if the device is lost; returns the note for the
  // OutOfMemoryError when this allocation is the one to fail, else an empty string.
  static std::string allocation(c10::DeviceIndex device);
  // At a kernel launch on `device`: the message the kernel is to fail with when it runs, or null.
  static std::shared_ptr<const std::string> kernelLaunch(c10::DeviceIndex device);
  // Inside a task (its catch turns it into a task error): throws `message` when non-null.
  static void failIfInjected(const std::shared_ptr<const std::string>& message);

 private:
  static std::atomic<bool> armed_;
};

}  // namespace openreg
