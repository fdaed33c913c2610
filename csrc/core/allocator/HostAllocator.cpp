#include "core/allocator/HostAllocator.h"

#include <openreg/runtime.h>

#include <utility>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"

namespace openreg {
namespace {

// An owned runtime event, as ATen's host allocator keeps them in vectors.
class HostEvent {
 public:
  explicit HostEvent(c10::Stream stream) {
    DeviceScope scope(stream.device_index());
    // Orders the block's reuse only; a failure of the stream's work is the stream's to report.
    OPENREG_CHECK(orEventCreateWithFlags(&event_, orEventDisableTiming | orEventDisableFailure));
    OPENREG_CHECK(orEventRecord(event_, OpenRegStream(stream).stream()));
  }
  HostEvent(HostEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  HostEvent& operator=(HostEvent&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~HostEvent() {
    if (event_ != nullptr) OPENREG_WARN(orEventDestroy(event_));
  }
  bool query() const {
    const orError_t status = orEventQuery(event_);
    if (status == orErrorNotReady) return false;
    OPENREG_CHECK(status);
    return true;
  }

 private:
  orEvent_t event_ = nullptr;
};

// [marker: host-allocator]
struct HostAllocatorImpl final : public at::CachingHostAllocatorImpl<c10::Stream, HostEvent> {
 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    OPENREG_CHECK(orMallocHost(ptr, size));
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    OPENREG_CHECK(orFreeHost(block->ptr_));
  }

  void record_stream(std::optional<std::vector<HostEvent>>& events, c10::Stream stream) override {
    events->emplace_back(stream);
  }

  bool query_event(HostEvent& event) override { return event.query(); }

  c10::Stream get_current_stream() const override { return getCurrentOpenRegStream().unwrap(); }

  bool stream_is_capturing(c10::Stream) const override { return false; }
};

void deleteHostBlock(void* ctx);

struct OpenRegHostAllocator final
    : public at::CachingHostAllocatorInterface<HostAllocatorImpl, deleteHostBlock> {};

OpenRegHostAllocator gHostAllocator;

void deleteHostBlock(void* ctx) {
  gHostAllocator.free(ctx);
}

}  // namespace

at::HostAllocator* hostAllocator() {
  return &gHostAllocator;
}

// [marker: host-allocator-registration]
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &gHostAllocator)

bool isPinnedPtr(const void* data) {
  orPointerAttributes attributes;
  return orPointerGetAttributes(&attributes, data) == orSuccess &&
         attributes.type == orMemoryTypeHost;
}

}  // namespace openreg
