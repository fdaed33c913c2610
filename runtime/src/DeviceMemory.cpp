#include "DeviceMemory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace openreg {

std::string DeviceMemory::map(int device, std::size_t capacity) {
  device_ = device;
  const std::string name = "openreg-device-" + std::to_string(device);
  memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (memfd_ < 0) return "memfd_create failed: " + std::string(std::strerror(errno));
  std::string error;
  if (ftruncate(memfd_, static_cast<off_t>(capacity)) != 0) {
    error = "ftruncate of the device memory file failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  // [marker: device-range-reservation]
  void* range =
      mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) {
    error = "reserving the device range failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  rangeBase_ = reinterpret_cast<std::uintptr_t>(range);
  capacity_ = capacity;
  void* window =
      mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd_, 0);
  if (window == MAP_FAILED) {
    error = "mapping the kernel window failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  windowDelta_ = reinterpret_cast<std::uintptr_t>(window) - rangeBase_;
  insertFree(0, capacity);
  return {};
}

void DeviceMemory::unmap() {
  if (windowDelta_ != 0) munmap(reinterpret_cast<void*>(rangeBase_ + windowDelta_), capacity_);
  if (rangeBase_ != 0) munmap(reinterpret_cast<void*>(rangeBase_), capacity_);
  if (memfd_ >= 0) close(memfd_);
  memfd_ = -1;
  rangeBase_ = 0;
  capacity_ = 0;
  windowDelta_ = 0;
  freeByOffset_.clear();
  freeBySize_.clear();
}

void DeviceMemory::insertFree(std::size_t offset, std::size_t length) {
  freeByOffset_.emplace(offset, length);
  freeBySize_.emplace(length, offset);
}

void DeviceMemory::eraseFree(std::map<std::size_t, std::size_t>::iterator it) {
  freeBySize_.erase({it->second, it->first});
  freeByOffset_.erase(it);
}

// [marker: range-allocator]
// Best fit over the free ranges (smallest range that holds the request, lowest address among
// equals), splitting off the rest. Freed ranges coalesce with their neighbours.
orError_t DeviceMemory::allocate(std::size_t size, void** out, std::string* message) {
  const std::size_t reserved =
      size > capacity_ ? 0 : (size + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  auto fit = reserved == 0 ? freeBySize_.end() : freeBySize_.lower_bound({reserved, 0});
  if (fit == freeBySize_.end()) {
    const std::size_t largest = freeBySize_.empty() ? 0 : freeBySize_.rbegin()->first;
    *message = "out of memory on device " + std::to_string(device_) + ": tried to allocate " +
               std::to_string(size) + " bytes; capacity " + std::to_string(capacity_) + " bytes, " +
               std::to_string(inUse_) + " bytes held by " + std::to_string(live_.size()) +
               " allocations, largest free range " + std::to_string(largest) +
               " bytes. Free tensors or caches you no longer need, or raise OPENREG_DEVICE_MEMORY.";
    return orErrorMemoryAllocation;
  }
  const auto [length, offset] = *fit;
  eraseFree(freeByOffset_.find(offset));
  if (length > reserved) insertFree(offset + reserved, length - reserved);
  const std::uintptr_t base = rangeBase_ + offset;
  live_.emplace(base, Allocation{base, size, reserved});
  inUse_ += reserved;
  *out = reinterpret_cast<void*>(base);
  return orSuccess;
}

orError_t DeviceMemory::release(const void* p) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(base);
  if (it == live_.end() || it->second.importedFrom != 0) return orErrorInvalidDevicePointer;
  const std::size_t length = it->second.reserved;
  live_.erase(it);
  inUse_ -= length;
  freeRangeLocked(base - rangeBase_, length);
  return orSuccess;
}

void DeviceMemory::freeRangeLocked(std::size_t offset, std::size_t length) {
  // Give the pages back before the range can be handed out again, so a new allocation never
  // sees the old bytes' physical pages (it reads zeros, as fresh memory does).
  fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(length));
  std::size_t start = offset, end = offset + length;
  auto next = freeByOffset_.lower_bound(offset);
  if (next != freeByOffset_.end() && next->first == end) {
    end += next->second;
    eraseFree(next);
  }
  auto prev = freeByOffset_.lower_bound(offset);
  if (prev != freeByOffset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      eraseFree(prev);
    }
  }
  insertFree(start, end - start);
}

// [marker: map-import]
bool DeviceMemory::mapImport(const void* base, std::size_t length, int file, std::size_t fileOffset,
                             int exporter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == live_.end()) return false;
  void* window = toKernel(base);
  if (mmap(window, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, file,
           static_cast<off_t>(fileOffset)) == MAP_FAILED) {
    return false;
  }
  it->second.importedFrom = exporter;
  return true;
}

orError_t DeviceMemory::releaseImport(const void* base) {
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end() || it->second.importedFrom == 0) return orErrorInvalidDevicePointer;
  const std::size_t length = it->second.reserved;
  // MAP_FIXED replaces the foreign pages atomically; if even that fails the range stays taken
  // (and still shows the other process's pages) rather than being handed out again.
  if (mmap(toKernel(base), length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_,
           static_cast<off_t>(address - rangeBase_)) == MAP_FAILED) {
    return orErrorMemoryAllocation;
  }
  live_.erase(it);
  inUse_ -= length;
  freeRangeLocked(address - rangeBase_, length);
  return orSuccess;
}

orError_t DeviceMemory::retire(const void* p) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(base);
  if (it == live_.end() || it->second.importedFrom != 0) return orErrorInvalidDevicePointer;
  retired_.emplace(base, it->second);
  live_.erase(it);
  return orSuccess;
}

void DeviceMemory::releaseRetired(const void* p) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = retired_.find(base);
  if (it == retired_.end()) return;
  const std::size_t length = it->second.reserved;
  retired_.erase(it);
  inUse_ -= length;
  freeRangeLocked(base - rangeBase_, length);
}

bool DeviceMemory::findLocked(std::uintptr_t p, Allocation* out) const {
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return false;
  --it;
  if (p - it->second.base >= it->second.reserved) return false;
  if (out != nullptr) *out = it->second;
  return true;
}

bool DeviceMemory::find(const void* p, Allocation* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findLocked(reinterpret_cast<std::uintptr_t>(p), out);
}

bool DeviceMemory::containsRange(const void* p, std::size_t bytes) const {
  Allocation a;
  if (!find(p, &a)) return false;
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) - a.base;
  return bytes <= a.size && offset <= a.size - bytes;
}

std::size_t DeviceMemory::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inUse_;
}

int DeviceMemory::tryFindForSignal(const void* p, Allocation* out) const {
  if (!mutex_.try_lock()) return -1;
  const bool found = findLocked(reinterpret_cast<std::uintptr_t>(p), out);
  mutex_.unlock();
  return found ? 1 : 0;
}

}  // namespace openreg
