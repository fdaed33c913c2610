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
// How the spin backs off depends on who spins:
//  - Backoff::Pause (workers): a `pause` instruction between checks. A worker is the only thing
//    its device runs, and sched_yield would be a system call per check;
//  - Backoff::Yield (host threads): sched_yield between checks. The host thread may share its
//    core with the very worker it waits for, which must get the core to make progress.
// spinUntil returns whether the predicate became true within the window; the caller decides what
// "block" means for it (and re-checks the predicate under its own lock before sleeping).
// [marker: spin-until]
#pragma once

#include <chrono>
#include <thread>

namespace openreg {

enum class Backoff { Pause, Yield };

template <class Predicate>
bool spinUntil(int micros, Backoff backoff, Predicate&& ready) {
  if (ready()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  do {
    if (backoff == Backoff::Yield) {
      std::this_thread::yield();
    } else {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    }
    if (ready()) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

}  // namespace openreg
