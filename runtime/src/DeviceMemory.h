// DeviceMemory: one device's address space, kernel window and range allocators.
//
// Note [Device address space]
// Each device owns two mappings of its address space, kAddressSpacePerCapacity times its capacity
// (rounded up to kGranularity; Note [Reserved address ranges] says why it is larger than the
// capacity):
//  - the device range, reserved with mmap(PROT_NONE, MAP_NORESERVE) and aligned to kGranularity.
//    orMalloc and orMemAddressReserve hand out addresses inside it. Nothing is ever mapped
//    accessible there, so a host dereference of a device pointer faults (FaultHandler.cpp reports
//    it), as it would on a GPU.
//  - the kernel window, a MAP_SHARED read-write mapping of a memfd of the same size. This is
//    where the bytes live; pages are allocated by the kernel on first touch.
// A device address translates into the window by adding one constant (window - range): O(1), no
// lock, no system call, no mprotect. Freed ranges are returned to the OS with
// fallocate(PUNCH_HOLE), so a free really releases memory. The memfd is also what other processes
// map to share this memory (Note [Sharing device memory between processes] in Ipc.h): an import
// takes a range of the device like an allocation and maps the exporter's pages over its part of
// the window; closing it maps the own memfd back before the range is released.
//
// [marker: reserved-address-ranges]
// Note [Reserved address ranges]
// A caching allocator with expandable segments (CUDA's cuMemAddressReserve and cuMemMap) reserves
// a range of addresses once and backs it with memory as its segment grows, so blocks of
// changing sizes stay contiguous instead of fragmenting the device. Reserving is only worth it if
// a reservation may exceed the free memory, so a device's address space is larger than its
// capacity, in two areas that never overlap:
//  - [0, capacity): orMalloc's allocations and IPC imports, as many addresses as they could ever
//    hold, so reservations cost them no room;
//  - [roundUp(capacity), address space): reservations, from a range allocator of their own, so
//    reservations never take the addresses orMalloc needs, nor orMalloc theirs.
// The capacity is one budget for both: an allocation and an orMemMap each charge their bytes, and
// fail with orErrorMemoryAllocation once allocations plus mapped bytes would exceed it; a
// reservation charges nothing. orMemUnmap punches the pages out of the memfd, so a later map of
// the same addresses reads zeros and the memory is back with the OS at once.
// Mapping changes no page protection: the window already covers the whole address space, so the
// kernel-pointer translation stays one constant and a map is bookkeeping plus the charge (an
// mprotect per map would split the window into a kernel mapping per run, and a task touching an
// unmapped granule would kill the process, where one touching a freed range does not). What
// makes an unmapped granule invalid is the same check that makes a freed range invalid: copies,
// memsets, orMemReuse and pointer queries accept a range only when it is inside one live
// allocation or mapped in whole inside one reservation. Mapped runs merge, so a range that spans
// granules mapped by separate calls is valid (Reservation.h). As for freed memory, a task that
// writes an unmapped granule through the window is not stopped.
// Limits: the address space is 8 x capacity for each of the two mappings (16 x capacity of virtual
// addresses per device, no memory), which is what bounds OPENREG_DEVICE_COUNT x
// OPENREG_DEVICE_MEMORY (the address-space budget in Config.cpp); the reservations of a device
// may total 7 x capacity. Reserved memory is not shareable between processes (orIpcGetMemHandle
// refuses it), and orFree refuses it.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "FreeRanges.h"
#include "Reservation.h"

namespace openreg {

class DeviceMemory {
 public:
  // Every allocation starts at a multiple of this and occupies whole multiples of it.
  static constexpr std::size_t kAlignment = 4096;
  // Reservations and mappings: their addresses and sizes are multiples of this.
  static constexpr std::size_t kGranularity = std::size_t{2} << 20;
  // The address space of a device, in capacities: one for orMalloc, the rest for reservations.
  static constexpr std::size_t kAddressSpacePerCapacity = 8;
  static constexpr std::size_t roundUpToGranularity(std::size_t bytes) {
    return (bytes + kGranularity - 1) / kGranularity * kGranularity;
  }
  // The size of each of the two mappings of a device of `capacity` bytes.
  static constexpr std::size_t addressSpaceFor(std::size_t capacity) {
    return kAddressSpacePerCapacity * roundUpToGranularity(capacity);
  }

  struct Allocation {
    std::uintptr_t base = 0;
    std::size_t size = 0;      // bytes requested
    std::size_t reserved = 0;  // bytes taken from the range (size rounded up)
    int importedFrom = 0;      // the exporting process's id for an import (Ipc.h), else 0
  };

