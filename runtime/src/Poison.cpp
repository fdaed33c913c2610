#include "Poison.h"

#include <iterator>

#include "Runtime.h"

namespace openreg {
namespace {

// The device address of an access (device address or kernel-window alias); false outside every
// device, or for an empty range.
bool deviceRange(const MemoryAccess& access, std::uintptr_t* address) {
  if (access.bytes == 0 || access.ptr == nullptr) return false;
  for (auto& d : runtime().devices) {
    if (d->memory.contains(access.ptr)) {
      *address = reinterpret_cast<std::uintptr_t>(access.ptr);
      return true;
    }
    if (d->memory.windowContains(access.ptr)) {
      *address = reinterpret_cast<std::uintptr_t>(d->memory.fromKernel(access.ptr));
      return true;
    }
  }
  return false;
}

}  // namespace

FailureRef PoisonMap::find(std::uintptr_t address, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.upper_bound(address);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > address) return before->second.failure;
  }
  if (it != ranges_.end() && it->first < address + bytes) return it->second.failure;
  return nullptr;
}

void PoisonMap::clearLocked(std::uintptr_t begin, std::uintptr_t end) {
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > begin) {
      // Split: keep the part before `begin`, and the part after `end` if the range reaches past.
      if (before->second.end > end)
        ranges_.emplace(end, Range{before->second.end, before->second.failure});
      before->second.end = begin;
      if (before->first == begin) ranges_.erase(before);
    }
  }
  it = ranges_.lower_bound(begin);
  while (it != ranges_.end() && it->first < end) {
    if (it->second.end > end) {
      Range rest{it->second.end, it->second.failure};
      ranges_.erase(it);
      ranges_.emplace(end, std::move(rest));
      break;
    }
    it = ranges_.erase(it);
  }
}

void PoisonMap::poison(std::uintptr_t address, std::size_t bytes, const FailureRef& failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  clearLocked(address, address + bytes);
  ranges_.emplace(address, Range{address + bytes, failure});
  count_.store(ranges_.size(), std::memory_order_release);
}

void PoisonMap::clear(std::uintptr_t address, std::size_t bytes) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  clearLocked(address, address + bytes);
  count_.store(ranges_.size(), std::memory_order_release);
}

FailureRef PoisonMap::findRead(std::span<const MemoryAccess> accesses) const {
  for (const MemoryAccess& access : accesses) {
    std::uintptr_t address;
    if (!access.read || !deviceRange(access, &address)) continue;
    if (FailureRef failure = find(address, access.bytes)) return failure;
  }
  return nullptr;
}

void PoisonMap::poisonWrites(std::span<const MemoryAccess> accesses, const FailureRef& failure) {
  for (const MemoryAccess& access : accesses) {
    std::uintptr_t address;
    if (access.write && deviceRange(access, &address)) poison(address, access.bytes, failure);
  }
}

void PoisonMap::clearCovered(std::span<const MemoryAccess> accesses) {
  for (const MemoryAccess& access : accesses) {
    std::uintptr_t address;
    if (access.cover && deviceRange(access, &address)) clear(address, access.bytes);
  }
}

PoisonMap& poisonMap() {
  static auto* map = new PoisonMap();  // never destroyed: workers may run at exit
  return *map;
}

}  // namespace openreg
