#include "HostMemory.h"

#include <sys/mman.h>
#include <unistd.h>

namespace openreg {
namespace {
std::size_t roundToPages(std::size_t size) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}
}  // namespace

HostMemory& hostMemory() {
  static auto* instance = new HostMemory();  // never destroyed, like the devices
  return *instance;
}

orError_t HostMemory::allocate(std::size_t size, void** out) {
  if (size > (std::size_t{1} << 46)) return orErrorMemoryAllocation;
  void* p = mmap(nullptr, roundToPages(size), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return orErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(mutex_);
  live_.emplace(reinterpret_cast<std::uintptr_t>(p), size);
  *out = p;
  return orSuccess;
}

orError_t HostMemory::release(void* p) {
  std::size_t size;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == live_.end()) return orErrorInvalidValue;
    size = it->second;
    live_.erase(it);
  }
  munmap(p, roundToPages(size));
  return orSuccess;
}

bool HostMemory::findRange(const void* p, std::size_t bytes, void** base, std::size_t* size) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(addr);
  if (it == live_.begin()) return false;
  --it;
  const std::uintptr_t offset = addr - it->first;
  if (offset >= roundToPages(it->second) || bytes > it->second || offset > it->second - bytes) {
    return false;
  }
  if (base != nullptr) *base = reinterpret_cast<void*>(it->first);
  if (size != nullptr) *size = it->second;
  return true;
}

}  // namespace openreg