  // The reservation holding an address, as lookups report it.
  struct ReservationInfo {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    bool mapped = false;  // the address looked up is mapped
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
    return reinterpret_cast<std::uintptr_t>(p) - rangeBase_ < addressSpace_;
  }
  // [marker: kernel-pointer-translation]
  void* toKernel(const void* devicePtr) const {
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(devicePtr) + windowDelta_);
  }
  // The same for kernel-window addresses, and the way back to the device address.
  bool windowContains(const void* p) const {
    return reinterpret_cast<std::uintptr_t>(p) - (rangeBase_ + windowDelta_) < addressSpace_;
  }
  void* fromKernel(const void* kernelPtr) const {
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(kernelPtr) - windowDelta_);
  }
  std::size_t capacity() const { return capacity_; }

  // --- take the allocator lock ---------------------------------------------------------------
  // orErrorMemoryAllocation when the capacity or no free range holds it; the message says what is
  // held.
  orError_t allocate(std::size_t size, void** out, std::string* message);
  // Releases the allocation starting exactly at `p`. orErrorInvalidDevicePointer otherwise.
  orError_t release(const void* p);
  // The live allocation containing `p`, if any. Reservations are not allocations.
  bool find(const void* p, Allocation* out) const;
  // True if [p, p + bytes) lies inside one live allocation, or is mapped in whole inside one
  // reservation: what a copy or memset may touch.
  bool containsRange(const void* p, std::size_t bytes) const;
  // True if [p, p + bytes) is mapped in whole inside one reservation.
  bool containsMapped(const void* p, std::size_t bytes) const;
  // Bytes charged against the capacity: allocations (and imports, and retired exports) plus
  // mapped bytes.
  std::size_t bytesInUse() const;

  // --- reservations (Note [Reserved address ranges]; VirtualMemoryApi.cpp) --------------------
  // On failure the message says why, without the call's name. Sizes and addresses are multiples
  // of kGranularity (the caller checks).
  // orErrorMemoryAllocation when no free range of the reservation area holds `size`.
  orError_t reserve(std::size_t size, void** out, std::string* message);
  // orErrorInvalidValue unless `p` and `size` are a reservation's, with nothing mapped.
  orError_t releaseReservation(const void* p, std::size_t size, std::string* message);
  // orErrorInvalidValue unless [p, p + size) is inside one reservation with no byte mapped;
  // orErrorMemoryAllocation when the capacity does not hold `size` more bytes.
  orError_t mapRange(const void* p, std::size_t size, std::string* message);
  // orErrorInvalidValue unless [p, p + size) is mapped in whole inside one reservation.
  orError_t unmapRange(const void* p, std::size_t size, std::string* message);
  // The reservation holding `p`, if any.
  bool findReservation(const void* p, ReservationInfo* out) const;

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

  // For the fault handler: like find() and findReservation() but gives up instead of waiting for
  // the lock. Returns 1 in an allocation (*allocation set), 2 in a reservation (*reservation
  // set), 0 in neither, -1 lock busy.
  int tryFindForSignal(const void* p, Allocation* allocation, ReservationInfo* reservation) const;

 private:
  bool findLocked(std::uintptr_t p, Allocation* out) const;
  // The reservation holding `p`, or nullptr.
  Reservation* reservationLocked(std::uintptr_t p);
  const Reservation* reservationLocked(std::uintptr_t p) const;
  // The reservation holding all of [begin, begin + size), with every byte of it mapped (or, for
  // !mapped, none), or nullptr with *message saying what is wrong.
  Reservation* reservationHoldingLocked(std::uintptr_t begin, std::size_t size, bool mapped,
                                        std::string* message);
  bool containsMappedLocked(std::uintptr_t p, std::size_t bytes) const;
  void punchLocked(std::uintptr_t address, std::size_t length);
  void freeRangeLocked(std::size_t offset, std::size_t length);
  std::string outOfMemoryLocked(const char* verb, std::size_t size) const;

  int device_ = -1;
  int memfd_ = -1;
  std::uintptr_t rangeBase_ = 0;
  std::size_t capacity_ = 0;
  std::size_t addressSpace_ = 0;    // bytes of each mapping; reservations from capacity rounded up
  std::uintptr_t windowDelta_ = 0;  // window base - range base (mod 2^64)

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Allocation> live_;           // by base address
  std::map<std::uintptr_t, Allocation> retired_;        // freed, still mapped by importers
  FreeRanges freeAllocations_;                          // offsets in [0, capacity)
  std::size_t inUse_ = 0;                               // reserved bytes of live allocations
  std::map<std::uintptr_t, Reservation> reservations_;  // by base address
  FreeRanges freeReservations_;                         // offsets in [roundUp(capacity), space)
  std::size_t mapped_ = 0;                              // mapped bytes of every reservation
};

}  // namespace openreg
