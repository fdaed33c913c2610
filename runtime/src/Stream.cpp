#include "Stream.h"

#include <cstdio>

#include "Event.h"
#include "Executor.h"
#include "HandleTable.h"
#include "Poison.h"
#include "Runtime.h"
#include "Spin.h"

namespace openreg {

std::string Stream::name() const {
  const std::uint32_t number = isDefault_ ? 0 : HandleTable<Stream>::slotNumber(handle_);
  char name[64];
  std::snprintf(name, sizeof name, OR_STREAM_NAME_FORMAT, device_, number);
  return name;
}

Stream::Stream(int device, int priority, bool isDefault, Executor& executor, StreamLimits limits)
    : device_(device),
      priority_(priority),
      isDefault_(isDefault),
      executor_(executor),
      limits_(limits) {}

// Note [Bounded queues]
// A host that launches faster than the device runs would otherwise queue without limit, and a
// stalled stream would hold gigabytes of host memory (docs/errors.md). As a GPU's launch queue
// does, a stream holds at most OPENREG_QUEUE_DEPTH pending operations; a host thread that would
// pass it waits for the oldest one to complete. A worker never waits (a task enqueueing on a full
// stream of its own device would wait for itself). [marker: stream-enqueue]
std::uint64_t Stream::enqueue(StreamOp&& op) {
  const auto depth = static_cast<std::uint64_t>(limits_.queueDepth);
  // completed_ first: read after submitted_, it could pass it (other threads' work enqueued and
  // completed in between), and the difference would wrap round to a wait without end.
  const std::uint64_t completed = completed_.load(std::memory_order_acquire);
  const std::uint64_t submitted = submitted_.load(std::memory_order_acquire);
  if (submitted >= completed + depth && !onDeviceWorker()) waitUntil(submitted - depth + 1);
  bool wake = false;
  std::uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    ticket = submitted_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (op.kind == StreamOp::Kind::Record) op.record->bind(shared_from_this(), ticket);
    pending_.push_back(std::move(op));
    if (!active_) {
      active_ = true;
      wake = true;
    }
  }
  if (wake) executor_.schedule(shared_from_this());
  return ticket;
}

bool Stream::runIfIdle(StreamOp& op, FailureRef* outcome) {
  std::lock_guard<std::mutex> lock(queueMutex_);
  if (completed_.load(std::memory_order_acquire) != submitted_.load(std::memory_order_acquire))
    return false;
  runTask(op.task, outcome);
  return true;
}

// Note [A waiting host runs the queued tasks]
// A host thread about to wait for a stream (a blocking copy: .item(), .tolist(), .cpu()) would
// otherwise hand the stream's last tasks to a worker and wait for the worker to pick them up,
// run them and say so: two trips between threads, each a few microseconds, and many more when the
// machine is loaded and the worker waits for a core. When no worker is running any of the
// stream's work (every operation taken has completed), the host takes the queued tasks and runs
// them itself, as the worker would (runTask: the same poison checks and failures), marked as a
// device worker meanwhile so that a task cannot make a synchronizing call (Note [Synchronizing
// inside a task] in Executor.h). The order is kept by callerRunning_, not by holding the queue
// lock (a task may launch onto its own stream, and would wait for the lock for ever): while it is
// set, a worker takes nothing from the stream and hands it back, and what was launched meanwhile
// goes to a worker once the caller is done. The thread's last error and current device are put
// back afterwards (SavedThreadState in Runtime.h). A queue holding an event record or wait keeps
// the worker's way: those belong to the worker's loop. [marker: stream-run-queued]
bool Stream::runQueuedOnCaller() {
  std::vector<StreamOp> ops;
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    if (pending_.empty() || callerRunning_) return false;
    if (completed_.load(std::memory_order_acquire) + pending_.size() !=
        submitted_.load(std::memory_order_relaxed))
      return false;  // a worker is running what it took
    for (const StreamOp& op : pending_) {
      if (op.kind != StreamOp::Kind::Run) return false;
    }
    ops.swap(pending_);
    callerRunning_ = true;
  }
  {
    const ScopedDeviceWorker worker;
    const SavedThreadState saved;
    for (StreamOp& op : ops) {
      runTask(op.task, op.outcome);
      op = StreamOp{};
      markCompleted();
    }
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    callerRunning_ = false;
    if (!pending_.empty() && !active_) {
      active_ = true;
      wake = true;
    }
  }
  if (wake) executor_.schedule(shared_from_this());
  return true;
}

void Stream::resume() {
  executor_.schedule(shared_from_this());
}

