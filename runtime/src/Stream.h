// Stream: an in-order queue of device work, executed by its device's Executor.
//
// Note [Stream execution]
// A stream owns no thread. The host appends operations to `pending_` under a short lock; the
// first append to an idle stream hands the stream to its device's Executor, whose workers run
// streams one at a time each. A worker takes the whole pending batch at once (a swap under the
// lock) and runs it without the lock, so the host and the worker meet only at the swap.
// While a stream is handed over ("active") no other worker can pick it, which is what keeps every
// stream in order however many workers the device has.
// A wait on an event that has not completed does not block the worker: the stream parks itself
// on the event record and the worker moves on; completing the record reschedules the stream.
// So no worker ever waits for device work, and cross-stream or cross-device waits cannot
// deadlock, whatever the number of workers.
#pragma once

#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "Failure.h"
#include "Spin.h"

namespace openreg {

// Note [Stream priority index]
// Stream priorities follow CUDA's convention: a lower number is a higher priority, and 0, the
// default, is the lowest. Where streams are kept one list per priority (the Executor's ready
// queues here, the stream pools of the PyTorch layer in csrc/core/OpenRegStream.cpp), the list's
// index is -priority, as in CUDA's pools (c10/cuda/CUDAStream.cpp): [0] priority 0, [1] priority
// -1.
constexpr int kLeastStreamPriority = 0;
constexpr int kGreatestStreamPriority = -1;
constexpr int kStreamPriorityCount = kLeastStreamPriority - kGreatestStreamPriority + 1;
constexpr int priorityIndex(int priority) {
  return kLeastStreamPriority - priority;
}

class EventRecord;
class Executor;

// One queued operation: run a task, complete an event record, or wait for one.
struct StreamOp {
  enum class Kind : std::uint8_t { Run, Record, Wait };
  Kind kind = Kind::Run;
  Task task;                            // Kind::Run
  FailureRef* outcome = nullptr;        // Kind::Run: set to the task's failure, if it fails
  std::shared_ptr<EventRecord> record;  // Kind::Record and Kind::Wait
};

// What a stream needs of the runtime's configuration, given at construction so that the stream
// depends on no global state.
struct StreamLimits {
  int queueDepth = 0;  // OPENREG_QUEUE_DEPTH: Note [Bounded queues] in Stream.cpp
  WaitPolicy wait;     // how the worker waits for work and the host for the stream (Spin.h)
};

// A host thread's wait for device work (Stream::waitFor, EventRecord::wait), counted for
// orGetSynchronizationCount.
void countSynchronization();
std::uint64_t synchronizationCount();

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(int device, int priority, bool isDefault, Executor& executor, StreamLimits limits);

  int device() const { return device_; }
  int priority() const { return priority_; }
  bool isDefault() const { return isDefault_; }
  std::uint64_t handle() const { return handle_; }
  // How messages name the stream (OR_STREAM_NAME_FORMAT): its number is 0 for the default stream,
  // else its handle's slot number (HandleTable::slotNumber).
  std::string name() const;
  void setHandle(std::uint64_t handle) { handle_ = handle; }
  // Set by orStreamDestroy; the device forgets the stream once it has drained.
  void markDestroyed() { destroyed_.store(true, std::memory_order_release); }
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }

  // Host side. Appends `op`; returns its ticket (the count of ops submitted including it). When
  // OPENREG_QUEUE_DEPTH operations are already pending, waits for the oldest to complete first
  // (Note [Bounded queues]).
  std::uint64_t enqueue(StreamOp&& op);
  // True when every op submitted so far has completed.
  bool idle() const {
    return completed_.load(std::memory_order_acquire) == submitted_.load(std::memory_order_acquire);
  }
  std::uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
  std::uint64_t completedCount() const { return completed_.load(std::memory_order_acquire); }
  // Host side: runs a task `op` on the calling thread if every op submitted so far has completed,
  // holding the queue lock so that an op enqueued meanwhile runs after it; false (nothing run)
  // otherwise. Note [Blocking copies run on the caller] in MemoryApi.cpp.
  bool runIfIdle(StreamOp& op, FailureRef* outcome);
  // Host side: runs on the calling thread, in order, the tasks queued that no worker has taken,
  // when every operation a worker took has completed and every queued one is a task; false
  // (nothing run) otherwise. Note [A waiting host runs the queued tasks] in Stream.cpp.
  bool runQueuedOnCaller();
  // Blocks until the op with `ticket` (and all before it) has completed: a synchronization of the
  // host with the stream, counted (orGetSynchronizationCount).
  void waitFor(std::uint64_t ticket);
  // Moves a pending task error into the calling thread's last-error message: returns
  // orErrorLaunchFailure if there was one, else orSuccess. See Note [Task errors].
  orError_t takeError();
  // For a caller that waited for its own task: that task's failure `own` if it failed (taken off
  // the stream if it is the pending one), else as takeError(). So a blocking call reports its own
  // failure whatever another thread's synchronization took.
  orError_t takeError(const FailureRef& own);
  // The pending failure, left pending (nullptr if none).
  FailureRef pendingFailure();

  // Worker side. Hands a parked stream back to its executor (its event record completed).
  void resume();
  // Worker side. Runs queued ops until the stream drains, parks on an event, or yields to other
  // ready streams. After it returns the worker must not touch the stream again.
  void run();
  // Worker side, while running this stream: runs one task as the stream runs its own (Note [Task
  // errors]). Public for a replayed graph, whose tasks run inside one task (Note [Graph replay]).
  void runTask(Task& task, FailureRef* outcome);

 private:
  // waitFor without counting: a full queue's wait in enqueue (Note [Bounded queues]) is not a
  // synchronization the program asked for.
  void waitUntil(std::uint64_t ticket);
  // Worker: spins briefly for new work on this stream; false if none came or others are ready.
  bool awaitMoreWork();
  void markCompleted();
  void recordError(const FailureRef& failure);

  const int device_;
  const int priority_;
  const bool isDefault_;
  Executor& executor_;
  const StreamLimits limits_;
  std::uint64_t handle_ = 0;
  std::atomic<bool> destroyed_{false};

  std::mutex queueMutex_;
  std::vector<StreamOp> pending_;  // guarded by queueMutex_
  bool active_ = false;            // guarded by queueMutex_: handed to the executor
  // Guarded by queueMutex_: a host thread runs queued tasks (Note [A waiting host runs the queued
  // tasks] in Stream.cpp); no worker takes any.
  bool callerRunning_ = false;
  std::vector<StreamOp> running_;  // owned by the worker running the stream
  std::size_t cursor_ = 0;         // next op in running_

  std::atomic<std::uint64_t> submitted_{0};
  std::atomic<std::uint64_t> completed_{0};

  // Host threads sleeping in waitFor register the smallest ticket they wait for in wakeAt_, so
  // the worker signals only when one of them can proceed.
  std::mutex syncMutex_;
  std::condition_variable syncCv_;
  std::atomic<std::uint64_t> wakeAt_{UINT64_MAX};

  std::atomic<bool> hasError_{false};
  std::mutex errorMutex_;
  FailureRef error_;  // the first unreported failure; guarded by errorMutex_
};

}  // namespace openreg
