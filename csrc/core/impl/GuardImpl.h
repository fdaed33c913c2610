// The DeviceGuardImplInterface of openreg: what c10::DeviceGuard, torch.Stream, torch.Event and
// torch.accelerator use to switch devices and to drive streams and events. Registered for
// PrivateUse1 in GuardImpl.cpp.
//
// Events are the runtime's orEvent_t handles, created lazily at the first record on the
// recording stream's device (timing enabled only for EventFlag::BACKEND_DEFAULT, as CUDA does).
// noexcept methods (deviceCount, uncheckedSetDevice, destroyEvent) warn instead of throwing.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/Macros.h"

namespace openreg {

struct OPENREG_TORCH_API GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  GuardImpl() = default;
  explicit GuardImpl(c10::DeviceType t);

  c10::DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device d) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device d) const override;
  void uncheckedSetDevice(c10::Device d) const noexcept override;
  c10::DeviceIndex deviceCount() const noexcept override;
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override;

  c10::Stream getStream(c10::Device d) const override;
  c10::Stream getDefaultStream(c10::Device d) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override;
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream s) const override;
  void* getStreamNativeHandle(const c10::Stream s) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* event1, void* event2,
                     const c10::DeviceIndex device_index) const override;
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
  // Tensor.record_stream: the caching allocator keeps the block until `stream`'s work is done.
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override;
};

}  // namespace openreg
