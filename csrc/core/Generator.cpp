#include "core/Generator.h"

#include <mutex>
#include <vector>

#include "core/Functions.h"

namespace openreg {

// [marker: generator]
GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : at::CPUGeneratorImpl(c10::default_rng_seed_val) {
  device_ = c10::Device(c10::DeviceType::PrivateUse1, device);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

const at::Generator& getDefaultGenerator(c10::DeviceIndex device) {
  // Never destroyed: Python may still use a generator during exit.
  static auto* generators = new std::vector<at::Generator>();
  static std::once_flag created;
  std::call_once(created, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators->push_back(at::make_generator<GeneratorImpl>(i));
    }
  });
  if (device < 0) device = current_device();
  check_device_index(device);
  return (*generators)[device];
}

at::Generator createGenerator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<GeneratorImpl>(device);
}

}  // namespace openreg
