// Asking an operator's Meta kernel for a call's output shapes, and keeping the answer
// (Note [Shape cache] in ShapeCache.h).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>

#include "aten/engine/OpTraits.h"
#include "aten/engine/ShapeCache.h"

namespace openreg::engine {

// The Meta kernel's answer for one call; nullptr when the operator has no Meta kernel at all.
// Shape, dtype and device errors are raised here, at the call, in the CPU's words (Note [Meta
// errors at the call] in CallChecks.h).
std::shared_ptr<const MetaAnswer> askMeta(const c10::OperatorHandle& op, OpTraits& traits,
                                          c10::ArrayRef<c10::IValue> args);

// The results of one call (Meta tensors, or the CPU kernel's: see Note [Shapes from the CPU
// kernel] in SyncPath.cpp) as the shapes an answer keeps, one per return that is not a written
// argument.
void recordResults(const c10::FunctionSchema& schema, const torch::jit::Stack& results,
                   MetaAnswer* answer);

}  // namespace openreg::engine
