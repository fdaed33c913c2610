// Which device a call runs on, and the arguments that must move there first.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// The device of a call: every openreg tensor argument must be on one device; CPU tensors are
// accepted only as 0-dim scalars, as TensorIterator accepts them. Without openreg tensors (a
// factory), the current device.
c10::Device findDevice(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// Indexing operators' CPU index tensors, copied to the data's device (see the definition).
void moveCpuIndices(const OpTraits& traits, torch::jit::Stack* stack, size_t nArgs);

// Refuses a call of an operator that draws from the CPU's default generator (see the definition).
void checkCpuGeneratorUse(const c10::OperatorHandle& op, const OpTraits& traits,
                          c10::ArrayRef<c10::IValue> args);

// The openreg generator a random operator on `device` uses: the one passed, or the device's
// default. A generator of another device type is the caller's error.
at::Generator deviceGenerator(const c10::OperatorHandle& op, const c10::IValue& arg,
                              c10::Device device);

}  // namespace openreg::engine
