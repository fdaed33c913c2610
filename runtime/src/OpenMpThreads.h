// OpenMpThreads: a thread that waits for long gives its OpenMP helper threads back.
//
// Note [OpenMP threads on shared cores]
// A device worker runs the CPU's own kernels, and ATen parallelizes them with OpenMP: the GNU
// OpenMP runtime (libgomp) of the torch wheel, and MKL's matrix products on top of it. Every
// thread that runs a parallel region keeps a pool of helper threads for the next one, so in a
// process that uses openreg there are two pools: each worker's, and the host thread's once it
// has run a CPU operator that parallelizes (a large host-to-device copy is enough). Between
// regions a pool's helpers spin for the next one, but only while the process has no more OpenMP
// threads than cores, idle pools included; past that libgomp counts the machine as
// oversubscribed and the helpers soon sleep, so every parallel region pays a futex wake-up of a
// helper on a sleeping core.
//
// A pool only needs to exist while its thread computes. So a thread that has waited for
// OPENREG_OPENMP_RELEASE_US ends its helpers with OpenMP 5.0's
// omp_pause_resource_all, which in libgomp ends the calling thread's helpers and lowers the count:
//  - a device worker that found no work for that long (Executor.cpp, worker-loop);
//  - a host thread blocked that long on the device: a synchronize, an event, a blocking copy, a
//    full queue (Stream::waitFor, EventRecord::wait);
//  - a host thread that wakes a device whose worker went that long without work
//    (Executor::schedule): the host was busy elsewhere, perhaps with parallel CPU operators.
// The thread's next parallel region starts a new pool, once; thread counts, and so every
// kernel's result, are unchanged. What it saves is measured in docs/graphs.md ("Threads: OpenMP
// helpers on shared cores").
//
// But libgomp counts one process's threads, and spinning helpers only pay while cores are free.
// With two processes using openreg sharing the cores, releasing made things worse (the same
// chapter has the figures), because one process's spinning helpers keep the cores from the
// other's threads. So by default (OPENREG_OPENMP_RELEASE=auto) a thread releases only
// while its process is the only one on the machine using openreg: each process holds a read lock
// on a file (registerOpenregProcess, at initialization), and aloneOnMachine asks whether another
// process holds one. OPENREG_OPENMP_RELEASE=1 releases whatever the other processes, 0 never
// (as does OPENREG_OPENMP_RELEASE_US=-1).
#pragma once

namespace openreg {

// Ends the calling thread's OpenMP helper threads, if GNU OpenMP is loaded in the process and the
// thread is outside any parallel region; does nothing otherwise. Cheap when the thread has no
// helpers (a lookup of libgomp's symbol), so callers need not track whether it has any.
void releaseOpenMpThreads() noexcept;

// Counts this process among those using openreg on the machine (once; at initialization).
void registerOpenregProcess() noexcept;

// True when no other live process has called registerOpenregProcess(): each holds a read lock on
// $TMPDIR/openreg-processes.lock (TMPDIR defaults to /tmp), and F_GETLK reports other processes'
// locks only. Also true when the file cannot be used.
bool aloneOnMachine() noexcept;

}  // namespace openreg
