#include "Stream.h"

#include <new>
#include <thread>

#include "Event.h"
#include "Executor.h"
#include "Poison.h"
#include "Pool.h"
#include "Spin.h"

namespace openreg {

// Note [Lock-free stream queue]
// A launch is the one call PyTorch makes for every operator, so its cost on the host thread is
// the floor of the backend's per-operator overhead. The queue therefore takes no lock. It is
// Vyukov's intrusive multi-producer, single-consumer list: a producer links its node with one
// atomic exchange of tail_ and a store into the previous node's `next`; the worker running the
// stream (one at a time, see Note [Stream execution] in Stream.h) follows `next` from head_.
// Nodes come from the thread's recycled blocks (Note [Recycled launch memory] in Pool.h), so a
// launch onto a stream that is already active costs two atomic read-modify-writes and no
// allocation, lock or system call.
// Order. Producers count an operation in submitted_ before they link it, so a worker that finds
// no next node while submitted_ is ahead of completed_ knows one is on its way and waits for the
// link (a producer between two instructions). Operations run and complete in list order, and
// completed_ counts them; an event record's ticket (its place in the stream, Note [Event
// records]) is therefore given by the worker when it completes the record, which is when the
// list order is known. A producer's own ticket, for waitFor, is submitted_ read after its link:
// everything linked before it, its own operation included, was counted by then.
// Handing the stream back. The first producer that finds active_ false and sets it schedules the
// stream. A worker that drains it stores active_ false and then re-reads submitted_; a producer
// increments submitted_ and then reads active_. Both pairs are sequentially consistent, so at
// least one side sees the other: either the worker sees the new operation and takes the stream
// back (if no producer already scheduled it), or the producer sees the stream idle and schedules
// it. No operation is left behind and no stream is run by two workers.
struct Stream::Node {
  std::atomic<Node*> next{nullptr};
  StreamOp op;

