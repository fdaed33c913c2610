// The profiler stubs of the openreg device: device time for the legacy autograd profiler.
//
// Note [Legacy profiler stubs]
// torch.autograd.profiler.profile(use_device="openreg") without use_kineto (its default) profiles
// in the KINETO_PRIVATEUSE1_FALLBACK state: at the start and at the end of every operator it
// calls record() of the stubs registered with registerPrivateUse1Methods, and when the profile is
// read, elapsed() between the two, in microseconds, as the operator's device time. Without stubs
// every operator warns "PrivateUse1 used in profiler but not enabled" and the times are garbage.
// Here record() records a timing event on the current stream of the current device, and
// elapsed() is the time between the completion of the two records: the device time of the work
// queued on that stream during the operator, as the CUDA stubs measure it. An operator whose two
// records fell on different devices (it changed the current device) gets 0.
// There are no device-side ranges or marks: mark/rangePush/rangePop do nothing.
#include <torch/csrc/profiler/stubs/base.h>

#include <c10/util/ApproximateClock.h>
#include <openreg/runtime.h>

#include <memory>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"

namespace openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

orEvent_t eventOf(const ProfilerVoidEventStub* stub) {
  return static_cast<orEvent_t>(stub->get());
}

// [marker: profiler-stubs]
struct ProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpuNs) const override {
    const c10::DeviceIndex current = current_device();
    if (device != nullptr) *device = current;
    orEvent_t raw = nullptr;
    OPENREG_CHECK(orEventCreate(&raw));
    *event = std::shared_ptr<void>(
        raw, [](void* e) { OPENREG_WARN(orEventDestroy(static_cast<orEvent_t>(e))); });
    if (cpuNs != nullptr) *cpuNs = c10::getTime();
    OPENREG_CHECK(orEventRecord(raw, getCurrentOpenRegStream(current).stream()));
  }

  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    OPENREG_CHECK(orEventSynchronize(eventOf(start)));
    OPENREG_CHECK(orEventSynchronize(eventOf(end)));
    float ms = 0;
    if (orEventElapsedTime(&ms, eventOf(start), eventOf(end)) != orSuccess) return 0;
    return ms * 1000.0f;
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override { device_synchronize(current_device()); }
};

// [marker: register-profiler-stubs]
const bool kRegistered = [] {
  static ProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace openreg
