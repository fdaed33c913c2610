// Reservation: one range of a device's address space reserved with orMemAddressReserve, and the
// parts of it that orMemMap has backed with memory. See Note [Reserved address ranges] in
// DeviceMemory.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace openreg {

// Bookkeeping only: DeviceMemory checks the arguments, charges the capacity and returns the
// pages, under its allocator lock. Addresses are device addresses; every range is [begin, end).
class Reservation {
 public:
  Reservation(std::uintptr_t base, std::size_t size) : base_(base), size_(size) {}

  std::uintptr_t base() const { return base_; }
  std::size_t size() const { return size_; }
  std::uintptr_t end() const { return base_ + size_; }
  // [begin, begin + bytes) lies inside the reservation.
  bool holds(std::uintptr_t begin, std::size_t bytes) const {
    return begin >= base_ && begin - base_ <= size_ && bytes <= size_ - (begin - base_);
  }

  // The mapped run holding `p`: the largest mapped range around it, whatever calls mapped its
  // parts. False if `p` is not mapped.
  bool runAt(std::uintptr_t p, std::uintptr_t* begin, std::uintptr_t* end) const;
  // Whether any byte of [begin, end) is mapped.
  bool anyMapped(std::uintptr_t begin, std::uintptr_t end) const;
  bool anyMapped() const { return !runs_.empty(); }
  std::size_t mappedBytes() const { return mapped_; }

  // Marks [begin, end) mapped; no byte of it may be mapped already.
  void map(std::uintptr_t begin, std::uintptr_t end);
  // Marks [begin, end) unmapped; all of it must lie in one run.
  void unmap(std::uintptr_t begin, std::uintptr_t end);

 private:
  std::uintptr_t base_;
  std::size_t size_;
  // Mapped runs, begin -> end: disjoint and never adjacent (adjacent mappings merge), so one
  // lookup answers whether a range is mapped in whole.
  std::map<std::uintptr_t, std::uintptr_t> runs_;
  std::size_t mapped_ = 0;
};

}  // namespace openreg
