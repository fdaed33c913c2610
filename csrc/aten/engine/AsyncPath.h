// The engine's asynchronous path (Note [Generic engine] in Engine.cpp): outputs from Meta shapes,
// one task on the current stream.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include "aten/engine/Arguments.h"
#include "aten/engine/AsyncTask.h"
#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// Returns false, changing nothing, when there are no shapes ahead for this call. `signature` is
// the call's (null: it cannot be keyed), `known` what the operator's ShapeCache holds for it.
// The call's new results go to `fresh`; the arguments stay where the caller keeps them.
bool runAsync(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
              c10::Device device, const Signature* signature, const KnownCall& known,
              const CallState& state, FreshResults* fresh);

}  // namespace openreg::engine
