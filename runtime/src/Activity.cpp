// Task activity: the recorder, the timed task that wraps a launch while a recording is on, and the
// host-timed activities (for ActivityApi.cpp). See Note [Task activity] in <openreg/activity.hpp>.
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

bool beginRecording() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> control(r.control);
  if (detail::gActivityRecording.load(std::memory_order_seq_cst)) return false;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.done.clear();
    ++r.generation;
  }
  detail::gActivityRecording.store(true, std::memory_order_seq_cst);
  return true;
}

std::vector<TaskActivity> endRecording() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> control(r.control);
  std::vector<TaskActivity> done;
  if (!detail::gActivityRecording.exchange(false, std::memory_order_seq_cst)) return done;
  while (r.inFlight.load(std::memory_order_seq_cst) != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    done.swap(r.done);
  }
  return done;
}

bool pushCorrelation(std::uint64_t id) noexcept {
  try {
    tCorrelations.push_back(id);
  } catch (...) {
    return false;
  }
  return true;
}

void popCorrelation() noexcept {
  if (!tCorrelations.empty()) tCorrelations.pop_back();
}

void setLabel(orTaskKind kind, const char* name, orTaskKind* previousKind,
              const char** previousName) noexcept {
  if (previousKind != nullptr) *previousKind = tKind;
  if (previousName != nullptr) *previousName = tName;
  tKind = kind;
  tName = name;
}

void beginHostActivity(orHostActivity& host, const Stream& stream, const char* name) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!detail::gActivityRecording.load(std::memory_order_seq_cst)) return;
    host.generation = r.generation;
  }
  orTaskActivity& a = host.activity;
  a = orTaskActivity{};
  a.kind = orTaskKindKernel;
  a.name = name;
  a.device = stream.device();
  a.stream = stream.handle();
  a.correlation = tCorrelations.empty() ? 0 : tCorrelations.back();
  a.launchThread = launchingThread();
  a.launchNs = nowNs();
  a.startNs = a.launchNs;
}

void startHostActivity(orHostActivity& host) noexcept {
  if (host.generation != 0) host.activity.startNs = nowNs();
}

// [marker: host-activity-end]
void endHostActivity(orHostActivity& host, bool failed) {
  if (host.generation == 0) return;
  host.activity.endNs = nowNs();
  host.activity.failed = failed;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  // endRecording clears the flag before it takes the list under this lock.
  if (detail::gActivityRecording.load(std::memory_order_seq_cst) &&
      r.generation == host.generation) {
    try {
      r.done.push_back(host.activity);
    } catch (...) {
      // Out of host memory: the activity is lost.
    }
  }
  host.generation = 0;
}

}  // namespace openreg
