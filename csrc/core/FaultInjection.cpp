#include "core/FaultInjection.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <mutex>

namespace openreg {
namespace {

struct State {
  std::mutex mutex;
  int64_t oomAt = 0, kernelAt = 0;
  int64_t allocations = 0, kernels = 0;
  int lostDevice = -1;
};

State& state() {
  static auto* s = new State();  // immortal: allocations happen at exit
  return *s;
}

std::string lostMessage(int device) {
  return OR_DEVICE_NAME ": device " + std::to_string(device) +
         " is lost (injected by torch.openreg.debug.inject_faults(lose_device=" +
         std::to_string(device) +
         ")): every allocation and kernel on it fails until the injection ends.";
}

}  // namespace

std::atomic<bool> FaultInjection::armed_{false};

void FaultInjection::configure(int64_t oomAt, int64_t kernelAt, int lostDevice) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.oomAt = oomAt;
  s.kernelAt = kernelAt;
  s.lostDevice = lostDevice;
  s.allocations = 0;
  s.kernels = 0;
  armed_.store(oomAt > 0 || kernelAt > 0 || lostDevice >= 0);
}

// [marker: fault-injection-allocation]
std::string FaultInjection::allocation(c10::DeviceIndex device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  TORCH_CHECK(device != s.lostDevice, lostMessage(device));
  if (s.oomAt > 0 && ++s.allocations == s.oomAt) {
    return " (injected: allocation " + std::to_string(s.oomAt) +
           " since torch.openreg.debug.inject_faults(oom_at=" + std::to_string(s.oomAt) + "))";
  }
  return {};
}

// [marker: fault-injection-kernel]
std::shared_ptr<const std::string> FaultInjection::kernelLaunch(c10::DeviceIndex device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device == s.lostDevice) return std::make_shared<const std::string>(lostMessage(device));
  if (s.kernelAt > 0 && ++s.kernels == s.kernelAt) {
    return std::make_shared<const std::string>(
        "injected kernel failure (kernel " + std::to_string(s.kernelAt) +
        " since torch.openreg.debug.inject_faults(kernel_at=" + std::to_string(s.kernelAt) + "))");
  }
  return nullptr;
}

void FaultInjection::failIfInjected(const std::shared_ptr<const std::string>& message) {
  TORCH_CHECK(message == nullptr, *message);
}

}  // namespace openreg
