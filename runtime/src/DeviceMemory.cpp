#include "DeviceMemory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "Messages.h"

namespace openreg {

std::string DeviceMemory::map(int device, std::size_t capacity) {
  device_ = device;
  const std::size_t space = addressSpaceFor(capacity);
  const std::string name = OR_DEVICE_NAME "-device-" + std::to_string(device);
  memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (memfd_ < 0) return "memfd_create failed: " + std::string(std::strerror(errno));
  std::string error;
  if (ftruncate(memfd_, static_cast<off_t>(space)) != 0) {
    error = "ftruncate of the device memory file failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  // [marker: device-range-reservation]
  // One granule more than needed, trimmed to a granule-aligned range, so reservations and
  // mappings, aligned to kGranularity within the range, are aligned as addresses too.
  void* raw = mmap(nullptr, space + kGranularity, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    error = "reserving the device range failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  const auto rawBase = reinterpret_cast<std::uintptr_t>(raw);
  rangeBase_ = (rawBase + kGranularity - 1) / kGranularity * kGranularity;
  if (rangeBase_ > rawBase) munmap(raw, rangeBase_ - rawBase);
  munmap(reinterpret_cast<void*>(rangeBase_ + space), rawBase + kGranularity - rangeBase_);
  capacity_ = capacity;
  addressSpace_ = space;
  void* window =
      mmap(nullptr, space, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd_, 0);
  if (window == MAP_FAILED) {
    error = "mapping the kernel window failed: " + std::string(std::strerror(errno));
    unmap();
    return error;
  }
  windowDelta_ = reinterpret_cast<std::uintptr_t>(window) - rangeBase_;
  freeAllocations_.reset(0, capacity);
  const std::size_t reservationsStart = roundUpToGranularity(capacity);
  freeReservations_.reset(reservationsStart, space - reservationsStart);
  return {};
}

void DeviceMemory::unmap() {
  if (windowDelta_ != 0) munmap(reinterpret_cast<void*>(rangeBase_ + windowDelta_), addressSpace_);
  if (rangeBase_ != 0) munmap(reinterpret_cast<void*>(rangeBase_), addressSpace_);
  if (memfd_ >= 0) close(memfd_);
  memfd_ = -1;
  rangeBase_ = 0;
  capacity_ = 0;
  addressSpace_ = 0;
  windowDelta_ = 0;
  freeAllocations_.clear();
  freeReservations_.clear();
}

std::string DeviceMemory::outOfMemoryLocked(const char* verb, std::size_t size) const {
  const std::size_t charged = inUse_ + mapped_;
  const std::size_t free = capacity_ > charged ? capacity_ - charged : 0;
  std::string message = "out of memory on device " + std::to_string(device_) + ": tried to " +
                        verb + " " + std::to_string(size) + " bytes; capacity " +
                        std::to_string(capacity_) + " bytes, " + std::to_string(inUse_) +
                        " bytes held by " + std::to_string(live_.size()) + " allocations";
  if (mapped_ != 0) {
    std::size_t holding = 0;
    for (const auto& [base, r] : reservations_) holding += r.anyMapped() ? 1 : 0;
    message += ", " + std::to_string(mapped_) + " bytes mapped in " + std::to_string(holding) +
               " reservations";
  }
  // What orMalloc could still get in one piece, and what orMemMap could.
  message += ", largest free range " + std::to_string(std::min(freeAllocations_.largest(), free)) +
             " bytes, " + std::to_string(free) +
             " bytes free. Free tensors or caches you no longer need, or raise "
             "OPENREG_DEVICE_MEMORY.";
  return message;
}

orError_t DeviceMemory::allocate(std::size_t size, void** out, std::string* message) {
  const std::size_t reserved =
      size > capacity_ ? 0 : (size + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t offset = 0;
  // Mapped bytes count against the capacity although they use no address of this area.
  if (reserved == 0 || reserved > capacity_ - inUse_ - mapped_ ||
      !freeAllocations_.take(reserved, &offset)) {
    *message = outOfMemoryLocked("allocate", size);
    return orErrorMemoryAllocation;
  }
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

void DeviceMemory::punchLocked(std::uintptr_t address, std::size_t length) {
  fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(address - rangeBase_), static_cast<off_t>(length));
}

void DeviceMemory::freeRangeLocked(std::size_t offset, std::size_t length) {
  // Give the pages back before the range can be handed out again, so a new allocation never
  // sees the old bytes' physical pages (it reads zeros, as fresh memory does).
  punchLocked(rangeBase_ + offset, length);
  freeAllocations_.give(offset, length);
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
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  if (Allocation a; findLocked(address, &a)) {
    const std::uintptr_t offset = address - a.base;
    return bytes <= a.size && offset <= a.size - bytes;
  }
  return containsMappedLocked(address, bytes);
}

bool DeviceMemory::containsMapped(const void* p, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return containsMappedLocked(reinterpret_cast<std::uintptr_t>(p), bytes);
}

std::size_t DeviceMemory::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inUse_ + mapped_;
}

int DeviceMemory::tryFindForSignal(const void* p, Allocation* allocation,
                                   ReservationInfo* reservation) const {
  if (!mutex_.try_lock()) return -1;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  int found = findLocked(address, allocation) ? 1 : 0;
  if (found == 0) {
    if (const Reservation* r = reservationLocked(address)) {
      std::uintptr_t begin, end;
      *reservation = ReservationInfo{r->base(), r->size(), r->runAt(address, &begin, &end)};
      found = 2;
    }
  }
  mutex_.unlock();
  return found;
}

// --- reservations (Note [Reserved address ranges]) -------------------------------------------

Reservation* DeviceMemory::reservationLocked(std::uintptr_t p) {
  auto it = reservations_.upper_bound(p);
  if (it == reservations_.begin()) return nullptr;
  --it;
  return p - it->second.base() < it->second.size() ? &it->second : nullptr;
}

const Reservation* DeviceMemory::reservationLocked(std::uintptr_t p) const {
  return const_cast<DeviceMemory*>(this)->reservationLocked(p);
}

bool DeviceMemory::containsMappedLocked(std::uintptr_t p, std::size_t bytes) const {
  const Reservation* r = reservationLocked(p);
  std::uintptr_t begin, end;
  return r != nullptr && r->runAt(p, &begin, &end) && bytes <= end - p;
}

bool DeviceMemory::findReservation(const void* p, ReservationInfo* out) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  const Reservation* r = reservationLocked(address);
  if (r == nullptr) return false;
  std::uintptr_t begin, end;
  *out = ReservationInfo{r->base(), r->size(), r->runAt(address, &begin, &end)};
  return true;
}

// [marker: reserve]
orError_t DeviceMemory::reserve(std::size_t size, void** out, std::string* message) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t offset = 0;
  if (!freeReservations_.take(size, &offset)) {
    const std::size_t area = addressSpace_ - roundUpToGranularity(capacity_);
    std::size_t held = 0;
    for (const auto& [base, r] : reservations_) held += r.size();
    *message = "device " + std::to_string(device_) + "'s address space has no free range of " +
               std::to_string(size) + " bytes for a reservation: reservations may take " +
               std::to_string(area) + " bytes (" + std::to_string(kAddressSpacePerCapacity - 1) +
               " x the capacity), " + std::to_string(reservations_.size()) + " reservations hold " +
               std::to_string(held) + " bytes of it, and its largest free range is " +
               std::to_string(freeReservations_.largest()) + " bytes";
    return orErrorMemoryAllocation;
  }
  const std::uintptr_t base = rangeBase_ + offset;
  reservations_.emplace(base, Reservation(base, size));
  *out = reinterpret_cast<void*>(base);
  return orSuccess;
}

orError_t DeviceMemory::releaseReservation(const void* p, std::size_t size, std::string* message) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = reservations_.find(base);
  if (it == reservations_.end()) {
    *message = "ptr is not the start of a reservation on device " + std::to_string(device_) +
               " (an interior pointer, a reservation released before, or not from "
               "orMemAddressReserve)";
    return orErrorInvalidValue;
  }
  if (size != it->second.size()) {
    *message = "size " + std::to_string(size) + " is not the reservation's size (" +
               std::to_string(it->second.size()) + " bytes)";
    return orErrorInvalidValue;
  }
  if (it->second.anyMapped()) {
    *message = std::to_string(it->second.mappedBytes()) +
               " bytes of the reservation are still mapped: unmap them with orMemUnmap first";
    return orErrorInvalidValue;
  }
  reservations_.erase(it);
  // Every page was punched out when it was unmapped: nothing to return but the addresses.
  freeReservations_.give(base - rangeBase_, size);
  return orSuccess;
}

