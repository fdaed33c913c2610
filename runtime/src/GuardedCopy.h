// GuardedCopy: the runtime's copies from and to caller-given host memory, which return a fault on
// that memory instead of dying of it.
//
// Note [Fault-guarded copies]
// orMemcpy and orMemcpyAsync take host pointers that the runtime cannot check cheaply: whether an
// address is mapped, readable and writable is known to the kernel only, and asking it (mincore,
// process_vm_readv, a probing write()) would put a system call on every copy. So the copy simply
// runs, on a device worker or on the calling thread, and the fault handler catches a fault in it:
//  - before the memmove the copying thread arms a guard: the copy's host ranges and a
//    sigsetjmp(env, 0) buffer, published through a thread-local pointer. No system call: a zero
//    savemask saves no signal mask.
//  - the SIGSEGV/SIGBUS handler (FaultHandler.cpp) asks escapeGuardedCopy() first. A fault raised
//    by the kernel (not a kill()) at an address on a page of an armed guard's host range disarms
//    the guard and siglongjmps back into the copy, which returns the side and the address. The
//    range is widened to whole pages because memmove may touch the rest of a page the range
//    starts or ends in, and such a page faults as a whole anyway.
//  - back from the jump, the thread unblocks SIGSEGV and SIGBUS (pthread_sigmask) in case the
//    handler was entered with them blocked; only this failure path pays a system call.
// The copy stops part-way; the caller gets orErrorInvalidValue naming the call, the range and the
// side, and the device, its streams and the worker carry on. Every other fault is untouched: a
// host access to device memory still gets its report, anything else reaches the previous handler.
// The guard pointer uses the initial-exec TLS model: reading a general-dynamic thread_local of a
// dlopen()ed library (as Python loads us) may call malloc, which a signal handler must not.
// Device sides are not guarded: they are the runtime's own kernel window, and a fault there is a
// runtime bug that must stay visible. Without the handler (OPENREG_FAULT_HANDLER=0) nothing is
// caught and a bad host pointer kills the process, as a plain memmove would.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace openreg {

// Where a guarded copy faulted; side None if it completed.
struct CopyFault {
  enum class Side : int { None = 0, Destination = 1, Source = 2 };
  Side side = Side::None;
  std::uintptr_t address = 0;
  explicit operator bool() const { return side != Side::None; }
};

// memmove(dst, src, count) with the host sides guarded: `hostDst` and `hostSrc` say which sides
// are caller-given host memory. With neither, a plain memmove.
CopyFault guardedCopy(void* dst, bool hostDst, const void* src, bool hostSrc, std::size_t count);

// "openreg: <call>: the <count>-byte source range at 0x... is not readable host memory: ..."
std::string copyFaultMessage(const char* call, const CopyFault& fault, const void* dst,
                             const void* src, std::size_t count);

// For the fault handler, async-signal-safe: if the faulting thread is inside a guarded copy and
// the fault hit one of its host pages, jumps back into the copy and does not return.
void escapeGuardedCopy(const siginfo_t* info);

}  // namespace openreg
