// DeviceMemory: one device's address space, kernel window and range allocator.
//
// Note [Device address space]
// Each device owns two mappings of `capacity` bytes:
//  - the device range, reserved with mmap(PROT_NONE, MAP_NORESERVE). orMalloc hands out addresses
//    inside it. Nothing is ever mapped accessible there, so a host dereference of a device pointer
//    faults (FaultHandler.cpp reports it), as it would on a GPU.
//  - the kernel window, a MAP_SHARED read-write mapping of a memfd of `capacity` bytes. This is
//    where the bytes live; pages are allocated by the kernel on first touch.
// A device address translates into the window by adding one constant (window - range): O(1), no
// lock, no system call, no mprotect. Freed ranges are returned to the OS with
// fallocate(PUNCH_HOLE), so a free really releases memory. The memfd is also what other processes
// map to share this memory (Note [Sharing device memory between processes] in Ipc.h): an import
// takes a range of the device like an allocation and maps the exporter's pages over its part of
// the window; closing it maps the own memfd back before the range is released.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace openreg {

class DeviceMemory {
 public:
  // Every allocation starts at a multiple of this and occupies whole multiples of it.
  static constexpr std::size_t kAlignment = 4096;

  struct Allocation {
    std::uintptr_t base = 0;
    std::size_t size = 0;      // bytes requested
    std::size_t reserved = 0;  // bytes taken from the range (size rounded up)
    int importedFrom = 0;      // the exporting process's id for an import (Ipc.h), else 0
  };

  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  // Devices live as long as the process; only a failed initialization destroys one.
  ~DeviceMemory() { unmap(); }

  // Creates the mappings. Returns "" on success, else what failed, having undone the rest.
  std::string map(int device, std::size_t capacity);
  // Removes the mappings and closes the memory file. For a failed initialization: no allocation
  // may be live and no task may run.
  void unmap();

  // --- O(1), lock-free ------------------------------------------------------------------------
  bool contains(const void* p) const {
    return reinterpret_cast<std::uintptr_t>(p) - rangeBase_ < capacity_;
  }
  // [marker: kernel-pointer-translation]
  void* toKernel(const void* devicePtr) const {
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(devicePtr) + windowDelta_);
  }
  // The same for kernel-window addresses, and the way back to the device address.
  bool windowContains(const void* p) const {
    return reinterpret_cast<std::uintptr_t>(p) - (rangeBase_ + windowDelta_) < capacity_;
  }
  void* fromKernel(const void* kernelPtr) const {
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(kernelPtr) - windowDelta_);
  }
  std::size_t capacity() const { return capacity_; }

  // --- take the allocator lock ---------------------------------------------------------------
  // orErrorMemoryAllocation when no free range fits; the message says what is held.
  orError_t allocate(std::size_t size, void** out, std::string* message);
  // Releases the allocation starting exactly at `p`. orErrorInvalidDevicePointer otherwise.
  orError_t release(const void* p);
  // The live allocation containing `p`, if any.
  bool find(const void* p, Allocation* out) const;
  // True if [p, p + bytes) lies inside one live allocation.
  bool containsRange(const void* p, std::size_t bytes) const;
  std::size_t bytesInUse() const;

  // --- sharing between processes (Ipc.cpp) ---------------------------------------------------
  // The memory file and the offset of a device address in it.
  int memoryFile() const { return memfd_; }
  std::size_t offsetOf(const void* p) const {
    return reinterpret_cast<std::uintptr_t>(p) - rangeBase_;
  }
  // Maps `length` bytes of another process's memory file at `fileOffset` over the window part of
  // the allocation at `base`, which becomes an import of process `exporter`. False (errno set) if
  // the mapping failed; the window is then unchanged.
  bool mapImport(const void* base, std::size_t length, int file, std::size_t fileOffset,
                 int exporter);
  // Maps the own memory file back under the import at `base` and releases its range. Never
  // punches holes in the other process's file.
  orError_t releaseImport(const void* base);
  // An exported allocation freed while other processes still map it: it leaves the live set (a
  // second free or a copy is refused) but keeps its range and its pages until releaseRetired().
  orError_t retire(const void* p);
  void releaseRetired(const void* p);

  // For the fault handler: like find() but gives up instead of waiting for the lock.
  // Returns 1 found, 0 not found, -1 lock busy.
  int tryFindForSignal(const void* p, Allocation* out) const;

 private:
  using FreeBySize = std::set<std::pair<std::size_t, std::size_t>>;  // (length, offset)

  void insertFree(std::size_t offset, std::size_t length);
  void eraseFree(std::map<std::size_t, std::size_t>::iterator it);
  bool findLocked(std::uintptr_t p, Allocation* out) const;
  void freeRangeLocked(std::size_t offset, std::size_t length);

  int device_ = -1;
  int memfd_ = -1;
  std::uintptr_t rangeBase_ = 0;
  std::size_t capacity_ = 0;
  std::uintptr_t windowDelta_ = 0;  // window base - range base (mod 2^64)

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Allocation> live_;        // by base address
  std::map<std::uintptr_t, Allocation> retired_;     // freed, still mapped by importers
  std::map<std::size_t, std::size_t> freeByOffset_;  // offset -> length
  FreeBySize freeBySize_;
  std::size_t inUse_ = 0;  // reserved bytes of live allocations
};

}  // namespace openreg
