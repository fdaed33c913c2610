// Device management for the torch layer, named as in c10/cuda/CUDAFunctions.h.
//
// device_count() is noexcept and caches the runtime's answer: PyTorch calls it on paths that must
// not throw (DeviceGuardImplInterface::deviceCount), and the count cannot change while the
// process runs. If the runtime cannot initialize it reports 0 devices; the first call that needs
// a device then raises the runtime's reason.
// Every other function throws a c10 error naming the bad index and the device count.
#pragma once

#include <c10/core/Device.h>
#include <openreg/runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/Macros.h"

namespace openreg {

OPENREG_TORCH_API c10::DeviceIndex device_count() noexcept;
OPENREG_TORCH_API c10::DeviceIndex current_device();
OPENREG_TORCH_API void set_device(c10::DeviceIndex device);
// Sets `device` and returns the previous current device.
OPENREG_TORCH_API c10::DeviceIndex ExchangeDevice(c10::DeviceIndex device);
// Like ExchangeDevice, for callers that may pass -1 ("no device"): then nothing changes.
OPENREG_TORCH_API c10::DeviceIndex MaybeExchangeDevice(c10::DeviceIndex device);
// Blocks until all work on `device` has completed.
OPENREG_TORCH_API void device_synchronize(c10::DeviceIndex device);
// Throws unless 0 <= device < device_count(), naming the count and OPENREG_DEVICE_COUNT.
OPENREG_TORCH_API void check_device_index(c10::DeviceIndex device);

// What torch.openreg.get_device_properties reports: the runtime's orDeviceProp.
struct DeviceProperties {
  std::string name;
  size_t totalMemory = 0;
  int workerCount = 0;
  size_t memoryAlignment = 0;
  int major = 0;
  int minor = 0;
};
OPENREG_TORCH_API DeviceProperties getDeviceProperties(c10::DeviceIndex device);
// The runtime library's version (orRuntimeGetVersion).
OPENREG_TORCH_API int runtimeVersion();

// The value in effect of one of openreg's environment variables, read through the runtime's
// registry (Note [Configuration variables] in runtime/src/ConfigVariables.h): the environment's
// text, checked against the registry, or the variable's default. An invalid value raises a
// ValueError naming the variable, the value and what it accepts.
// *fromEnvironment (may be null): whether the value is the environment's.
OPENREG_TORCH_API std::string configValue(const char* name, bool* fromEnvironment = nullptr);
// Every entry of the registry.
OPENREG_TORCH_API std::vector<orConfigVariable> configVariables();
// Raises ValueError for `value` of the variable `name` (one the caller parses itself) in the one
// format of an invalid value (orConfigRefuseValue); `reason` says what is wrong, or is empty.
[[noreturn]] OPENREG_TORCH_API void refuseConfigValue(const char* name, const std::string& value,
                                                      const std::string& reason);

// RAII: makes `device` current for the scope when it differs. For code inside this library that
// must call device-relative runtime functions; PyTorch code uses c10::DeviceGuard instead.
class OPENREG_TORCH_API DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

}  // namespace openreg