// [marker: stream-run]
void Stream::run() {
  for (bool first = true;; first = false) {
    if (cursor_ == running_.size()) {
      running_.clear();
      cursor_ = 0;
      std::unique_lock<std::mutex> lock(queueMutex_);
      if (callerRunning_) {
        // A host thread runs the stream's tasks (Note [A waiting host runs the queued tasks]),
        // and hands it back to the executor when it is done, if more came.
        active_ = false;
        return;
      }
      if (pending_.empty()) {
        lock.unlock();
        // Stay active for a moment: a host launching in a steady stream then only appends, and
        // neither side pays for handing the stream back to the executor.
        const bool more = awaitMoreWork();
        lock.lock();
        if (callerRunning_ || (!more && pending_.empty())) {
          active_ = false;
          return;
        }
        if (pending_.empty()) continue;
      }
      if (!first && executor_.hasReadyStreams()) {
        // Let other ready streams have this worker; the stream stays active and queued.
        lock.unlock();
        executor_.schedule(shared_from_this());
        return;
      }
      running_.swap(pending_);
    }
    while (cursor_ < running_.size()) {
      StreamOp& op = running_[cursor_];
      if (op.kind == StreamOp::Kind::Record) {
        // See Note [Event records]: the record is complete when the counter moves, so stamp the
        // time first and wake its waiters after.
        std::shared_ptr<EventRecord> record = std::move(op.record);
        record->stamp(pendingFailure());
        op = StreamOp{};
        ++cursor_;
        markCompleted();
        record->wakeWaiters();
        continue;
      }
      if (op.kind == StreamOp::Kind::Wait) {
        // Keep the record alive past parkIfPending: once parked, another worker may resume this
        // stream and clear running_ at any moment.
        std::shared_ptr<EventRecord> record = op.record;
        if (record->parkIfPending(shared_from_this())) return;  // resumed by record->wakeWaiters()
        // See Note [Task errors]: a failure the waited-on stream had not reported comes along.
        if (const FailureRef failure = record->failure()) recordError(failure);
      } else {
        runTask(op.task, op.outcome);
      }
      op = StreamOp{};  // release the task's captures now, not at the next batch
      ++cursor_;
      markCompleted();
    }
  }
}

bool Stream::awaitMoreWork() {
  bool more = false;
  spinUntil(limits_.wait.spinMicros, [&] {
    more = submitted_.load(std::memory_order_acquire) != completed_.load(std::memory_order_relaxed);
    return more || executor_.hasReadyStreams();
  });
  return more;
}

// Note [Task errors]
// A task that fails (it reports a failure with orTaskFail; an openreg::Task's callable throws, and
// the Task reports it on its side of the C ABI: Note [Tasks across the C ABI] in runtime.h) is not
// fatal for the device (a real GPU's context would be, after a fault).
// Its failure (Failure.h: the message, naming the device, and the task's category) goes three
// ways, so that no value computed by or from the failed task is ever read as data:
//  - the memory it writes is poisoned (Note [Poisoned memory] in Poison.h): any later task, copy
//    or host read of those bytes fails with the same Failure instead of running;
//  - the stream keeps its first unreported failure. The next synchronizing call on the stream or
//    its device (orStreamSynchronize, orStreamQuery, orDeviceSynchronize, a blocking launch or
//    copy) returns it as orErrorLaunchFailure with the message in orGetLastErrorMessage. Freeing
//    memory never reports it;
//  - an event recorded on the stream while the failure is unreported carries it: orEventQuery and
//    orEventSynchronize return it, and a stream that waits on the record takes it as its own.
//    Events created with orEventDisableFailure carry none: they order work (the caching
//    allocator's frees, the generator's uses) and are not where the program learns of failures.
// Where the error state ends: the first report() of a failure to a caller, by any of those calls
// or by a read of the memory it poisoned, marks the Failure reported, and from then on no stream
// and no event record carries it (pendingFailure, takeError, recordError and EventRecord::failure
// skip it). Only poisoned memory keeps it, until overwritten or freed: the data computed from the
// failed task is still not data, while allocation, random numbers, events recorded before or
// after the report, other streams and other devices work. CUDA's sticky errors never end; a
// failure that lived on in every event recorded while it was pending jammed the allocator and the
// generator for good (issue 24).
// Later tasks that do not read poisoned memory still run: work independent of the failure is
// not lost, and a test suite can go on after an expected failure once it has been reported.
// [marker: stream-run-task]
void Stream::runTask(Task& task, FailureRef* outcome) {
  PoisonMap& poison = poisonMap();
  AccessList accesses;
  const bool watched = task.declaresAccesses() && poison.active();
  if (watched) {
    task.accesses(accesses);
    if (FailureRef failure = poison.findRead(accesses)) {
      poison.poisonWrites(accesses, failure);  // does not run: its outputs are not data either
      if (outcome != nullptr) *outcome = failure;
      recordError(failure);
      return;
    }
  }
  orTaskContext_st
      context;  // its message is built only on failure: the fast path allocates nothing
  try {
    task.run(&context);
  } catch (...) {
    // A run function broke orTaskOps' contract (nothing may unwind into the runtime). An exception
    // of the runtime's own C++ library is still caught here; another library's may not be.
    orTaskFail(&context, 0, "a task's run function let an exception escape");
  }
  if (!context.failed) {
    if (watched) poison.clearCovered(accesses);
    return;
  }
  const FailureRef failure =
      std::make_shared<const Failure>(OR_DEVICE_NAME ": a task failed on device " +
                                          std::to_string(device_) + ": " + context.message,
                                      context.category);
  if (!watched) task.accesses(accesses);
  poison.poisonWrites(accesses, failure);
  if (outcome != nullptr) *outcome = failure;
  recordError(failure);
}