namespace {
std::string rangeName(std::uintptr_t p, std::size_t size) {
  return "the " + std::to_string(size) + "-byte range at " + hexAddress(p);
}
}  // namespace

Reservation* DeviceMemory::reservationHoldingLocked(std::uintptr_t begin, std::size_t size,
                                                    bool mapped, std::string* message) {
  Reservation* r = reservationLocked(begin);
  if (r == nullptr || !r->holds(begin, size)) {
    *message = rangeName(begin, size) + " is not inside one reservation of device " +
               std::to_string(device_) + " (orMemAddressReserve)";
    return nullptr;
  }
  if (mapped ? !containsMappedLocked(begin, size) : r->anyMapped(begin, begin + size)) {
    *message =
        "part of " + rangeName(begin, size) + (mapped ? " is not mapped" : " is already mapped");
    return nullptr;
  }
  return r;
}

// [marker: map-range]
orError_t DeviceMemory::mapRange(const void* p, std::size_t size, std::string* message) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  Reservation* r = reservationHoldingLocked(begin, size, /*mapped=*/false, message);
  if (r == nullptr) return orErrorInvalidValue;
  if (size > capacity_ - inUse_ - mapped_) {
    *message = outOfMemoryLocked("map", size);
    return orErrorMemoryAllocation;
  }
  r->map(begin, begin + size);
  mapped_ += size;
  return orSuccess;
}

orError_t DeviceMemory::unmapRange(const void* p, std::size_t size, std::string* message) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  Reservation* r = reservationHoldingLocked(begin, size, /*mapped=*/true, message);
  if (r == nullptr) return orErrorInvalidValue;
  // Before the range can be mapped again, so the next map reads zeros (fresh pages).
  punchLocked(begin, size);
  r->unmap(begin, begin + size);
  mapped_ -= size;
  return orSuccess;
}

}  // namespace openreg
