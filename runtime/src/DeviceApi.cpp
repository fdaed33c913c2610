// Entry points of runtime.h's "Devices" section: count, current device, properties,
// synchronization, memory info, stream priorities.
#include <openreg/runtime.h>

#include <cstdio>

#include "Capture.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

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

}  // extern "C"
