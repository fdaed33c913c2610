// The engine's synchronizing path (Note [Generic engine] in Engine.cpp): the stream is
// synchronized and the CPU kernel runs on the calling thread.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include "aten/engine/Arguments.h"
#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// `signature`: the call's, taken before it ran (null: the call cannot be keyed).
// The call's new results go to `fresh`; the arguments stay where the caller keeps them.
void runSync(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
             c10::Device device, const Signature* signature, FreshResults* fresh);

// The CPU kernel on the calling thread: its error, raised at the call, keeps the CPU's type and
// names the device and the operator.
void runCpuKernelNamingDevice(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                              c10::Device device);

}  // namespace openreg::engine