  static Node* make(StreamOp&& op) {
    return ::new (pool::allocate(sizeof(Node))) Node{{nullptr}, std::move(op)};
  }
  static void destroy(Node* node, pool::ReleaseBatch& batch) noexcept {
    node->~Node();
    batch.add(node);
  }
};

Stream::Stream(int device, int priority, bool isDefault, Executor& executor, StreamLimits limits)
    : device_(device),
      priority_(priority),
      isDefault_(isDefault),
      executor_(executor),
      limits_(limits),
      tail_(nullptr),
      head_(Node::make(StreamOp{})) {
  tail_.store(head_, std::memory_order_relaxed);
}

Stream::~Stream() {
  // Streams are destroyed drained (Device::streams keeps them until idle); free what is left.
  for (Node* node = head_; node != nullptr;) {
    Node* next = node->next.load(std::memory_order_acquire);
    Node::destroy(node, freed_);
    node = next;
  }
}

// Note [Bounded queues]
// A host that launches faster than the device runs would otherwise queue without limit: 1.2 M
// operations behind a stalled stream held 2.3 GB of host memory. As a GPU's launch queue does, a
// stream holds at most OPENREG_QUEUE_DEPTH pending operations; a host thread that would pass it
// waits for the oldest one to complete. A worker never waits (a task enqueueing on a full stream
// of its own device would wait for itself). Host threads racing past the check together may
// exceed the depth by their number, no more.
// [marker: stream-enqueue]
std::uint64_t Stream::enqueue(StreamOp&& op) {
  const auto depth = static_cast<std::uint64_t>(limits_.queueDepth);
  // completed_ first: read after submitted_, it could pass it (other threads' work enqueued and
  // completed in between), and the difference would wrap round to a wait without end.
  const std::uint64_t completed = completed_.load(std::memory_order_acquire);
  const std::uint64_t submitted = submitted_.load(std::memory_order_acquire);
  if (submitted >= completed + depth && !onDeviceWorker()) waitFor(submitted - depth + 1);
  if (op.kind == StreamOp::Kind::Record) op.record->bind(shared_from_this());
  Node* node = Node::make(std::move(op));
  // Counted before linked, and seq_cst: see Note [Lock-free stream queue].
  submitted_.fetch_add(1, std::memory_order_seq_cst);
  Node* prev = tail_.exchange(node, std::memory_order_acq_rel);
  prev->next.store(node, std::memory_order_release);
  const std::uint64_t ticket = submitted_.load(std::memory_order_acquire);
  if (!active_.load(std::memory_order_seq_cst) &&
      !active_.exchange(true, std::memory_order_seq_cst)) {
    executor_.schedule(shared_from_this());
  }
  return ticket;
}

void Stream::resume() {
  executor_.schedule(shared_from_this());
}

Stream::Node* Stream::next() {
  Node* node = head_->next.load(std::memory_order_acquire);
  if (node != nullptr) return node;
  if (submitted_.load(std::memory_order_acquire) == completed_.load(std::memory_order_relaxed)) {
    return nullptr;
  }
  // Counted, not yet linked: its producer is between two instructions (or was preempted there).
  const auto linked = [&] {
    return (node = head_->next.load(std::memory_order_acquire)) != nullptr;
  };
  while (!spinUntil(limits_.spinMicros, Backoff::Pause, linked)) std::this_thread::yield();
  return node;
}

bool Stream::release() {
  freed_.flush();  // an idle stream keeps no node from its producers
  active_.store(false, std::memory_order_seq_cst);
  if (submitted_.load(std::memory_order_seq_cst) == completed_.load(std::memory_order_relaxed)) {
    return false;
  }
  // Work came in between. Unless its producer saw the stream idle and scheduled it (then another
  // worker may run it already, and this one must not touch it), keep running.
  return !active_.exchange(true, std::memory_order_seq_cst);
}

// [marker: stream-run]
void Stream::run() {
  // Other ready streams get the worker once the operations pending at entry (at least one) have
  // run, and after each later batch.
  std::uint64_t batchEnd = submitted_.load(std::memory_order_acquire);
  bool ranOne = false;
  for (;;) {
    Node* node = next();
    if (node == nullptr) {
      // Stay active for a moment: a host launching in a steady stream then only appends, and
      // neither side pays for handing the stream back to the executor.
      if (awaitMoreWork() || release()) continue;
      return;
    }
    if (ranOne && completed_.load(std::memory_order_relaxed) >= batchEnd) {
      if (executor_.hasReadyStreams()) {
        // Let other ready streams have this worker; the stream stays active and queued.
        executor_.schedule(shared_from_this());
        return;
      }
      batchEnd = submitted_.load(std::memory_order_acquire);
    }
    ranOne = true;
    StreamOp& op = node->op;
    if (op.kind == StreamOp::Kind::Record) {
      // See Note [Event records]: the record is complete when the counter moves, so stamp the
      // time and its place first and wake its waiters after.
      std::shared_ptr<EventRecord> record = std::move(op.record);
      record->stamp(pendingFailure(), completed_.load(std::memory_order_relaxed) + 1);
      advanceTo(node);
      markCompleted();
      record->wakeWaiters();
      continue;
    }
    if (op.kind == StreamOp::Kind::Wait) {
      // Keep the record alive past parkIfPending: once parked, another worker may resume this
      // stream and take the operation at any moment.
      std::shared_ptr<EventRecord> record = op.record;
      if (record->parkIfPending(shared_from_this())) return;  // resumed by record->wakeWaiters()
      // See Note [Task errors]: a failure the waited-on stream had not reported comes along.
      if (const FailureRef& failure = record->failure()) recordError(failure);
    } else {
      runTask(op.task, op.outcome);
    }
    advanceTo(node);
    markCompleted();
  }
}

void Stream::advanceTo(Node* node) {
  node->op = StreamOp{};  // release the task's captures now, not when the node is reused
  Node* done = head_;
  head_ = node;
  Node::destroy(done, freed_);  // its `next` is linked, so no producer will touch it again
}

bool Stream::awaitMoreWork() {
  bool more = false;
  spinUntil(limits_.spinMicros, Backoff::Pause, [&] {
    more = submitted_.load(std::memory_order_acquire) != completed_.load(std::memory_order_relaxed);
    return more || executor_.hasReadyStreams();
  });
  return more;
}

// Note [Task errors]
// A task that throws is not fatal for the device (a real GPU's context would be, after a fault).
// Its failure (Failure.h: the message, naming the device, and the task's category) goes three
// ways, so that no value computed by or from the failed task is ever read as data:
//  - the memory it writes is poisoned (Note [Poisoned memory] in Poison.h): any later task, copy
//    or host read of those bytes fails with the same Failure instead of running;
//  - the stream keeps its first unreported failure. The next synchronizing call on the stream or
//    its device (orStreamSynchronize, orStreamQuery, orDeviceSynchronize, a blocking launch or
//    copy) returns it as orErrorLaunchFailure with the message in orGetLastErrorMessage, and that
//    report ends the stream's error state. Freeing memory never reports it;
//  - an event recorded on the stream while the failure is unreported carries it: orEventQuery and
//    orEventSynchronize return it, and a stream that waits on the record takes it as its own.
// Later tasks that do not read poisoned memory still run: work independent of the failure is
// not lost, and a test suite can go on after an expected failure once it has synchronized.
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
  Failure what;  // built only on failure: the fast path allocates nothing
  try {
    task();
    if (watched) poison.clearCovered(accesses);
    return;
  } catch (const TaskError& e) {
    what.message = e.what();
    what.category = e.category();
  } catch (const std::exception& e) {
    what.message = e.what();
  } catch (...) {
    what.message = "a task threw a non-standard exception";
  }
  what.message =
      "openreg: a task failed on device " + std::to_string(device_) + ": " + what.message;
  const FailureRef failure = std::make_shared<const Failure>(std::move(what));
  if (!watched) task.accesses(accesses);
  poison.poisonWrites(accesses, failure);
  if (outcome != nullptr) *outcome = failure;
  recordError(failure);
}

void Stream::recordError(const FailureRef& failure) {
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (hasError_.load(std::memory_order_relaxed)) return;  // keep the first
  error_ = failure;
  hasError_.store(true, std::memory_order_release);
}

FailureRef Stream::pendingFailure() {
  if (!hasError_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(errorMutex_);
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
  return report(*own);
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
void Stream::waitFor(std::uint64_t ticket) {
  const auto reached = [&] { return completed_.load(std::memory_order_acquire) >= ticket; };
  if (spinUntil(limits_.spinMicros, Backoff::Yield, reached)) return;
  std::unique_lock<std::mutex> lock(syncMutex_);
  while (completed_.load(std::memory_order_seq_cst) < ticket) {
    if (ticket < wakeAt_.load(std::memory_order_relaxed)) {
      wakeAt_.store(ticket, std::memory_order_seq_cst);
      continue;  // re-check completed_ after publishing the ticket
    }
    syncCv_.wait(lock);
  }
}

}  // namespace openreg
