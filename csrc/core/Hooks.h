// The PrivateUse1 hooks of openreg: how ATen's generic code asks about the device (availability,
// device count, current device, which device a pointer is on, whether host memory is pinned).
// Registered once, at load time, in Hooks.cpp.
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "core/Macros.h"

namespace openreg {

struct OPENREG_TORCH_API Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  // Never throws: reports false when the runtime cannot initialize.
  bool isAvailable() const override;
  // True once the runtime has been initialized in this process (it initializes every device at
  // once, so there is no per-device context).
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  void init() const override;

  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override;

  at::Device getDeviceFromPtr(void* data) const override;
  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  // UntypedStorage.resize_ on an openreg storage.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

// A step of the layers above core (which core does not know) that Hooks::init runs before the
// devices initialize: the engine's OPENREG_FALLBACK is configuration like the runtime's variables,
// so a bad value fails the first use of a device; the engine registers itself for the structured
// operators then (Note [Structured operators on the engine]). Registered at load time.
OPENREG_TORCH_API void registerInitCheck(void (*check)());

}  // namespace openreg
