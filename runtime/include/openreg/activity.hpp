// openreg task activity: the device-side timeline a profiler reads (what CUPTI's activity API is
// to CUDA).
//
// Note [Task activity]
// While a recording is on (beginTaskActivity .. endTaskActivity), every stream task launched
// (a kernel through openreg::launch or orLaunchHostFunc, a copy, a memset) is timed by the worker
// that runs it: its start and end, the stream and device, its kind and name, when and from which
// host thread it was launched, and the correlation id the launching host thread had pushed
// (pushLaunchCorrelation; a profiler pushes the id of the operator it is recording, so the device
// work is charged to the operator that launched it). When no recording is on, a launch reads one
// relaxed atomic flag and nothing else: the task is not wrapped, timed or counted.
// Event records and waits are not tasks and are not recorded.
//
// Threading: begin/end from one controlling thread at a time; launches from any thread. One
// recording at a time (a second beginTaskActivity while one is on returns false).
// Times are nanoseconds since the Unix epoch (std::chrono::system_clock), the clock profilers
// (Kineto) put their host events on.
//
// Header-only over the C API's activity section (runtime.h): the records are C structs, and the
// runtime's array of them is copied into a vector of the caller's standard library here.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace openreg {

// [marker: task-activity]
using TaskActivity = orTaskActivity;

// Starts recording. False (and nothing changes) if a recording is already on.
inline bool beginTaskActivity() noexcept {
  return orActivityBegin() == orSuccess;
}
// Stops recording, waits until every task launched during it has run (or been dropped), and
// returns their activities in completion order. Empty if no recording was on, or if no host memory
// was left for them. Not from a task.
inline std::vector<TaskActivity> endTaskActivity() {
  orTaskActivity* activities = nullptr;
  std::size_t count = 0;
  if (orActivityEnd(&activities, &count) != orSuccess) return {};
  std::vector<TaskActivity> out;
  try {
    out.assign(activities, activities + count);
  } catch (...) {
    orActivityFree(activities);
    throw;
  }
  orActivityFree(activities);
  return out;
}
// True while a recording is on.
inline bool taskActivityOn() noexcept {
  bool on = false;
  return orActivityGetRecording(&on) == orSuccess && on;
}

// The calling thread's correlation stack: launches made while an id is pushed carry the top one.
// Without host memory for a push, launches keep the enclosing id.
inline void pushLaunchCorrelation(std::uint64_t id) noexcept {
  (void)orActivityPushCorrelation(id);
}
inline void popLaunchCorrelation() noexcept {
  (void)orActivityPopCorrelation();
}

// Names the tasks the calling thread launches while it lives (innermost wins). `name` must be a
// string with static storage duration. Costs two thread-local stores.
class ScopedTaskLabel {
 public:
  ScopedTaskLabel(orTaskKind kind, const char* name) noexcept {
    // Only a kind outside orTaskKind fails; the label then stays as it was, with nothing to undo.
    restore_ = orActivitySetLabel(kind, name, &previousKind_, &previousName_) == orSuccess;
  }
  ~ScopedTaskLabel() {
    if (restore_) (void)orActivitySetLabel(previousKind_, previousName_, nullptr, nullptr);
  }
  ScopedTaskLabel(const ScopedTaskLabel&) = delete;
  ScopedTaskLabel& operator=(const ScopedTaskLabel&) = delete;

 private:
  orTaskKind previousKind_ = orTaskKindKernel;
  const char* previousName_ = nullptr;
  bool restore_ = false;
};

// Note [Host-timed activity]
// Work a host thread does in a stream's order (a collective run by a communication library on its
// own threads) is no stream task, yet belongs on the stream's row. A HostActivity records it: the
// launching thread calls begin() with the stream it is ordered with (taking its correlation id
// and thread as a launch does), a host thread stamps start() and end(), and end() adds the
// TaskActivity (kind Kernel) to the recording that was on at begin(). With no recording on,
// begin() reads the one flag and the rest does nothing. A recording that ends before end() does
// not wait for it: the activity is dropped, never handed to a later recording.
// The C form is orHostActivity (runtime.h); this class only holds one and calls it.
// [marker: host-activity]
class HostActivity {
 public:
  HostActivity() = default;
  HostActivity(const HostActivity&) = delete;
  HostActivity& operator=(const HostActivity&) = delete;
  // Launching thread. `name` must have static storage duration. `stream` as in the C API (NULL:
  // the current device's default stream).
  void begin(orStream_t stream, const char* name) noexcept {
    (void)orHostActivityBegin(&state_, stream, name);  // fails only for a NULL pointer
  }
  bool active() const noexcept { return state_.generation != 0; }
  // Any host thread, once each, in this order, after begin().
  void start() noexcept { (void)orHostActivityStart(&state_); }
  void end(bool failed) noexcept { (void)orHostActivityEnd(&state_, failed); }

 private:
  orHostActivity state_{};
};

}  // namespace openreg
