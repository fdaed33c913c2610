#include "Stream.h"

#include <chrono>
#include <thread>

#include "Event.h"
#include "Executor.h"
#include "Runtime.h"

namespace openreg {

Stream::Stream(int device, int priority, bool isDefault, Executor& executor)
    : device_(device), priority_(priority), isDefault_(isDefault), executor_(executor) {}

// [marker: stream-enqueue]
std::uint64_t Stream::enqueue(StreamOp&& op) {
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
      if (pending_.empty()) {
        lock.unlock();
        // Stay active for a moment: a host launching in a steady stream then only appends, and
        // neither side pays for handing the stream back to the executor.
        const bool more = awaitMoreWork();
        lock.lock();
        if (!more && pending_.empty()) {
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
        record->stamp();
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
      } else {
        execute(op);
      }
      op = StreamOp{};  // release the task's captures now, not at the next batch
      ++cursor_;
      markCompleted();
    }
  }
}

bool Stream::awaitMoreWork() {
  const auto spinUntil = std::chrono::steady_clock::now() +
                         std::chrono::microseconds(runtime().config.workerSpinMicros);
  do {
    if (submitted_.load(std::memory_order_acquire) != completed_.load(std::memory_order_relaxed)) {
      return true;
    }
    if (executor_.hasReadyStreams()) return false;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } while (std::chrono::steady_clock::now() < spinUntil);
  return false;
}

// Note [Task errors]
// A task that throws is not fatal for the device (a real GPU's context would be, after a fault):
// the first error message on a stream is kept until a synchronizing call on the stream or its
// device (orStreamSynchronize, orStreamQuery, orDeviceSynchronize, a blocking launch, orFree,
// orMemcpy) reports it as orErrorLaunchFailure, with the message
// available from orGetLastErrorMessage. Reporting clears it. Later tasks on the stream still run,
// so their results may be wrong; the caller decides what to do.
void Stream::execute(StreamOp& op) {
  switch (op.kind) {
    case StreamOp::Kind::Run:
      try {
        op.task();
      } catch (const std::exception& e) {
        recordError(e.what());
      } catch (...) {
        recordError("a task threw a non-standard exception");
      }
      break;
    case StreamOp::Kind::Record:
    case StreamOp::Kind::Wait:
      break;  // handled in run()
  }
}

void Stream::recordError(const char* what) {
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (hasError_.load(std::memory_order_relaxed)) return;  // keep the first
  error_ = "openreg: a task failed on device " + std::to_string(device_) + ": " + what;
  hasError_.store(true, std::memory_order_release);
}

orError_t Stream::takeError() {
  if (!hasError_.load(std::memory_order_acquire)) return orSuccess;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (!hasError_.load(std::memory_order_relaxed)) return orSuccess;
    message.swap(error_);
    hasError_.store(false, std::memory_order_release);
  }
  return fail(orErrorLaunchFailure, std::move(message));
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
  if (completed_.load(std::memory_order_acquire) >= ticket) return;
  const auto spinUntil = std::chrono::steady_clock::now() +
                         std::chrono::microseconds(runtime().config.workerSpinMicros);
  while (std::chrono::steady_clock::now() < spinUntil) {
    if (completed_.load(std::memory_order_acquire) >= ticket) return;
    std::this_thread::yield();
  }
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
