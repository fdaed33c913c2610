// Executor: the worker threads of one device, shared by all of its streams.
//
// Ready streams wait in two FIFO queues, one per priority; a worker serves the high-priority
// queue first. An idle worker spins for OPENREG_WORKER_SPIN_US before it sleeps, so a host that
// launches in a steady trickle does not pay a futex wake per launch. See Note [Stream execution]
// in Stream.h for how streams stay in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace openreg {

class Stream;

// True on a device worker thread (inside a task, or between tasks).
bool onWorkerThread();

class Executor {
 public:
  Executor(int device, int workers, int spinMicros);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues an active stream for a worker.
  void schedule(std::shared_ptr<Stream> stream);
  // True when some other stream is waiting for a worker (used by a running stream to yield).
  bool hasReadyStreams() const { return readyCount_.load(std::memory_order_relaxed) > 0; }

 private:
  void workerLoop();
  std::shared_ptr<Stream> tryPop();

  const int device_;
  const int spinMicros_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Stream>> ready_[2];  // [0] high priority, [1] normal
  std::atomic<int> readyCount_{0};
  int sleepers_ = 0;                  // guarded by mutex_
  std::vector<std::thread> threads_;  // never joined: workers live as long as the process
};

}  // namespace openreg
