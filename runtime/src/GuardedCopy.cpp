#include "GuardedCopy.h"

#include <pthread.h>
#include <setjmp.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "Messages.h"

namespace openreg {
namespace {

// One armed copy. Lives on the copying thread's stack; the handler writes the volatile fields.
struct Guard {
  std::uintptr_t begin[2];  // [0] destination, [1] source; begin == end: not guarded
  std::uintptr_t end[2];
  volatile int side;
  volatile std::uintptr_t address;
  sigjmp_buf env;
};

// See Note [Fault-guarded copies] for the TLS model.
thread_local Guard* tGuard __attribute__((tls_model("initial-exec"))) = nullptr;

const std::uintptr_t kPageSize = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));

void setRange(Guard& g, int which, bool guarded, const void* p, std::size_t count) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  g.begin[which] = begin;
  g.end[which] = guarded ? begin + count : begin;  // checkCopy rejected ranges that wrap
}

bool onPagesOf(const Guard& g, int which, std::uintptr_t address) {
  if (g.begin[which] == g.end[which]) return false;
  const std::uintptr_t first = g.begin[which] & ~(kPageSize - 1);
  const std::uintptr_t last = (g.end[which] - 1) | (kPageSize - 1);
  return address >= first && address <= last;
}

}  // namespace

// [marker: guarded-copy]
CopyFault guardedCopy(void* dst, bool hostDst, const void* src, bool hostSrc, std::size_t count) {
  if (!hostDst && !hostSrc) {
    std::memmove(dst, src, count);
    return {};
  }
  Guard guard;
  setRange(guard, 0, hostDst, dst, count);
  setRange(guard, 1, hostSrc, src, count);
  guard.side = 0;
  guard.address = 0;
  if (sigsetjmp(guard.env, 0) == 0) {
    tGuard = &guard;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // armed before the first access
    std::memmove(dst, src, count);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tGuard = nullptr;
    return {};
  }
  // Back from the handler, which disarmed the guard.
  sigset_t faults;
  sigemptyset(&faults);
  sigaddset(&faults, SIGSEGV);
  sigaddset(&faults, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &faults, nullptr);
  return CopyFault{static_cast<CopyFault::Side>(guard.side), guard.address};
}

std::string copyFaultMessage(const char* call, const CopyFault& fault, const void* dst,
                             const void* src, std::size_t count) {
  const bool source = fault.side == CopyFault::Side::Source;
  return callMessage(
      call,
      "the " + std::to_string(count) + "-byte " +
          (source ? "source range at " + hexAddress(src) + " is not readable host memory"
                  : "destination range at " + hexAddress(dst) + " is not writable host memory") +
          ": the copy faulted at " + hexAddress(fault.address) +
          " and stopped there (the destination may be partly written). The device is unaffected.");
}

// [marker: escape-guarded-copy]
void escapeGuardedCopy(const siginfo_t* info) {
  Guard* guard = tGuard;
  if (guard == nullptr || info->si_code <= 0) return;  // not armed, or sent by kill()
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  // A side whose exact range holds the address first: both sides may share a page.
  int side = 0;
  for (int which : {1, 0}) {
    if (side == 0 && address >= guard->begin[which] && address < guard->end[which]) {
      side = which + 1;
    }
  }
  for (int which : {1, 0}) {
    if (side == 0 && onPagesOf(*guard, which, address)) side = which + 1;
  }
  if (side == 0) return;
  tGuard = nullptr;
  guard->side = side;  // which + 1: CopyFault::Side::Destination or Source
  guard->address = address;
  siglongjmp(guard->env, 1);
}

}  // namespace openreg
