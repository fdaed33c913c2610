#include "FaultHandler.h"

#include <signal.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "GuardedCopy.h"
#include "Runtime.h"

namespace openreg {
namespace {

// Note [Device faults]
// Device ranges are PROT_NONE, so a host load or store through a device pointer raises SIGSEGV.
// The handler checks the faulting address against each device range (a comparison per device,
// no lock). For a device address it writes one report to stderr, naming the device and the
// allocation, then restores the default action and returns: the instruction faults again and
// the process dies with SIGSEGV as it would have, so debuggers and core dumps still see the
// original fault. A fault in a runtime copy on its host side is turned into an error for the
// caller (Note [Fault-guarded copies] in GuardedCopy.h). Any other fault goes, untouched, to the
// handler that was installed before ours. Only async-signal-safe calls are made; the allocation
// lookup uses a try-lock and says so when the allocator is busy.
struct sigaction gPrevious[2];  // [0] SIGSEGV, [1] SIGBUS

class Line {
 public:
  void add(const char* s) {
    while (*s != '\0' && size_ < sizeof(buf_)) buf_[size_++] = *s++;
  }
  void addUnsigned(std::uint64_t v, int base) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v != 0);
    if (base == 16) add("0x");
    while (n > 0 && size_ < sizeof(buf_)) buf_[size_++] = digits[--n];
  }
  // "<what>0x<base> of <size> bytes (offset <address - base>)"
  void addPlace(const char* what, std::uintptr_t base, std::size_t size, const void* address) {
    add(what);
    addUnsigned(base, 16);
    add(" of ");
    addUnsigned(size, 10);
    add(" bytes (offset ");
    addUnsigned(reinterpret_cast<std::uintptr_t>(address) - base, 10);
    add(")");
  }
  void flush() {
    ssize_t ignored = write(STDERR_FILENO, buf_, size_);
    (void)ignored;
  }

 private:
  char buf_[1024];
  std::size_t size_ = 0;
};

void reportDeviceFault(const Device& d, const void* address) {
  Line line;
  line.add("\nopenreg: host code touched openreg device memory: address ");
  line.addUnsigned(reinterpret_cast<std::uintptr_t>(address), 16);
  line.add(" is on device ");
  line.addUnsigned(static_cast<std::uint64_t>(d.index), 10);
  DeviceMemory::Allocation a;
  DeviceMemory::ReservationInfo r;
  switch (d.memory.tryFindForSignal(address, &a, &r)) {
    case 1:
      line.addPlace(", inside the allocation at ", a.base, a.size, address);
      if (a.importedFrom != 0) {
        line.add(", memory shared by process ");
        line.addUnsigned(static_cast<std::uint64_t>(a.importedFrom), 10);
      }
      break;
    case 2:
      line.addPlace(r.mapped ? ", mapped memory inside the reservation at "
                             : ", in an unmapped part of the reservation at ",
                    r.base, r.size, address);
      break;
    case 0:
      line.add(", in no live allocation (freed, or never allocated)");
      break;
    default:
      line.add(" (allocation unknown: the allocator was busy)");
  }
  line.add(
      ".\nDevice memory is not host memory. Copy it to the host first (tensor.cpu(), "
      "tensor.to('cpu'), orMemcpy), or reach it from a task on a stream through "
      "orGetKernelPointer.\n");
  line.flush();
}

void passOn(int sig, siginfo_t* info, void* context) {
  struct sigaction& prev = gPrevious[sig == SIGSEGV ? 0 : 1];
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  } else {
    // Default (or ignore, which the kernel does not honour for a synchronous fault): restore it
    // and return, so the faulting instruction runs again under it.
    signal(sig, SIG_DFL);
  }
}

// [marker: fault-handler]
void onFault(int sig, siginfo_t* info, void* context) {
  escapeGuardedCopy(info);  // returns unless a runtime copy faulted on its host side
  if (detail::gState.load(std::memory_order_acquire) == detail::State::Ready) {
    for (const auto& d : runtime().devices) {
      if (d->memory.contains(info->si_addr)) {
        reportDeviceFault(*d, info->si_addr);
        signal(sig, SIG_DFL);
        return;
      }
    }
  }
  passOn(sig, info, context);
}

}  // namespace

void installFaultHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = onFault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &gPrevious[0]);
  sigaction(SIGBUS, &action, &gPrevious[1]);
}

}  // namespace openreg
