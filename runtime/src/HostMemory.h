// Pinned host memory: allocations from orMallocHost and the registry that tells them apart from
// ordinary (pageable) host memory. "Pinned" here means pre-faulted (MAP_POPULATE) and known to
// the runtime, which is what lets copies to and from it be fully asynchronous; the pages are not
// mlock()ed, since RLIMIT_MEMLOCK is small on most machines and the emulated device needs no DMA.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace openreg {

class HostMemory {
 public:
  orError_t allocate(std::size_t size, void** out);
  orError_t release(void* p);
  // The pinned allocation containing [p, p + bytes), if any.
  bool findRange(const void* p, std::size_t bytes, void** base, std::size_t* size) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> live_;  // base -> requested size
};

HostMemory& hostMemory();

}  // namespace openreg
