// Events and their records.
//
// Note [Event records]
// Each orEventRecord creates a new EventRecord: the completion of one point in one stream. The
// event points at its most recent record; queries, host waits and elapsed times use that one,
// while a stream wait captures the record current at the time of the orStreamWaitEvent call.
// Re-recording an event before its previous record completed therefore never confuses the two:
// a waiter of the old record is released by the old record, not by the new one.
// A record is complete exactly when its stream has completed the record's ticket (the count of
// operations submitted up to and including it). Defining it by the stream's counter, rather than
// by a flag of its own, makes the two views agree at every instant: once an event recorded last on
// a stream has completed, the stream is idle, and the other way round.
//
// Note [Host-completed records]
// A stream sometimes has to wait for work the host does (a collective run by a communication
// library on its own threads). Parking a task on a worker until the host is done would hold that
// worker, and another stream of the device may be what the host work waits for: a deadlock with
// one worker. Instead the host arms a record that no stream completes (orEventRecordHost) and
// completes it itself (orEventCompleteHost), with or without a Failure. Everything else is the
// ordinary record: a stream waiting on it parks exactly as on a stream's record (no worker held),
// completion stamps the time, wakes host waiters and resumes parked streams, and a failure it
// carries becomes the waiting stream's pending failure (Note [Task errors] in Stream.cpp). Such a
// record is complete when its flag is set instead of when a stream's counter passes its ticket.
#pragma once

#include <openreg/runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "Failure.h"
#include "Spin.h"

namespace openreg {

class Stream;

class EventRecord {
 public:
  // carriesFailure false: an orEventDisableFailure event's record, which carries no task failure.
  explicit EventRecord(bool carriesFailure = true) : carriesFailure_(carriesFailure) {}

  // Host, under the stream's queue lock, before the record is queued: which stream and ticket.
  void bind(std::shared_ptr<Stream> stream, std::uint64_t ticket);
  // Host, before the record is published: the record completes by completeFromHost(), not by a
  // stream (Note [Host-completed records]).
  void bindHost() { hostDriven_ = true; }
  bool hostDriven() const { return hostDriven_; }
  bool done() const;
  // Host: completes a host-driven record with `failure` (nullptr: success). False if it already
  // was complete.
  bool completeFromHost(FailureRef failure);
  // Worker clock (steady_clock) at completion, in nanoseconds. Valid once done().
  std::int64_t timeNs() const { return timeNs_; }

  // Worker, before the stream counts the record as completed: stamps the completion time and the
  // failure the stream had not reported at that point (Note [Task errors] in Stream.cpp).
  void stamp(FailureRef failure);
  // Valid once done(): the failure the record carries, or nullptr. A failure reported since (to
  // anyone, by any path) is no longer carried: see Note [Task errors] in Stream.cpp.
  FailureRef failure() const {
    return failure_ != nullptr && !failure_->wasReported() ? failure_ : nullptr;
  }
  // Worker, after: wakes host waiters and reschedules parked streams.
  void wakeWaiters();
  // Worker: parks `stream` on this record. Returns false (and keeps nothing) if already done.
  bool parkIfPending(const std::shared_ptr<Stream>& stream);
  // Host: blocks until done.
  void wait(const WaitPolicy& policy);

 private:
  const bool carriesFailure_;
  std::shared_ptr<Stream> stream_;  // set by bind(), before any other thread sees the record
  std::uint64_t ticket_ = 0;
  bool hostDriven_ = false;               // set by bindHost(), before any other thread sees it
  std::atomic<bool> hostDone_{false};     // host-driven records: set once stamped
  std::atomic<bool> hostClaimed_{false};  // host-driven records: completeFromHost() ran
  std::int64_t timeNs_ = 0;
  FailureRef failure_;  // written by stamp(), before the record completes
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Stream>> parked_;  // guarded by mutex_
};

class Event {
 public:
  Event(int device, bool timing, bool carriesFailure)
      : device_(device), timing_(timing), carriesFailure_(carriesFailure) {}
  int device() const { return device_; }
  bool timing() const { return timing_; }
  // False for orEventDisableFailure: its records carry no task failure.
  bool carriesFailure() const { return carriesFailure_; }

  // Makes `record` (already queued) the one later queries and waits refer to.
  void publish(std::shared_ptr<EventRecord> record);
  std::shared_ptr<EventRecord> latest() const;
  // Arms a new host-driven record and publishes it. False (nothing changed) if the previous one is
  // still pending.
  bool armHost();
  // Takes the pending host-driven record (nullptr if none).
  std::shared_ptr<EventRecord> takeHost();

 private:
  const int device_;
  const bool timing_;
  const bool carriesFailure_;
  mutable std::mutex mutex_;
  std::shared_ptr<EventRecord> latest_;  // guarded by mutex_
  std::shared_ptr<EventRecord> host_;    // guarded by mutex_: armed, not yet completed
};

}  // namespace openreg
