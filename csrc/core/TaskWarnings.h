// Warnings a kernel raises inside a task, given to the program on the host.
//
// [marker: task-warnings]
// Note [Task warnings]
// A task's kernel runs on a device worker, where no Python warning handler is installed: c10's
// default handler would print its warnings to stderr, out of reach of `warnings.catch_warnings`,
// `-W error` and pytest (searchsorted's "input value tensor is non-contiguous", random_'s "from
// is out of bounds"). Errors travel with the task's stream and memory (docs/errors.md); a warning
// stops nothing, so it only has to reach the program: tasks post their warnings here, and the host
// gives them, in the order the tasks raised them, at its next meeting with the device: the next
// operator call, a synchronization, a copy to the host. A warning therefore arrives at the call
// that queued the kernel when the program reads its result there, as a test's
// `assertWarnsRegex(..., lambda: assertEqual(op(...), expected))` does, and otherwise at a later
// call, never lost.
#pragma once

#include <c10/util/Exception.h>

#include "core/Macros.h"

namespace openreg {

// Installed for the length of a task: every warning raised on this thread is posted.
class OPENREG_TORCH_API TaskWarningSink : public c10::WarningHandler {
 public:
  TaskWarningSink() : guard_(this) {}
  void process(const c10::Warning& warning) override;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

// On the host: raises the posted warnings through this thread's handler (Python's, in a call from
// Python), oldest first. Costs one atomic load when there are none.
OPENREG_TORCH_API void deliverTaskWarnings();

}  // namespace openreg
