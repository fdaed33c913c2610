// The execution engine's entry point (Note [Generic engine] in Engine.cpp): the PrivateUse1
// backend fallback, also called by native kernels that run an operator through the engine and
// adjust its results (csrc/aten/Normalization.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg::engine {

// Runs `op` on the arguments on `stack` and leaves its results there.
void runOnEngine(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace openreg::engine
