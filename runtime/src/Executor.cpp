#include "Executor.h"

#include <pthread.h>

#include <string>
#include <type_traits>
#include <utility>

#include "Spin.h"
#include "Stream.h"

namespace openreg {
namespace {
thread_local bool tOnDeviceWorker = false;  // set once, when a worker starts
}  // namespace

bool onDeviceWorker() {
  return tOnDeviceWorker;
}

ScopedDeviceWorker::ScopedDeviceWorker() : previous_(std::exchange(tOnDeviceWorker, true)) {}

ScopedDeviceWorker::~ScopedDeviceWorker() {
  tOnDeviceWorker = previous_;
}

Executor::Executor(int device, int workers, WaitPolicy wait) : device_(device), wait_(wait) {
  try {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this, i] {
        const std::string name = OR_DEVICE_NAME + std::to_string(device_) + "w" + std::to_string(i);
        pthread_setname_np(pthread_self(), name.c_str());
        tOnDeviceWorker = true;  // See Note [Synchronizing inside a task]
        workerLoop();
      });
    }
  } catch (...) {
    stopWorkers();  // a constructor that throws runs no destructor
    throw;
  }
}

Executor::~Executor() {
  stopWorkers();
}

void Executor::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Executor::schedule(std::shared_ptr<Stream> stream) {
  const int queue = priorityIndex(stream->priority());
  bool wake;
  bool wakesFromLongIdle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_[queue].push_back(std::move(stream));
    readyCount_.fetch_add(1, std::memory_order_relaxed);
    wake = sleepers_ > 0;
    wakesFromLongIdle = std::exchange(releasedWhileIdle_, false);
  }
  if (wake) cv_.notify_one();
  // A host thread that wakes a device idle for long has been busy elsewhere, perhaps with
  // parallel CPU operators; the device now computes, so its OpenMP threads go too (Note [OpenMP
  // threads on shared cores]).
  if (wakesFromLongIdle && !onDeviceWorker() && mayRelease(wait_)) releaseOpenMpThreads();
}

std::shared_ptr<Stream> Executor::tryPop() {
  std::lock_guard<std::mutex> lock(mutex_);
  static_assert(std::extent_v<decltype(ready_)> == kStreamPriorityCount);
  for (int index = kStreamPriorityCount - 1; index >= 0; --index) {
    auto& queue = ready_[index];
    if (!queue.empty()) {
      std::shared_ptr<Stream> s = std::move(queue.front());
      queue.pop_front();
      readyCount_.fetch_sub(1, std::memory_order_relaxed);
      return s;
    }
  }
  return nullptr;
}

// [marker: worker-loop]
void Executor::workerLoop() {
  for (;;) {
    std::shared_ptr<Stream> stream = tryPop();
    if (stream == nullptr) {
      // Spin before sleeping (Note [Spin then sleep] in Spin.h): a stream of launches from the
      // host then costs no wake-up syscalls.
      spinUntil(wait_.spinMicros,
                [this] { return readyCount_.load(std::memory_order_relaxed) != 0; });
      std::unique_lock<std::mutex> lock(mutex_);
      if (ready_[0].empty() && ready_[1].empty() && !stopping_) {
        ++sleepers_;
        // Long idle: the worker's OpenMP threads go (Note [OpenMP threads on shared cores]).
        sleepUntil(
            lock, cv_, wait_,
            [this] { return !ready_[0].empty() || !ready_[1].empty() || stopping_; },
            [this] { releasedWhileIdle_ = true; });
        --sleepers_;
      }
      if (stopping_) return;
      continue;
    }
    stream->run();
  }
}

}  // namespace openreg
