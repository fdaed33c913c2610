// The execution engine's entry point, for native kernels that run an operator through the engine
// and adjust its results (csrc/aten/Normalization.cpp). See Note [Generic engine] in
// GenericKernel.cpp.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg::engine {

// Runs `op` on the arguments on `stack` as the PrivateUse1 fallback would, leaving its results.
void runOnEngine(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace openreg::engine
