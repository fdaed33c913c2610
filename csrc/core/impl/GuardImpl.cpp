#include "core/impl/GuardImpl.h"
#include "core/DeviceTrace.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/allocator/DeviceAllocator.h"

namespace openreg {

using c10::Device;
using c10::DeviceIndex;

namespace {
Device openregDevice(DeviceIndex index) {
  return Device(c10::DeviceType::PrivateUse1, index);
}
orEvent_t asEvent(void* event) {
  return static_cast<orEvent_t>(event);
}

// [marker: guard-index-given]
// Note [Device index -1 in the guard]
// torch.accelerator.set_stream(s) makes s's device index current on the accelerator (openreg)
// before it checks s's device type. A stream of another device type, a CPU stream above all, has
// index -1, so openreg's first sight of the mistake is setDevice(openreg:-1), which knows nothing
// of the stream. Device guards treat -1 as "the current device" and never pass it here, and
// torch.accelerator.set_device_index(-1) does nothing, so this is how -1 arrives: the error says
// so, and what to pass, rather than "invalid device index -1".
void checkIndexGiven(DeviceIndex index) {
  TORCH_CHECK_VALUE(
      index >= 0, OR_DEVICE_NAME ": expected an openreg stream or device, but got device index ",
      static_cast<int>(index),
      ", which names no openreg device. torch.accelerator.set_stream(stream) makes the stream's "
      "device index current before it checks the stream's device type, and a stream of another "
      "device type, such as a cpu stream (torch.Stream(device=\"cpu\")), has index -1: it is not "
      "an openreg stream. ",
      kWhatStreamToPass);
}
}  // namespace

GuardImpl::GuardImpl(c10::DeviceType t) {
  TORCH_CHECK(t == static_type, OR_DEVICE_NAME ": GuardImpl built for device type ", t);
}

// [marker: guard-device]
Device GuardImpl::exchangeDevice(Device d) const {
  TORCH_CHECK(d.type() == static_type, OR_DEVICE_NAME ": expected an openreg device, got ", d);
  checkIndexGiven(d.index());
  return openregDevice(ExchangeDevice(d.index()));
}

Device GuardImpl::getDevice() const {
  return openregDevice(current_device());
}

void GuardImpl::setDevice(Device d) const {
  TORCH_CHECK(d.type() == static_type, OR_DEVICE_NAME ": expected an openreg device, got ", d);
  checkIndexGiven(d.index());
  set_device(d.index());
}

void GuardImpl::uncheckedSetDevice(Device d) const noexcept {
  OPENREG_WARN(orSetDevice(d.index()));
}

DeviceIndex GuardImpl::deviceCount() const noexcept {
  return device_count();
}

c10::DeviceCapability GuardImpl::getDeviceCapability(Device) const {
  // Kernels are ATen's CPU kernels, so the device supports every dtype the CPU does.
  return c10::DeviceCapability();
}

// [marker: guard-streams]
c10::Stream GuardImpl::getStream(Device d) const {
  return getCurrentOpenRegStream(d.index()).unwrap();
}

c10::Stream GuardImpl::getDefaultStream(Device d) const {
  return getDefaultOpenRegStream(d.index()).unwrap();
}

c10::Stream GuardImpl::getStreamFromGlobalPool(Device d, bool isHighPriority) const {
  return getStreamFromPool(isHighPriority, d.index()).unwrap();
}

c10::Stream GuardImpl::getNewStream(Device d, int priority) const {
  // As on CUDA, "new" streams come from the pool: c10::Stream has no destructor to free one.
  return getStreamFromPool(priority < 0, d.index()).unwrap();
}

c10::Stream GuardImpl::exchangeStream(c10::Stream s) const {
  OpenRegStream stream(s);
  OpenRegStream previous = getCurrentOpenRegStream(stream.device_index());
  setCurrentOpenRegStream(stream);
  return previous.unwrap();
}

void* GuardImpl::getStreamNativeHandle(const c10::Stream s) const {
  return static_cast<void*>(OpenRegStream(s).stream());
}

bool GuardImpl::queryStream(const c10::Stream& stream) const {
  return OpenRegStream(stream).query();
}

void GuardImpl::synchronizeStream(const c10::Stream& stream) const {
  OpenRegStream(stream).synchronize();
  if (auto* t = trace::active()) {  // Note [Device trace] in core/DeviceTrace.h
    (*t)->trace_gpu_stream_synchronization(trace::kDevice,
                                           trace::handle(OpenRegStream(stream).stream()));
  }
}

void GuardImpl::synchronizeDevice(const DeviceIndex device_index) const {
  device_synchronize(device_index < 0 ? current_device() : device_index);
}

// [marker: guard-events]
void GuardImpl::record(void** event, const c10::Stream& stream, const DeviceIndex device_index,
                       const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              OR_DEVICE_NAME ": event device index ", static_cast<int>(device_index),
              " does not match the recording stream's device ",
              static_cast<int>(stream.device_index()), ".");
  OpenRegStream s(stream);
  if (*event == nullptr) {
    DeviceScope scope(s.device_index());
    orEvent_t created = nullptr;
    OPENREG_CHECK(orEventCreateWithFlags(
        &created, flag == c10::EventFlag::BACKEND_DEFAULT ? orEventDefault : orEventDisableTiming));
    *event = created;
    if (auto* t = trace::active())
      (*t)->trace_gpu_event_creation(trace::kDevice, trace::handle(created));
  }
  OPENREG_CHECK(orEventRecord(asEvent(*event), s.stream()));
  if (auto* t = trace::active()) {
    (*t)->trace_gpu_event_record(trace::kDevice, trace::handle(*event), trace::handle(s.stream()));
  }
}

void GuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  OPENREG_CHECK(orStreamWaitEvent(OpenRegStream(stream).stream(), asEvent(event), 0));
  if (auto* t = trace::active()) {
    (*t)->trace_gpu_event_wait(trace::kDevice, trace::handle(event),
                               trace::handle(OpenRegStream(stream).stream()));
  }
}

bool GuardImpl::queryEvent(void* event) const {
  if (event == nullptr) return true;
  const orError_t status = orEventQuery(asEvent(event));
  if (status == orErrorNotReady) return false;
  OPENREG_CHECK(status);
  return true;
}

void GuardImpl::synchronizeEvent(void* event) const {
  if (event == nullptr) return;
  OPENREG_CHECK(orEventSynchronize(asEvent(event)));
  if (auto* t = trace::active())
    (*t)->trace_gpu_event_synchronization(trace::kDevice, trace::handle(event));
}

double GuardImpl::elapsedTime(void* event1, void* event2, const DeviceIndex) const {
  TORCH_CHECK(event1 != nullptr && event2 != nullptr,
              OR_DEVICE_NAME ": both events must be recorded before calculating elapsed time.");
  float ms = 0;
  OPENREG_CHECK(orEventElapsedTime(&ms, asEvent(event1), asEvent(event2)));
  return static_cast<double>(ms);
}

void GuardImpl::destroyEvent(void* event, const DeviceIndex) const noexcept {
  if (event == nullptr) return;
  if (auto* t = trace::active())
    (*t)->trace_gpu_event_deletion(trace::kDevice, trace::handle(event));
  OPENREG_WARN(orEventDestroy(asEvent(event)));
}

void GuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                      const c10::Stream& stream) const {
  deviceAllocator().recordStream(data_ptr, stream);
}

// [marker: guard-registration]
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl)

}  // namespace openreg
