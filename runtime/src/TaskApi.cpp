// Entry points of runtime.h's "Tasks" section: launching a task object
// (Note [Tasks across the C ABI] in runtime.h), a task's report of its failure, and the host's
// check of the memory it reads.
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <string>

#include "Failure.h"
#include "Poison.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

// [marker: launch-task]
// Note [Tasks across the C ABI] in runtime.h. The object moves once, from the caller's storage
// into the queued operation (no allocation), as it did when the C++ Task itself was passed.
orError_t orLaunchTask(orStream_t stream, const orTaskOps* ops, void* task, size_t size,
                       unsigned int flags) {
  // No OR_ENTER here: the object is the runtime's once these checks pass, whatever comes after.
  OR_REQUIRE_NOT_NULL(ops);
  OR_REQUIRE_NOT_NULL(task);
  if (ops->run == nullptr || ops->relocate == nullptr || ops->destroy == nullptr) {
    return fail(orErrorInvalidValue, __func__,
                "ops->run, ops->relocate and ops->destroy are required");
  }
  // From here on the object is the runtime's (runtime.h): destroyed in place if it cannot be taken.
  if (size == 0 || size > OR_TASK_INLINE_BYTES) {
    ops->destroy(task);
    return fail(orErrorInvalidValue, __func__,
                "size must be 1.." + std::to_string(OR_TASK_INLINE_BYTES) + " bytes, not " +
                    std::to_string(size));
  }
  if ((flags & ~static_cast<unsigned>(orLaunchTaskWait)) != 0) {
    ops->destroy(task);
    return fail(orErrorInvalidValue, __func__, "unknown flags");
  }
  StreamOp op;
  op.task.adopt(ops, task);
  return launchOn(__func__, stream, std::move(op), (flags & orLaunchTaskWait) != 0);
}

orError_t orTaskFail(orTaskContext_t context, int category, const char* message) {
  OR_REQUIRE_NOT_NULL(context);
  context->report(category, message);
  return orSuccess;
}

// [marker: check-host-accesses]
orError_t orCheckHostAccesses(const orMemoryAccess* accesses, size_t count) {
  OR_ENTER();
  if (accesses == nullptr && count != 0) return nullArgument(__func__, "accesses");
  PoisonMap& poison = poisonMap();
  if (!poison.active()) return orSuccess;
  if (FailureRef failure = poison.findRead({accesses, count})) return report(*failure);
  poison.clearCovered({accesses, count});
  return orSuccess;
}

}  // extern "C"
