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
#pragma once

#include <openreg/runtime.h>

#include <cstdint>
#include <vector>

namespace openreg {

enum class TaskKind : std::uint8_t { Kernel, Memcpy, Memset };

// [marker: task-activity]
struct TaskActivity {
  TaskKind kind = TaskKind::Kernel;
  // A static string ("Memcpy HtoD", "Memset", a name given with ScopedTaskLabel), or nullptr for a
  // kernel launched without a label (a profiler names it after its launching operator).
  const char* name = nullptr;
  int device = 0;
  std::uint64_t stream = 0;       // the orStream_t handle value
  std::uint64_t correlation = 0;  // innermost pushLaunchCorrelation id at launch; 0: none
  std::int64_t launchThread = 0;  // OS thread id (gettid) of the launching host thread
  std::int64_t launchNs = 0;      // when the launch queued the task
  std::int64_t startNs = 0;       // when a worker started it
  std::int64_t endNs = 0;         // when it returned or threw
  bool failed = false;            // it threw (or did not run: its inputs were poisoned)
};

// Starts recording. False (and nothing changes) if a recording is already on.
OPENREG_RUNTIME_API bool beginTaskActivity();
// Stops recording, waits until every task launched during it has run (or been dropped), and
// returns their activities in completion order. Empty if no recording was on. Not from a task.
OPENREG_RUNTIME_API std::vector<TaskActivity> endTaskActivity();
// True while a recording is on.
OPENREG_RUNTIME_API bool taskActivityOn() noexcept;

// The calling thread's correlation stack: launches made while an id is pushed carry the top one.
OPENREG_RUNTIME_API void pushLaunchCorrelation(std::uint64_t id) noexcept;
OPENREG_RUNTIME_API void popLaunchCorrelation() noexcept;

// Names the tasks the calling thread launches while it lives (innermost wins). `name` must be a
// string with static storage duration. Costs two thread-local stores.
class OPENREG_RUNTIME_API ScopedTaskLabel {
 public:
  ScopedTaskLabel(TaskKind kind, const char* name) noexcept;
  ~ScopedTaskLabel();
  ScopedTaskLabel(const ScopedTaskLabel&) = delete;
  ScopedTaskLabel& operator=(const ScopedTaskLabel&) = delete;

 private:
  TaskKind previousKind_;
  const char* previousName_;
};

// Note [Host-timed activity]
// Work a host thread does in a stream's order (a collective run by a communication library on its
// own threads) is no stream task, yet belongs on the stream's row. A HostActivity records it: the
// launching thread calls begin() with the stream it is ordered with (taking its correlation id
// and thread as a launch does), a host thread stamps start() and end(), and end() adds the
// TaskActivity (kind Kernel) to the recording that was on at begin(). With no recording on,
// begin() reads the one flag and the rest does nothing. A recording that ends before end() does
// not wait for it: the activity is dropped, never handed to a later recording.
// [marker: host-activity]
class OPENREG_RUNTIME_API HostActivity {
 public:
  HostActivity() = default;
  HostActivity(const HostActivity&) = delete;
  HostActivity& operator=(const HostActivity&) = delete;
  // Launching thread. `name` must have static storage duration. `stream` as in the C API (NULL:
  // the current device's default stream).
  void begin(orStream_t stream, const char* name) noexcept;
  bool active() const noexcept { return generation_ != 0; }
  // Any host thread, once each, in this order, after begin().
  void start() noexcept;
  void end(bool failed) noexcept;

 private:
  TaskActivity activity_;
  std::uint64_t generation_ = 0;  // the recording begin() joined; 0: none
};

}  // namespace openreg
