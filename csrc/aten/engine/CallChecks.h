// Checks a CPU kernel makes on metadata alone, where PyTorch's Meta kernel does not make them.
//
// [marker: engine-call-checks]
// Note [Call checks]
// The asynchronous path raises at the call what the Meta kernel raises (shape, dtype and device
// errors); what only the CPU kernel checks is raised in the task, and reaches the program at the
// next synchronization (docs/errors.md). A check that needs no data (a dtype, a Scalar's kind) can
// run at the call instead, where the CPU raises it: it is written here, with the CPU's words and
// exception type, for the operators whose Meta kernel lacks it (found by PyTorch's own tests,
// docs/conformance.md). Checks that need data (an index's bounds) stay in the task.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace openreg::engine {

using CallCheck = void (*)(c10::ArrayRef<c10::IValue> args);

// The check for an operator, or nullptr.
CallCheck callCheckFor(const c10::OperatorName& name);

}  // namespace openreg::engine
