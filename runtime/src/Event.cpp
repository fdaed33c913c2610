#include "Event.h"

#include <chrono>

#include "Spin.h"
#include "Stream.h"

namespace openreg {

void EventRecord::bind(std::shared_ptr<Stream> stream, std::uint64_t ticket) {
  stream_ = std::move(stream);
  ticket_ = ticket;
}

bool EventRecord::done() const {
  if (hostDriven_) return hostDone_.load(std::memory_order_acquire);
  return stream_->completedCount() >= ticket_;
}

// [marker: event-complete-host]
bool EventRecord::completeFromHost(FailureRef failure) {
  if (hostClaimed_.exchange(true, std::memory_order_acq_rel)) return false;
  stamp(std::move(failure));
  hostDone_.store(true, std::memory_order_release);  // as the stream's counter moving
  wakeWaiters();
  return true;
}

void EventRecord::stamp(FailureRef failure) {
  if (carriesFailure_) failure_ = std::move(failure);
  timeNs_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count();
}

// [marker: event-record-complete]
void EventRecord::wakeWaiters() {
  std::vector<std::shared_ptr<Stream>> resume;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    resume.swap(parked_);
  }
  cv_.notify_all();
  for (auto& stream : resume) stream->resume();
}

bool EventRecord::parkIfPending(const std::shared_ptr<Stream>& stream) {
  if (done()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  // wakeWaiters() takes the list under this lock after the counter moved: re-check under it.
  if (done()) return false;
  parked_.push_back(stream);
  return true;
}

void EventRecord::wait(const WaitPolicy& policy) {
  countSynchronization();
  if (spinUntil(policy.spinMicros, [this] { return done(); })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  sleepUntil(lock, cv_, policy, [this] { return done(); });
}

void Event::publish(std::shared_ptr<EventRecord> record) {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = std::move(record);
}

bool Event::armHost() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (host_ != nullptr && !host_->done()) return false;
  host_ = std::make_shared<EventRecord>(carriesFailure_);
  host_->bindHost();
  latest_ = host_;
  return true;
}

std::shared_ptr<EventRecord> Event::takeHost() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<EventRecord> taken;
  taken.swap(host_);
  return taken;
}

std::shared_ptr<EventRecord> Event::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

}  // namespace openreg
