// FreeRanges: the free parts of an address range, handed out best fit and coalesced on return.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <utility>

namespace openreg {

// Offsets and lengths are in bytes; the caller aligns them. Not thread-safe: DeviceMemory keeps
// one per area of a device's address space, under its allocator lock.
class FreeRanges {
 public:
  // Makes [offset, offset + length) the one free range.
  void reset(std::size_t offset, std::size_t length);
  void clear();
  // Best fit: the smallest free range that holds `length` (the lowest among equals) gives its
  // first `length` bytes. False when none holds it.
  bool take(std::size_t length, std::size_t* offset);
  // Returns a range taken before, merging it with its free neighbours.
  void give(std::size_t offset, std::size_t length);
  std::size_t largest() const { return bySize_.empty() ? 0 : bySize_.rbegin()->first; }

 private:
  void insert(std::size_t offset, std::size_t length);
  void erase(std::map<std::size_t, std::size_t>::iterator it);

  std::map<std::size_t, std::size_t> byOffset_;           // offset -> length
  std::set<std::pair<std::size_t, std::size_t>> bySize_;  // (length, offset)
};

}  // namespace openreg
