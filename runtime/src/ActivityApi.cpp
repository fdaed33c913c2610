// Entry points of runtime.h's "Task activity" section: recordings, the calling thread's
// correlation ids and labels, host-timed activities (Note [Task activity] in
// <openreg/activity.hpp>).
#include <openreg/runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "Activity.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

orError_t orActivityBegin(void) {
  if (!beginRecording()) return fail(orErrorNotPermitted, __func__, "a recording is already on");
  return orSuccess;
}

orError_t orActivityEnd(orTaskActivity** activities, size_t* count) {
  OR_REQUIRE_NOT_NULL(activities);
  OR_REQUIRE_NOT_NULL(count);
  // It waits for tasks queued behind the calling one: see Note [Synchronizing inside a task].
  if (onDeviceWorker()) return synchronizingInTask(__func__);
  *activities = nullptr;
  *count = 0;
  std::vector<orTaskActivity> done = endRecording();
  if (done.empty()) return orSuccess;
  // malloc: the caller releases it with orActivityFree, whatever its own allocator is.
  auto* out = static_cast<orTaskActivity*>(std::malloc(done.size() * sizeof(orTaskActivity)));
  if (out == nullptr) {
    return fail(orErrorMemoryAllocation, __func__,
                "no host memory for " + std::to_string(done.size()) + " activities; they are lost");
  }
  std::copy(done.begin(), done.end(), out);
  *activities = out;
  *count = done.size();
  return orSuccess;
}

void orActivityFree(orTaskActivity* activities) {
  std::free(activities);
}

orError_t orActivityGetRecording(bool* recording) {
  OR_REQUIRE_NOT_NULL(recording);
  *recording = recordingActivity();
  return orSuccess;
}

orError_t orActivityPushCorrelation(uint64_t id) {
  if (!pushCorrelation(id)) {
    return fail(orErrorMemoryAllocation, __func__,
                "no host memory; launches keep the enclosing "
                "id");
  }
  return orSuccess;
}

orError_t orActivityPopCorrelation(void) {
  popCorrelation();
  return orSuccess;
}

orError_t orActivitySetLabel(orTaskKind kind, const char* name, orTaskKind* previousKind,
                             const char** previousName) {
  if (kind != orTaskKindKernel && kind != orTaskKindMemcpy && kind != orTaskKindMemset) {
    return fail(orErrorInvalidValue, __func__,
                "kind " + std::to_string(static_cast<int>(kind)) + " is not an orTaskKind");
  }
  setLabel(kind, name, previousKind, previousName);
  return orSuccess;
}

orError_t orHostActivityBegin(orHostActivity* host, orStream_t handle, const char* name) {
  OR_REQUIRE_NOT_NULL(host);
  host->generation = 0;
  if (!recordingActivity()) return orSuccess;
  // No runtime or no such stream: nothing to put the activity on.
  if (ensureInitialized() != orSuccess) return orSuccess;
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return orSuccess;
  beginHostActivity(*host, *stream, name);
  return orSuccess;
}

orError_t orHostActivityStart(orHostActivity* host) {
  OR_REQUIRE_NOT_NULL(host);
  startHostActivity(*host);
  return orSuccess;
}

orError_t orHostActivityEnd(orHostActivity* host, bool failed) {
  OR_REQUIRE_NOT_NULL(host);
  endHostActivity(*host, failed);
  return orSuccess;
}

}  // extern "C"
