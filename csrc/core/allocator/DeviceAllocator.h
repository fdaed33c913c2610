// The allocator PyTorch sees for openreg tensors: a c10::DeviceAllocator (so every
// torch.accelerator.memory_* call works) that hands each device's requests to its
// DeviceCachingAllocator. Registered for PrivateUse1 in DeviceAllocator.cpp.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/flat_hash_map.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/Macros.h"
#include "core/allocator/DeviceCachingAllocator.h"

namespace openreg {

class OPENREG_TORCH_API DeviceAllocator final : public c10::DeviceAllocator {
 public:
  DeviceAllocator() = default;

  // c10::Allocator
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  std::vector<c10::CachingDeviceAllocator::SegmentInfo> snapshot();
  // The caching allocator of one device (graphs route their captures to private pools there).
  allocator::DeviceCachingAllocator& forDevice(c10::DeviceIndex device);

 private:
  static void deleteBlock(void* ptr) noexcept;
  void free(void* ptr) noexcept;  // the DataPtr deleter's work: never throws

  std::once_flag created_;
  std::vector<std::unique_ptr<allocator::DeviceCachingAllocator>> devices_;
  std::mutex blocksMutex_;
  // Live allocations, by address. Open addressing: an allocation and a free cost no node of their
  // own (a node-based map's malloc and free showed in the engine's per-operator profile).
  ska::flat_hash_map<void*, allocator::Block*> blocks_;
};

// The registered instance.
OPENREG_TORCH_API DeviceAllocator& deviceAllocator();

}  // namespace openreg
