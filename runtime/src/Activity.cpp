#include "Activity.h"

#include <openreg/activity.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "Runtime.h"

namespace openreg {

namespace detail {
std::atomic<bool> gActivityRecording{false};
}  // namespace detail

namespace {

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Immortal, as the devices are (Note [Runtime initialization]): a worker may finish a timed task
// while the process exits.
struct Recorder {
  std::mutex control;  // serializes begin and end
  std::mutex mutex;
  std::vector<TaskActivity> done;  // guarded by mutex
  // Timed tasks launched and not yet run or dropped. See Note [Ending a recording].
  std::atomic<std::int64_t> inFlight{0};
  // Counts recordings begun; guarded by mutex. Note [Host-timed activity].
  std::uint64_t generation = 0;
};

Recorder& recorder() {
  static Recorder* instance = new Recorder();
  return *instance;
}

thread_local std::vector<std::uint64_t> tCorrelations;
thread_local orTaskKind tKind = orTaskKindKernel;
thread_local const char* tName = nullptr;

std::int64_t launchingThread() {
  static thread_local const std::int64_t id = static_cast<std::int64_t>(::syscall(SYS_gettid));
  return id;
}

// [marker: timed-task]
// The launched task, timed by the worker that runs it. Declares the accesses of the task it
// wraps, so poisoning works as without a recording. A task that never runs (a poisoned input, a
// launch that failed) is recorded as failed when it is destroyed, so that the recording's end does
// not wait for it forever.
class TimedTask {
 public:
  TimedTask(Task&& task, const TaskActivity& activity)
      : task_(std::move(task)), activity_(activity) {}
  TimedTask(const TimedTask&) = delete;
  TimedTask& operator=(const TimedTask&) = delete;
  ~TimedTask() {
    if (!pending_) return;
    activity_.startNs = activity_.endNs = nowNs();
    activity_.failed = true;
    finish();
  }

  // Runs the task it wraps with the same context, so that task's failure is the launch's.
  void operator()(orTaskContext_t context) {
    activity_.startNs = nowNs();
    task_.run(context);
    activity_.endNs = nowNs();
    activity_.failed = context->failed;
    finish();
  }
  void accesses(AccessList& out) const { task_.accesses(out); }

 private:
  void finish() noexcept {
    pending_ = false;
    Recorder& r = recorder();
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      try {
        r.done.push_back(activity_);
      } catch (...) {
        // Out of host memory: the activity is lost, the task's own outcome is not.
      }
    }
    r.inFlight.fetch_sub(1, std::memory_order_seq_cst);
  }

  Task task_;
  TaskActivity activity_;
  bool pending_ = true;
};

// The TimedTask as the stream holds it: one pointer, so the Task stores it inline and wrapping
// cannot fail once the TimedTask exists.
struct HeldTimedTask {
  std::unique_ptr<TimedTask> timed;
  void operator()(orTaskContext_t context) { (*timed)(context); }
  void accesses(AccessList& out) const { timed->accesses(out); }
};

}  // namespace

