#include "core/allocator/DeviceAllocator.h"
#include "core/DeviceTrace.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <exception>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/SharedStorage.h"
#include "core/allocator/AllocatorConfig.h"

namespace openreg {

allocator::DeviceCachingAllocator& DeviceAllocator::forDevice(c10::DeviceIndex device) {
  std::call_once(created_, [this] {
    // A bad PYTORCH_OPENREG_ALLOC_CONF raises here, at the first use, and again at every use
    // after it: call_once runs again after an exception.
    allocator::loadAllocatorConfig();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      devices_.push_back(std::make_unique<allocator::DeviceCachingAllocator>(i));
    }
  });
  check_device_index(device);
  return *devices_[device];
}

// [marker: allocator-allocate]
c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();  // the dispatcher's DeviceGuard set it
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return {nullptr, nullptr, &deleteBlock, where};
  allocator::Block* block =
      forDevice(device).malloc(nbytes, getCurrentOpenRegStream(device).unwrap());
  {
    std::lock_guard<std::mutex> lock(blocksMutex_);
    blocks_.emplace(block->ptr, block);
  }
  if (auto* t = trace::active()) {  // Note [Device trace] in core/DeviceTrace.h
    (*t)->trace_gpu_memory_allocation(trace::kDevice, trace::handle(block->ptr));
  }
  return {block->ptr, block->ptr, &deleteBlock, where};
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const {
  return &deleteBlock;
}

void DeviceAllocator::deleteBlock(void* ptr) noexcept {
  deviceAllocator().free(ptr);
}

// Never throws: see Note [A free never throws] in DeviceCachingAllocator.h.
void DeviceAllocator::free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (auto* t = trace::active()) {
    try {
      (*t)->trace_gpu_memory_deallocation(trace::kDevice, trace::handle(ptr));
    } catch (...) {
      // A free never throws (Note [A free never throws]).
    }
  }
  allocator::Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(blocksMutex_);
    auto it = blocks_.find(ptr);
    if (it != blocks_.end()) {
      block = it->second;
      blocks_.erase(it);
    }
  }
  if (block == nullptr) {
    try {
      TORCH_WARN(OR_DEVICE_NAME
                 ": freeing a pointer the allocator never gave out (an internal error; "
                 "please report it). It is left alone.");
    } catch (...) {
      // A warning handler that throws must not escape a free.
    }
    return;
  }
  devices_[block->stream.device_index()]->free(block);
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  OPENREG_CHECK(orMemcpy(dest, src, count, orMemcpyDeviceToDevice));
}

// Every device is emptied, then the first error (if any) is raised: one device's failure keeps no
// other device's cache.
void DeviceAllocator::emptyCache(c10::MempoolId_t) {
  std::exception_ptr error;
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    try {
      forDevice(i).emptyCache();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// [marker: allocator-record-stream]
void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) return;  // empty tensors own no block
  // Memory received from another process is freed after synchronizing every device: nothing to
  // record. A storage sent to another process has another deleter but is still our block.
  if (ipc::isImported(ptr)) return;
  TORCH_CHECK(ptr.get_deleter() == &deleteBlock || ptr.get_deleter() == ipc::sentBlockDeleter(),
              OR_DEVICE_NAME
              ": record_stream needs a tensor allocated by the openreg caching allocator");
  allocator::Block* block;
  {
    std::lock_guard<std::mutex> lock(blocksMutex_);
    auto it = blocks_.find(ptr.get());
    TORCH_CHECK(it != blocks_.end(),
                OR_DEVICE_NAME ": record_stream on memory that is no longer allocated");
    block = it->second;
  }
  devices_[block->stream.device_index()]->recordStream(block, stream);
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  return forDevice(device).getStats();
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  forDevice(device).resetAccumulatedStats();
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  forDevice(device).resetPeakStats();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceScope scope(device);
  size_t free = 0, total = 0;
  OPENREG_CHECK(orMemGetInfo(&free, &total));
  return {free, total};
}

std::vector<c10::CachingDeviceAllocator::SegmentInfo> DeviceAllocator::snapshot() {
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> all;
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    auto segments = forDevice(i).snapshot();
    all.insert(all.end(), segments.begin(), segments.end());
  }
  return all;
}

// Never destroyed: tensors may still be freed by other libraries' static destructors at exit,
// after this library's would have run.
DeviceAllocator& deviceAllocator() {
  static auto* instance = new DeviceAllocator();
  return *instance;
}

// [marker: allocator-registration]
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &deviceAllocator())

}  // namespace openreg
