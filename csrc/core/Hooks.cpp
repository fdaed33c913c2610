#include "core/Hooks.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <atomic>
#include <vector>

#include "compat/TorchVersion.h"  // stops a build for a torch outside the supported window
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/Storage.h"
#include "core/allocator/HostAllocator.h"

namespace openreg {
namespace {
std::atomic<bool> gInitialized{false};

std::vector<void (*)()>& initChecks() {
  static std::vector<void (*)()> checks;  // filled at load time, read by init
  return checks;
}
}  // namespace

void registerInitCheck(void (*check)()) {
  initChecks().push_back(check);
}

bool Hooks::isAvailable() const {
  return device_count() > 0;
}

bool Hooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  check_device_index(device_index);
  return gInitialized.load(std::memory_order_acquire);
}

// [marker: hooks-init]
void Hooks::init() const {
  for (void (*check)() : initChecks()) check();  // OPENREG_FALLBACK, registered by Ledger.cpp
  OPENREG_CHECK(orInit(0));                      // sets up every device, or raises why it cannot
  gInitialized.store(true, std::memory_order_release);
}

c10::DeviceIndex Hooks::deviceCount() const {
  return device_count();
}
void Hooks::setCurrentDevice(c10::DeviceIndex device) const {
  set_device(device);
}
c10::DeviceIndex Hooks::getCurrentDevice() const {
  return current_device();
}
c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex device) const {
  return ExchangeDevice(device);
}
c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  return MaybeExchangeDevice(device);
}

// [marker: hooks-generators]
const at::Generator& Hooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return openreg::getDefaultGenerator(device_index);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return createGenerator(device_index);
}

// [marker: hooks-pointers]
at::Device Hooks::getDeviceFromPtr(void* data) const {
  orPointerAttributes attributes;
  OPENREG_CHECK(orPointerGetAttributes(&attributes, data));
  TORCH_CHECK(attributes.type == orMemoryTypeDevice, OR_DEVICE_NAME ": the pointer ", data,
              " is not openreg device memory");
  return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(attributes.device));
}

bool Hooks::isPinnedPtr(const void* data) const {
  return openreg::isPinnedPtr(data);
}

at::Allocator* Hooks::getPinnedMemoryAllocator() const {
  return hostAllocator();
}

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
}

namespace {
// [marker: hooks-registration]
const bool gRegistered = [] {
  static Hooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();
}  // namespace

}  // namespace openreg
