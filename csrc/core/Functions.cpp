#include "core/Functions.h"
#include "core/DeviceTrace.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include "core/Exception.h"
#include "core/TaskWarnings.h"

namespace openreg {

c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex count = [] {
    int n = 0;
    return orGetDeviceCount(&n) == orSuccess ? static_cast<c10::DeviceIndex>(n)
                                             : c10::DeviceIndex{0};
  }();
  return count;
}

void check_device_index(c10::DeviceIndex device) {
  if (device >= 0 && device < device_count()) return;
  if (device_count() == 0) {
    int n = 0;
    OPENREG_CHECK(orGetDeviceCount(&n));  // raises the runtime's reason
  }
  TORCH_CHECK(false, OR_DEVICE_NAME ": invalid device index ", static_cast<int>(device),
              ": there are ", static_cast<int>(device_count()), " openreg devices (indices 0 to ",
              static_cast<int>(device_count()) - 1,
              "). The device index is out of range: set OPENREG_DEVICE_COUNT before the first use "
              "to have more");
}

c10::DeviceIndex current_device() {
  int device = 0;
  OPENREG_CHECK(orGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void set_device(c10::DeviceIndex device) {
  check_device_index(device);
  OPENREG_CHECK(orSetDevice(device));
}

c10::DeviceIndex ExchangeDevice(c10::DeviceIndex device) {
  const c10::DeviceIndex previous = current_device();
  if (device != previous) set_device(device);
  return previous;
}

c10::DeviceIndex MaybeExchangeDevice(c10::DeviceIndex device) {
  if (device < 0) return current_device();
  return ExchangeDevice(device);
}

void device_synchronize(c10::DeviceIndex device) {
  DeviceScope scope(device);
  OPENREG_CHECK(orDeviceSynchronize());
  deliverTaskWarnings();
  if (auto* t = trace::active()) (*t)->trace_gpu_device_synchronization(trace::kDevice);
}

DeviceProperties getDeviceProperties(c10::DeviceIndex device) {
  check_device_index(device);
  orDeviceProp prop;
  OPENREG_CHECK(orGetDeviceProperties(&prop, device));
  return {prop.name,  prop.totalGlobalMem, prop.workerCount, prop.memoryAlignment,
          prop.major, prop.minor};
}

int runtimeVersion() {
  int version = 0;
  OPENREG_CHECK(orRuntimeGetVersion(&version));
  return version;
}

std::vector<orConfigVariable> configVariables() {
  int count = 0;
  OPENREG_CHECK(orConfigGetVariableCount(&count));
  std::vector<orConfigVariable> variables(count);
  for (int i = 0; i < count; ++i) OPENREG_CHECK(orConfigGetVariable(i, &variables[i]));
  return variables;
}

std::string configValue(const char* name, bool* fromEnvironment) {
  const char* value = nullptr;
  orConfigSource source = orConfigSourceDefault;
  if (const orError_t error = orConfigGetValue(name, &value, &source); error != orSuccess) {
    // An invalid value is the user's to fix: a ValueError naming the variable, as Python's own
    // checks of a setting raise.
    TORCH_CHECK_VALUE(error != orErrorInvalidValue, orGetLastErrorMessage());
    OPENREG_CHECK(error);
  }
  if (fromEnvironment != nullptr) *fromEnvironment = source == orConfigSourceEnvironment;
  return value;
}

void refuseConfigValue(const char* name, const std::string& value, const std::string& reason) {
  const orError_t error =
      orConfigRefuseValue(name, value.c_str(), reason.empty() ? nullptr : reason.c_str());
  TORCH_CHECK_VALUE(
      false, error == orErrorInvalidValue ? orGetLastErrorMessage() : orGetErrorString(error));
}

DeviceScope::DeviceScope(c10::DeviceIndex device) : previous_(ExchangeDevice(device)) {}

DeviceScope::~DeviceScope() {
  OPENREG_WARN(orSetDevice(previous_));
}

}  // namespace openreg
