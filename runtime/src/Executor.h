// Executor: the worker threads of one device, shared by all of its streams.
//
// Ready streams wait in two FIFO queues, one per priority; a worker serves the high-priority
// queue first. An idle worker spins for OPENREG_WORKER_SPIN_US before it sleeps, so a host that
// launches in a steady trickle does not pay a futex wake per launch, and gives its OpenMP threads
// back once it has slept for OPENREG_OPENMP_RELEASE_US (Note [OpenMP threads on shared cores]). See
// Note [Stream execution] in Stream.h for how streams stay in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "Spin.h"

namespace openreg {

class Stream;

// Note [Synchronizing inside a task]
// A task runs on a device worker, and a synchronizing call made from it (orFree, orFreeHost,
// orDeviceSynchronize, orStreamSynchronize, orEventSynchronize, orMemcpy, orMemset, and an
// orMemcpyAsync that must complete because it touches pageable memory) would wait for work queued
// behind the task itself, or for a stream the busy worker would have to serve: a deadlock that
// CUDA leaves to the programmer. The runtime refuses them instead, with orErrorNotPermitted:
// each worker marks its thread once when it starts, and the synchronizing entry points check the
// mark (a thread_local read) before they wait. Under OPENREG_LAUNCH_BLOCKING a launch from inside
// a task does not wait either (it would wait for its own stream); it runs asynchronously.

// True on a device worker thread, i.e. inside a task.
bool onDeviceWorker();

// Marks the calling thread as a device worker while it runs tasks itself (Note [A waiting host
// runs the queued tasks] in Stream.cpp).
class ScopedDeviceWorker {
 public:
  ScopedDeviceWorker();
  ~ScopedDeviceWorker();
  ScopedDeviceWorker(const ScopedDeviceWorker&) = delete;
  ScopedDeviceWorker& operator=(const ScopedDeviceWorker&) = delete;

 private:
  bool previous_;
};

class Executor {
 public:
  // Starts the workers; throws std::system_error, having stopped those it started, when the
  // system refuses a thread.
  Executor(int device, int workers, WaitPolicy wait);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Stops and joins the workers, which must be idle. Devices live as long as the process (Note
  // [Runtime initialization]): only a failed initialization destroys an executor.
  ~Executor();

  // Queues an active stream for a worker.
  void schedule(std::shared_ptr<Stream> stream);
  // True when some other stream is waiting for a worker (used by a running stream to yield).
  bool hasReadyStreams() const { return readyCount_.load(std::memory_order_relaxed) > 0; }

 private:
  void workerLoop();
  std::shared_ptr<Stream> tryPop();
  void stopWorkers();

  const int device_;
  const WaitPolicy wait_;
  std::mutex mutex_;
  std::condition_variable cv_;
  // One queue per priority, by priorityIndex (Note [Stream priority index] in Stream.h): [0]
  // normal, [1] high; the highest index is served first.
  std::deque<std::shared_ptr<Stream>> ready_[2];
  std::atomic<int> readyCount_{0};
  int sleepers_ = 0;                  // guarded by mutex_
  bool releasedWhileIdle_ = false;    // guarded by mutex_: a worker slept long and released
  bool stopping_ = false;             // guarded by mutex_
  std::vector<std::thread> threads_;  // joined only by ~Executor
};

}  // namespace openreg
