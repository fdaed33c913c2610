// spinUntil: the one busy-wait of the runtime, used before a thread blocks or gives work back.
//
// Note [Spin then sleep]
// A thread that waits for another (a worker for new work, a host thread for a ticket or an event
// record) first spins for OPENREG_WORKER_SPIN_US microseconds re-checking a predicate, and only
// then takes the slow path: a worker sleeps on its executor's condition variable or hands a
// drained stream back, a host thread sleeps on the stream's or the record's. Work arrives in
// steady trickles (a host launching op after op, a synchronize a few microseconds after the
// launch), so a short spin usually ends with the predicate true and nobody pays for a futex
// wait and the wake-up that must follow it, on either side.
// Between checks the spinner calls sched_yield: the host thread and a worker often share a core
// (a wake-up puts the woken thread beside its waker), and the thread waited for must get the core
// to make progress. A spinner that kept the core (the `pause` instruction) took it from the thread
// it waited for whenever the two shared a core; with nothing else to run, sched_yield returns at
// once, so a lone spinner loses nothing. The figures are in docs/graphs.md ("Threads: OpenMP
// helpers on shared cores"), beside the benches that measure them.
// spinUntil returns whether the predicate became true within the window; the caller decides what
// "block" means for it (and re-checks the predicate under its own lock before sleeping), and
// sleeps with sleepUntil, which gives the thread's OpenMP threads back once it has slept for
// OPENREG_OPENMP_RELEASE_US (Note [OpenMP threads on shared cores] in OpenMpThreads.h).
// [marker: spin-until]
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "OpenMpThreads.h"

namespace openreg {

// How a thread waits for another: what the runtime's configuration says of it.
struct WaitPolicy {
  int spinMicros = 50;         // OPENREG_WORKER_SPIN_US: Note [Spin then sleep]
  int releaseMicros = 1000;    // OPENREG_OPENMP_RELEASE_US, -1 never (OpenMpThreads.h)
  bool onlyWhenAlone = false;  // release only while no other process uses openreg (ditto)
};

// Whether a thread waiting under `policy` gives its OpenMP threads back now that it may.
inline bool mayRelease(const WaitPolicy& policy) {
  return policy.releaseMicros >= 0 && (!policy.onlyWhenAlone || aloneOnMachine());
}

template <class Predicate>
bool spinUntil(int micros, Predicate&& ready) {
  if (ready()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  do {
    std::this_thread::yield();
    if (ready()) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// Sleeps on `cv` (with `lock` held) until `ready()`; once asleep for policy.releaseMicros, gives
// the thread's OpenMP threads back, with the lock released, then calls `released()` under the lock
// and sleeps on. While another process uses openreg and the policy says to wait for that, it looks
// again every 100 ms. `ready` is called under the lock, as a condition variable's predicate.
template <class Predicate, class Released>
void sleepUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                const WaitPolicy& policy, Predicate&& ready, Released&& released) {
  if (policy.releaseMicros >= 0 &&
      !cv.wait_for(lock, std::chrono::microseconds(policy.releaseMicros), ready)) {
    for (;;) {
      lock.unlock();
      const bool release = mayRelease(policy);
      if (release) releaseOpenMpThreads();
      lock.lock();
      if (release) {
        released();
        break;
      }
      if (cv.wait_for(lock, std::chrono::milliseconds(100), ready)) return;
    }
  }
  cv.wait(lock, ready);
}

template <class Predicate>
void sleepUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                const WaitPolicy& policy, Predicate&& ready) {
  sleepUntil(lock, cv, policy, std::forward<Predicate>(ready), [] {});
}

}  // namespace openreg
