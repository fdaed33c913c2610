// The execution engine's entry point (Note [Generic engine] in Engine.cpp): the PrivateUse1
// backend fallback, also called by native kernels that run an operator through the engine and
// adjust its results (csrc/aten/Normalization.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "aten/engine/Arguments.h"
#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// Runs `op` on the arguments on `stack` and leaves its results there.
void runOnEngine(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The call itself, on arguments the caller keeps (runOnEngine's are its stack's, a borrowing
// entry's are borrowed: Note [Borrowed arguments] in BorrowedCalls.cpp): its checks, then the
// asynchronous or the synchronizing path, whose new results go to `fresh`. Returns false, having
// run only the checks, for a view operator (the copying fallback's, which needs the stack).
// The caller has delivered task warnings and moved CPU index tensors (traits.indexLists).
bool runCall(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
             FreshResults* fresh);

}  // namespace openreg::engine
