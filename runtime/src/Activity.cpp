#include "Activity.h"

#include <openreg/activity.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
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
thread_local TaskKind tKind = TaskKind::Kernel;
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

  void operator()() {
    activity_.startNs = nowNs();
    try {
      task_();
    } catch (...) {
      activity_.endNs = nowNs();
      activity_.failed = true;
      finish();
      throw;
    }
    activity_.endNs = nowNs();
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
  void operator()() { (*timed)(); }
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
  TaskActivity activity;
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

bool beginTaskActivity() {
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

std::vector<TaskActivity> endTaskActivity() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> control(r.control);
  if (!detail::gActivityRecording.exchange(false, std::memory_order_seq_cst)) return {};
  while (r.inFlight.load(std::memory_order_seq_cst) != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::vector<TaskActivity> out;
  std::lock_guard<std::mutex> lock(r.mutex);
  out.swap(r.done);
  return out;
}

bool taskActivityOn() noexcept {
  return recordingActivity();
}

void pushLaunchCorrelation(std::uint64_t id) noexcept {
  try {
    tCorrelations.push_back(id);
  } catch (...) {
    // Out of host memory: launches keep the enclosing id.
  }
}

void popLaunchCorrelation() noexcept {
  if (!tCorrelations.empty()) tCorrelations.pop_back();
}

// [marker: host-activity-end]
void HostActivity::begin(orStream_t handle, const char* name) noexcept {
  if (!recordingActivity()) return;
  // No runtime or no such stream: nothing to put the activity on.
  if (ensureInitialized() != orSuccess) return;
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return;
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!detail::gActivityRecording.load(std::memory_order_seq_cst)) return;
    generation_ = r.generation;
  }
  activity_.kind = TaskKind::Kernel;
  activity_.name = name;
  activity_.device = stream->device();
  activity_.stream = stream->handle();
  activity_.correlation = tCorrelations.empty() ? 0 : tCorrelations.back();
  activity_.launchThread = launchingThread();
  activity_.launchNs = nowNs();
  activity_.startNs = activity_.launchNs;
}

void HostActivity::start() noexcept {
  if (generation_ != 0) activity_.startNs = nowNs();
}

void HostActivity::end(bool failed) noexcept {
  if (generation_ == 0) return;
  activity_.endNs = nowNs();
  activity_.failed = failed;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  // endTaskActivity clears the flag before it takes the list under this lock.
  if (detail::gActivityRecording.load(std::memory_order_seq_cst) && r.generation == generation_) {
    try {
      r.done.push_back(activity_);
    } catch (...) {
      // Out of host memory: the activity is lost.
    }
  }
  generation_ = 0;
}

ScopedTaskLabel::ScopedTaskLabel(TaskKind kind, const char* name) noexcept
    : previousKind_(tKind), previousName_(tName) {
  tKind = kind;
  tName = name;
}

ScopedTaskLabel::~ScopedTaskLabel() {
  tKind = previousKind_;
  tName = previousName_;
}

}  // namespace openreg
