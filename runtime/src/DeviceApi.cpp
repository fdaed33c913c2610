// Device entry points: count, current device, properties, synchronization, memory info.
#include <openreg/runtime.h>

#include <cstdio>

#include "Runtime.h"

using namespace openreg;

namespace {
orError_t invalidDevice(int index) {
  return fail(orErrorInvalidDevice, "openreg: invalid device index " + std::to_string(index) +
                                        ": there are " + std::to_string(deviceCount()) +
                                        " devices (set OPENREG_DEVICE_COUNT for more)");
}
}  // namespace

extern "C" {

orError_t orInit(unsigned int flags) {
  OR_ENTER();
  return flags == 0 ? orSuccess : fail(orErrorInvalidValue, "openreg: orInit: flags must be 0");
}

orError_t orGetDeviceCount(int* count) {
  OR_ENTER_CONFIGURED();
  if (count == nullptr) return orErrorInvalidValue;
  *count = deviceCount();
  return orSuccess;
}

orError_t orSetDevice(int index) {
  OR_ENTER_CONFIGURED();
  if (index < 0 || index >= deviceCount()) return invalidDevice(index);
  currentDeviceSlot() = index;
  return orSuccess;
}

orError_t orGetDevice(int* index) {
  OR_ENTER_CONFIGURED();
  if (index == nullptr) return orErrorInvalidValue;
  *index = currentDevice();
  return orSuccess;
}

orError_t orGetDeviceProperties(orDeviceProp* prop, int index) {
  OR_ENTER_CONFIGURED();
  if (prop == nullptr) return orErrorInvalidValue;
  if (index < 0 || index >= deviceCount()) return invalidDevice(index);
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
  OR_ENTER();
  return synchronizeDevice(device(currentDevice()));
}

orError_t orMemGetInfo(size_t* free, size_t* total) {
  OR_ENTER();
  if (free == nullptr || total == nullptr) return orErrorInvalidValue;
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
  if (stream == nullptr) return orErrorInvalidValue;
  if (index < 0 || index >= deviceCount()) return invalidDevice(index);
  *stream = reinterpret_cast<orStream_t>(device(index).defaultStream->handle());
  return orSuccess;
}

}  // extern "C"
