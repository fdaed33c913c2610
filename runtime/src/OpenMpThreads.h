// OpenMpThreads: a thread that sleeps for the device gives its OpenMP helper threads back.
//
// Note [OpenMP threads on shared cores]
// A device worker runs the CPU's own kernels, and ATen parallelizes them with OpenMP: the GNU
// OpenMP runtime (libgomp) of the torch wheel, and MKL's matrix products on top of it. Every
// thread that runs a parallel region keeps a pool of helper threads for the next one, so in a
// process that uses openreg there are two pools: the host thread's, once it has run a CPU operator
// that parallelizes, and each worker's. Between regions a pool's helpers spin for the next one
// (about 3 ms), but only while the process has no more OpenMP threads than cores: past that
// libgomp counts the machine as oversubscribed and the helpers go to sleep after ~100 spins. It
// counts threads that exist, busy or not. On 2 cores the host's pool and a worker's (2 threads
// each) are enough: every parallel region of the worker's kernels, and of the host's, then pays a
// futex wake-up of a helper on a sleeping core, tens of microseconds, for kernels that take a few.
// A replayed MLP training step took 0.98 ms instead of 0.13 ms that way, and the CPU's own step
// beside it 1.18 ms instead of 0.25 ms.
//
// A pool only needs to exist while its thread runs kernels. So a thread that has waited for the
// device for OPENREG_OPENMP_RELEASE_US (1 ms by default) gives its pool back with OpenMP 5.0's
// omp_pause_resource_all, which in libgomp ends the calling thread's helpers and lowers the count:
//  - a device worker that found no work for that long (Executor.cpp, worker-loop);
//  - a host thread blocked that long on the device: a synchronize, an event, a blocking copy, a
//    full queue (Stream::waitFor, EventRecord::wait);
//  - a host thread that wakes a device whose worker went that long without work (Executor::
//    schedule): the host was busy elsewhere, perhaps with parallel CPU operators, and the device
//    is about to compute. In a loop that alternates 20 CPU training steps and 20 openreg steps,
//    this took openreg's MLP step from 2.01-2.12 to 1.74-1.82 ms.
// The next parallel region of that thread starts a new pool (about 50 µs, once); thread counts,
// and so every kernel's result, are unchanged. -1 never releases.
#pragma once

namespace openreg {

// Ends the calling thread's OpenMP helper threads, if GNU OpenMP is loaded in the process and the
// thread is outside any parallel region; does nothing otherwise. Costs ~25 µs when the thread has
// helpers, a dlopen lookup when it has none.
void releaseOpenMpThreads() noexcept;

}  // namespace openreg
