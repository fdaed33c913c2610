// Random-number generators of openreg devices.
//
// An openreg generator is ATen's CPU generator (the same Philox-free MT19937 engine and the same
// normal-distribution cache) labelled with an openreg device. Its state has the CPU generator's
// layout, so for the same seed it produces the same random stream as the CPU: random operators
// that run the CPU kernels on the device memory with this generator give results bitwise equal to
// the CPU's. One default generator per device, seeded like the CPU's default (67280421310721).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include "core/Macros.h"

namespace openreg {

struct OPENREG_TORCH_API GeneratorImpl final : public at::CPUGeneratorImpl {
  explicit GeneratorImpl(c10::DeviceIndex device);
};

// The default generator of `device` (-1: the current device).
OPENREG_TORCH_API const at::Generator& getDefaultGenerator(c10::DeviceIndex device = -1);
OPENREG_TORCH_API at::Generator createGenerator(c10::DeviceIndex device = -1);

}  // namespace openreg