void Stream::recordError(const FailureRef& failure) {
  // A failure already reported (a task reading memory it poisoned, a record carrying it) is known
  // to the program: only the data keeps it (Note [Task errors]).
  if (failure->wasReported()) return;
  std::lock_guard<std::mutex> lock(errorMutex_);
  // Keep the first unreported failure; one reported meanwhile (through an event, another stream or
  // a read of its poison) gives way.
  if (hasError_.load(std::memory_order_relaxed) && !error_->wasReported()) return;
  error_ = failure;
  hasError_.store(true, std::memory_order_release);
}

FailureRef Stream::pendingFailure() {
  if (!hasError_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (error_ != nullptr && error_->wasReported()) {
    // Reported through another path: drop it, so later records take the fast path again.
    error_.reset();
    hasError_.store(false, std::memory_order_release);
  }
  return error_;
}

orError_t Stream::takeError(const FailureRef& own) {
  if (own == nullptr) return takeError();
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (error_ == own) {
      error_.reset();
      hasError_.store(false, std::memory_order_release);
    }
  }
  return report(*own);  // the caller's own task's failure: its data, reported every time
}

orError_t Stream::takeError() {
  if (!hasError_.load(std::memory_order_acquire)) return orSuccess;
  FailureRef failure;
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (!hasError_.load(std::memory_order_relaxed)) return orSuccess;
    failure.swap(error_);
    hasError_.store(false, std::memory_order_release);
  }
  // Reported already, through another path (Note [Task errors]): nothing left to report.
  if (failure->wasReported()) return orSuccess;
  return report(*failure);
}

void Stream::markCompleted() {
  const std::uint64_t done = completed_.fetch_add(1, std::memory_order_seq_cst) + 1;
  // Pairs with the seq_cst store of wakeAt_ in waitFor(): either the waiter sees `done`, or this
  // load sees the waiter's ticket.
  if (done >= wakeAt_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(syncMutex_);
    wakeAt_.store(UINT64_MAX, std::memory_order_seq_cst);
    syncCv_.notify_all();
  }
}

// [marker: stream-wait]
namespace {
std::atomic<std::uint64_t> gSynchronizations{0};
}  // namespace

void countSynchronization() {
  gSynchronizations.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t synchronizationCount() {
  return gSynchronizations.load(std::memory_order_relaxed);
}

void Stream::waitFor(std::uint64_t ticket) {
  countSynchronization();
  waitUntil(ticket);
}

void Stream::waitUntil(std::uint64_t ticket) {
  const auto reached = [&] { return completed_.load(std::memory_order_acquire) >= ticket; };
  if (spinUntil(limits_.wait.spinMicros, reached)) return;
  std::unique_lock<std::mutex> lock(syncMutex_);
  sleepUntil(lock, syncCv_, limits_.wait, [&] {
    if (completed_.load(std::memory_order_seq_cst) >= ticket) return true;
    // Publish the ticket for markCompleted(), then re-check completed_ after publishing it.
    if (ticket < wakeAt_.load(std::memory_order_relaxed)) {
      wakeAt_.store(ticket, std::memory_order_seq_cst);
    }
    return completed_.load(std::memory_order_seq_cst) >= ticket;
  });
}

}  // namespace openreg
