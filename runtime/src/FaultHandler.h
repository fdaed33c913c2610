// Reports host access to device memory. See Note [Device faults] in FaultHandler.cpp.
#pragma once

namespace openreg {

// Installs the SIGSEGV/SIGBUS handler once; the handlers found at that moment become the ones
// that every fault outside the device ranges is passed to.
void installFaultHandler();

}  // namespace openreg