// Note [Ending a recording]
// A launch that read the flag just before the recording ended must not leave its activity behind
// for the next recording. So a launch counts its task in `inFlight` first and then reads the flag
// again, and the end clears the flag and then waits for `inFlight` to reach zero (both
// sequentially consistent): either the launch sees the flag cleared and launches its task
// untimed, or the end sees it counted and waits for it to run.
// [marker: wrap-for-activity]
void wrapForActivity(const Stream& stream, StreamOp& op) {
  Recorder& r = recorder();
  r.inFlight.fetch_add(1, std::memory_order_seq_cst);
  if (!detail::gActivityRecording.load(std::memory_order_seq_cst)) {
    r.inFlight.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  TaskActivity activity{};
  activity.kind = tKind;
  activity.name = tName;
  activity.device = stream.device();
  activity.stream = stream.handle();
  activity.correlation = tCorrelations.empty() ? 0 : tCorrelations.back();
  activity.launchThread = launchingThread();
  activity.launchNs = nowNs();
  std::unique_ptr<TimedTask> timed;
  try {
    timed = std::make_unique<TimedTask>(std::move(op.task), activity);
  } catch (...) {
    // No host memory for the wrapper: the task (not moved from) goes untimed.
    r.inFlight.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  op.task = Task(HeldTimedTask{std::move(timed)});
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orActivityBegin(void) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> control(r.control);
  if (detail::gActivityRecording.load(std::memory_order_seq_cst)) {
    return fail(orErrorNotPermitted, __func__, "a recording is already on");
  }
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.done.clear();
    ++r.generation;
  }
  detail::gActivityRecording.store(true, std::memory_order_seq_cst);
  return orSuccess;
}

orError_t orActivityEnd(orTaskActivity** activities, size_t* count) {
  OR_REQUIRE_NOT_NULL(activities);
  OR_REQUIRE_NOT_NULL(count);
  // It waits for tasks queued behind the calling one: see Note [Synchronizing inside a task].
  if (onDeviceWorker()) return synchronizingInTask(__func__);
  *activities = nullptr;
  *count = 0;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> control(r.control);
  if (!detail::gActivityRecording.exchange(false, std::memory_order_seq_cst)) return orSuccess;
  while (r.inFlight.load(std::memory_order_seq_cst) != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::vector<TaskActivity> done;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    done.swap(r.done);
  }
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
  try {
    tCorrelations.push_back(id);
  } catch (...) {
    return fail(orErrorMemoryAllocation, __func__,
                "no host memory; launches keep the enclosing "
                "id");
  }
  return orSuccess;
}

orError_t orActivityPopCorrelation(void) {
  if (!tCorrelations.empty()) tCorrelations.pop_back();
  return orSuccess;
}

orError_t orActivitySetLabel(orTaskKind kind, const char* name, orTaskKind* previousKind,
                             const char** previousName) {
  if (kind != orTaskKindKernel && kind != orTaskKindMemcpy && kind != orTaskKindMemset) {
    return fail(orErrorInvalidValue, __func__,
                "kind " + std::to_string(static_cast<int>(kind)) + " is not an orTaskKind");
  }
  if (previousKind != nullptr) *previousKind = tKind;
  if (previousName != nullptr) *previousName = tName;
  tKind = kind;
  tName = name;
  return orSuccess;
}

// [marker: host-activity-end]
orError_t orHostActivityBegin(orHostActivity* host, orStream_t handle, const char* name) {
  OR_REQUIRE_NOT_NULL(host);
  host->generation = 0;
  if (!recordingActivity()) return orSuccess;
  // No runtime or no such stream: nothing to put the activity on.
  if (ensureInitialized() != orSuccess) return orSuccess;
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return orSuccess;
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!detail::gActivityRecording.load(std::memory_order_seq_cst)) return orSuccess;
    host->generation = r.generation;
  }
  orTaskActivity& a = host->activity;
  a = orTaskActivity{};
  a.kind = orTaskKindKernel;
  a.name = name;
  a.device = stream->device();
  a.stream = stream->handle();
  a.correlation = tCorrelations.empty() ? 0 : tCorrelations.back();
  a.launchThread = launchingThread();
  a.launchNs = nowNs();
  a.startNs = a.launchNs;
  return orSuccess;
}

orError_t orHostActivityStart(orHostActivity* host) {
  OR_REQUIRE_NOT_NULL(host);
  if (host->generation != 0) host->activity.startNs = nowNs();
  return orSuccess;
}

orError_t orHostActivityEnd(orHostActivity* host, bool failed) {
  OR_REQUIRE_NOT_NULL(host);
  if (host->generation == 0) return orSuccess;
  host->activity.endNs = nowNs();
  host->activity.failed = failed;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  // orActivityEnd clears the flag before it takes the list under this lock.
  if (detail::gActivityRecording.load(std::memory_order_seq_cst) &&
      r.generation == host->generation) {
    try {
      r.done.push_back(host->activity);
    } catch (...) {
      // Out of host memory: the activity is lost.
    }
  }
  host->generation = 0;
  return orSuccess;
}

}  // extern "C"
