// Device entry points: count, current device, properties, synchronization, memory info.
#include <openreg/runtime.h>

#include <cstdio>

#include "Capture.h"
#include "Runtime.h"

using namespace openreg;

namespace {
orError_t invalidDevice(const char* call, int index) {
  return fail(orErrorInvalidDevice, call,
              "invalid device index " + std::to_string(index) + ": there are " +
                  std::to_string(deviceCount()) + " devices (set OPENREG_DEVICE_COUNT for more)");
}
}  // namespace

extern "C" {

orError_t orInit(unsigned int flags) {
  OR_ENTER();
  return flags == 0 ? orSuccess : fail(orErrorInvalidValue, __func__, "flags must be 0");
}

orError_t orGetDeviceCount(int* count) {
  OR_ENTER_CONFIGURED();
  OR_REQUIRE_NOT_NULL(count);
  *count = deviceCount();
  return orSuccess;
}

orError_t orSetDevice(int device) {
  OR_ENTER_CONFIGURED();
  if (device < 0 || device >= deviceCount()) return invalidDevice(__func__, device);
  currentDeviceSlot() = device;
  return orSuccess;
}

orError_t orGetDevice(int* device) {
  OR_ENTER_CONFIGURED();
  OR_REQUIRE_NOT_NULL(device);
  *device = currentDevice();
  return orSuccess;
}

orError_t orGetDeviceProperties(orDeviceProp* prop, int device) {
  OR_ENTER_CONFIGURED();
  OR_REQUIRE_NOT_NULL(prop);
  if (device < 0 || device >= deviceCount()) return invalidDevice(__func__, device);
  *prop = orDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "OpenReg Emulated Device");
  prop->totalGlobalMem = runtime().config.deviceMemory;
  prop->workerCount = runtime().config.streamWorkers;
  prop->memoryAlignment = DeviceMemory::kAlignment;
  prop->major = 1;
  prop->minor = 0;
  return orSuccess;
}

orError_t orDeviceSynchronize(void) {
  OR_ENTER_SYNCHRONIZING();
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  return synchronizeDevice(device(currentDevice()));
}

orError_t orGetSynchronizationCount(uint64_t* count) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(count);
  *count = synchronizationCount();
  return orSuccess;
}

orError_t orMemGetInfo(size_t* free, size_t* total) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(free);
  OR_REQUIRE_NOT_NULL(total);
  const DeviceMemory& memory = device(currentDevice()).memory;
  *total = memory.capacity();
  *free = memory.capacity() - memory.bytesInUse();
  return orSuccess;
}

orError_t orDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  OR_ENTER_CONFIGURED();
  if (leastPriority != nullptr) *leastPriority = kLeastStreamPriority;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestStreamPriority;
  return orSuccess;
}

orError_t orDeviceGetDefaultStream(int index, orStream_t* stream) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(stream);
  if (index < 0 || index >= deviceCount()) return invalidDevice(__func__, index);
  *stream = reinterpret_cast<orStream_t>(device(index).defaultStream->handle());
  return orSuccess;
}

}  // extern "C"
