// Poisoned memory: how a failed task's outputs stay unreadable.
//
// Note [Poisoned memory]
// A task that fails has written some of its outputs, or none: whatever its memory holds is not
// data. Reporting the failure to the first synchronizing call is not enough, because that call
// may be another thread's, or come before the read: the reader would then see zeros or stale
// bytes as if they were results. So the failure stays with the memory, as poison does on
// hardware with data poisoning (a machine check on consumption, not on production):
//  - a task that fails poisons every range it declared as written (openreg::MemoryAccess), with
//    its Failure;
//  - before a task runs, if any memory is poisoned, the ranges it reads are checked: a task that
//    reads poison does not run, poisons what it writes with the same Failure and fails the same
//    way. So the error travels along data dependencies, across streams and devices, to copies to
//    the host (a blocking copy returns the error; so .cpu(), .item() and printing raise it), and
//    never to work that does not depend on the failed values;
//  - a task (or copy, or memset) that succeeds and covers a range (writes every byte of it)
//    clears it: the bytes are data again. orFree clears the allocation's range, and orMemReuse
//    the range a caching allocator hands to a new owner: a block that held a failed task's output
//    is no one's data once it is freed, and a later in-place write to it (torch.rand's uniform_)
//    must not take the old failure on.
// Poison is written and read by the workers in stream order, exactly like the bytes themselves,
// so it needs no ordering of its own.
// Cost when nothing is poisoned: one atomic load of a global count per task. Tasks that declare
// no accesses (orLaunchHostFunc) neither poison nor are checked; their failures reach the host
// through the stream and events only (Note [Task errors]).
#pragma once

#include <openreg/task.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>

#include "Failure.h"

namespace openreg {

class PoisonMap {
 public:
  // True when some byte of some device is poisoned. One acquire load (a plain load on x86): the
  // worker that poisoned memory completes its task after it, so a task ordered after that one
  // sees the count.
  bool active() const { return count_.load(std::memory_order_acquire) != 0; }

  // The failure poisoning any byte of [address, address + bytes), or nullptr.
  FailureRef find(std::uintptr_t address, std::size_t bytes) const;
  void poison(std::uintptr_t address, std::size_t bytes, const FailureRef& failure);
  void clear(std::uintptr_t address, std::size_t bytes);

  // For a task about to run: the failure poisoning any range it reads, or nullptr.
  FailureRef findRead(std::span<const MemoryAccess> accesses) const;
  // After a task failed with `failure` (or did not run because of it): poisons what it writes.
  void poisonWrites(std::span<const MemoryAccess> accesses, const FailureRef& failure);
  // After a task succeeded: clears what it covered.
  void clearCovered(std::span<const MemoryAccess> accesses);

 private:
  struct Range {
    std::uintptr_t end;
    FailureRef failure;
  };
  void clearLocked(std::uintptr_t begin, std::uintptr_t end);

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Range> ranges_;  // disjoint, by start address; guarded by mutex_
  std::atomic<std::size_t> count_{0};       // ranges_.size()
};

// The runtime's poison, keyed by device address (device ranges do not overlap).
PoisonMap& poisonMap();

}  // namespace openreg
