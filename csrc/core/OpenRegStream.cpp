#include "core/OpenRegStream.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <openreg/activity.hpp>
#include <openreg/task.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/TaskWarnings.h"

namespace openreg {
namespace {

using c10::DeviceIndex;
using c10::StreamId;

// The pools' index is -priority, as the runtime's ready queues' and CUDA's pools' are (Note
// [Stream priority index] in runtime/src/Stream.h): [0] priority 0 (normal), [1] priority -1
// (high).
constexpr int kPoolCount = 2;

int poolIndex(bool isHighPriority) {
  return isHighPriority ? 1 : 0;
}

// See Note [OpenReg stream ids].
struct DevicePools {
  std::once_flag created;
  std::array<StreamId, kStreamsPerPool> streams[kPoolCount];
  std::atomic<uint32_t> next[kPoolCount]{};
  std::atomic<StreamId> defaultHandle{0};  // the default stream's runtime handle, mapped to id 0
};

std::vector<DevicePools>& pools() {
  static auto* all =
      new std::vector<DevicePools>(static_cast<size_t>(device_count()));  // never destroyed
  return *all;
}

DeviceIndex resolve(DeviceIndex device) {
  if (device < 0) return current_device();
  check_device_index(device);
  return device;
}

StreamId defaultHandle(DeviceIndex device) {
  DevicePools& p = pools()[device];
  // Written once per device; a race stores the same value twice.
  StreamId handle = p.defaultHandle.load(std::memory_order_relaxed);
  if (handle == 0) {
    orStream_t s = nullptr;
    OPENREG_CHECK(orDeviceGetDefaultStream(device, &s));
    handle = reinterpret_cast<StreamId>(s);
    p.defaultHandle.store(handle, std::memory_order_relaxed);
  }
  return handle;
}

void createPools(DeviceIndex device) {
  DevicePools& p = pools()[device];
  std::call_once(p.created, [&] {
    DeviceScope scope(device);
    int least = 0, greatest = 0;
    OPENREG_CHECK(orDeviceGetStreamPriorityRange(&least, &greatest));
    TORCH_INTERNAL_ASSERT(least - greatest + 1 == kPoolCount, OR_DEVICE_NAME ": the runtime has ",
                          least - greatest + 1, " stream priorities, the pools ", kPoolCount);
    for (int index = 0; index < kPoolCount; ++index) {
      for (auto& id : p.streams[index]) {
        orStream_t s = nullptr;
        OPENREG_CHECK(orStreamCreateWithPriority(&s, 0, least - index));
        id = reinterpret_cast<StreamId>(s);
      }
    }
  });
}

// The per-thread current stream id of each device; 0 (the default stream) until set.
std::vector<StreamId>& currentIds() {
  thread_local std::vector<StreamId> ids(static_cast<size_t>(device_count()), 0);
  return ids;
}

c10::Stream makeStream(DeviceIndex device, StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

}  // namespace

// [marker: stream-device-type]
OpenRegStream::OpenRegStream(c10::Stream stream) : stream_(stream) {
  TORCH_CHECK_VALUE(
      stream.device_type() == c10::DeviceType::PrivateUse1,
      OR_DEVICE_NAME ": expected an openreg stream, but this stream's device type is ",
      stream.device_type(), ", so it is not an openreg stream (", stream, "). ", kWhatStreamToPass);
}

orStream_t OpenRegStream::stream() const {
  const StreamId id = stream_.id();
  return reinterpret_cast<orStream_t>(id == 0 ? defaultHandle(stream_.device_index()) : id);
}

int OpenRegStream::priority() const {
  int priority = 0;
  OPENREG_CHECK(orStreamGetPriority(stream(), &priority));
  return priority;
}

bool OpenRegStream::query() const {
  const orError_t status = orStreamQuery(stream());
  if (status == orErrorNotReady) return false;
  OPENREG_CHECK(status);
  return true;
}

void OpenRegStream::synchronize() const {
  OPENREG_CHECK(orStreamSynchronize(stream()));
  deliverTaskWarnings();
}

OpenRegStream getDefaultOpenRegStream(DeviceIndex device) {
  return OpenRegStream(makeStream(resolve(device), 0));
}

// [marker: current-stream]
OpenRegStream getCurrentOpenRegStream(DeviceIndex device) {
  device = resolve(device);
  return OpenRegStream(makeStream(device, currentIds()[device]));
}

// [marker: stream-set-current]
// A stream id is a runtime handle (Note [OpenReg stream ids]): one that is not live (never created
// here, destroyed) or belongs to another device is refused when it is made current, with the
// runtime's reason, rather than at the next launch on it. The lookup is lock-free.
void setCurrentOpenRegStream(OpenRegStream stream) {
  const DeviceIndex device = stream.device_index();
  check_device_index(device);
  if (stream.id() != 0) {
    int owner = -1;
    OPENREG_CHECK(orStreamGetDevice(stream.stream(), &owner));
    TORCH_CHECK_VALUE(owner == device, OR_DEVICE_NAME ": ", stream,
                      " names a stream of device openreg:", owner,
                      ", not of openreg:", static_cast<int>(device), ". ", kWhatStreamToPass);
  }
  currentIds()[device] = stream.id();
}

void setStream(const c10::Stream& stream) {
  setCurrentOpenRegStream(OpenRegStream(stream));  // validates the type, the index and the id
  if (current_device() != stream.device_index()) set_device(stream.device_index());
}

OpenRegStream getStreamFromPool(bool isHighPriority, DeviceIndex device) {
  device = resolve(device);
  createPools(device);
  DevicePools& p = pools()[device];
  const int pool = poolIndex(isHighPriority);
  const uint32_t index = p.next[pool].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
  return OpenRegStream(makeStream(device, p.streams[pool][index]));
}

OpenRegStream getStreamFromExternal(orStream_t stream, DeviceIndex device) {
  check_device_index(device);
  int owner = -1;
  OPENREG_CHECK(orStreamGetDevice(stream, &owner));
  TORCH_CHECK(owner == device, OR_DEVICE_NAME ": the external stream belongs to device ", owner,
              ", not to device ", static_cast<int>(device));
  const auto id = reinterpret_cast<StreamId>(stream);
  return OpenRegStream(makeStream(device, id == defaultHandle(device) ? 0 : id));
}

void sleepOnStream(OpenRegStream stream, int64_t milliseconds) {
  TORCH_CHECK(milliseconds >= 0, OR_DEVICE_NAME ": _sleep needs a non-negative duration, got ",
              milliseconds);
  const openreg::ScopedTaskLabel label(orTaskKindKernel, "openreg::_sleep");
  OPENREG_CHECK(openreg::launch(stream.stream(), [milliseconds] {
    std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  }));
}

int64_t streamNumber(c10::StreamId id) {
  return static_cast<int64_t>(static_cast<uint64_t>(id) >> 32);
}

std::ostream& operator<<(std::ostream& os, const OpenRegStream& stream) {
  char name[64];
  std::snprintf(name, sizeof name, OR_STREAM_NAME_FORMAT, static_cast<int>(stream.device_index()),
                static_cast<unsigned>(streamNumber(stream.id())));
  return os << name;
}

}  // namespace openreg
