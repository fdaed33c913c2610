// Ipc: sharing device memory between processes (orIpc* in runtime.h, docs/ipc.md).
//
// Note [Sharing device memory between processes]
// Device memory already lives in a memfd (Note [Device address space] in DeviceMemory.h), so
// another process can map the same pages: nothing is copied. A handle names
//  - the exporter: its process id and the descriptor numbers of its device memory file and of its
//    export table, with their inode numbers (another process opens /proc/<pid>/fd/<n> and checks
//    the inode, so a recycled descriptor or process id is detected, not mapped);
//  - the allocation: device, offset in the file, rounded size;
//  - one slot of the export table, with a serial.
// The export table is a small shared memfd of the exporter: one 64-bit word per slot, the serial
// and a state (unopened, open, given back), changed by compare-and-swap from either process, and
// the importer's process id. A handle carries one reference: the slot stays "unopened" or
// "open" until the importer closes it, someone discards it, or the importer has died (the
// exporter checks with kill(pid, 0)).
//
// Import: the importer takes a range of the handle's device from its own range allocator, as for
// an allocation, and maps the exporter's pages over that range's part of its kernel window
// (DeviceMemory::mapImport). Device addresses, kernel-pointer translation, range checks of copies
// and the fault report then work unchanged: an import is an allocation whose window shows another
// process's file. Close maps the own file back, then releases the range (punching holes in the
// own file only).
//
// Export lifetime: orFree of an allocation with references out does not release it; it retires
// it (DeviceMemory::retire): the allocation leaves the live set, so a second free or a copy is
// refused, but its range and pages stay until every reference is back. collectRetired() releases
// those, and is called by orMalloc (when something is retired) and by every orIpc* call of the
// exporter. A caching allocator above the runtime must keep a block it shared out of reuse in
// the same way; orIpcMemHandleQuery tells it when it may.
//
// Threading: one mutex guards this process's exports and imports; slot words are atomics in
// shared memory, lock-free and address-free, so the two processes need no lock in common.
#pragma once

#include <openreg/runtime.h>

#include <atomic>

#include "DeviceMemory.h"

namespace openreg {
struct Device;
}

namespace openreg::ipc {

// True if allocations are retired (cheap: one atomic load), so orMalloc knows to collect.
extern std::atomic<int> gRetired;

// Releases retired allocations whose every reference is back. Takes the IPC mutex.
void collectRetired();

// orFree's step for an allocation that may be exported: true if it had references out and was
// retired instead of released (the caller then must not release it).
bool retireIfExported(Device& device, const void* base);

// The work of the orIpc* calls (IpcApi.cpp checks the arguments it can without reading a
// handle's bytes); each error names `call`.
// orIpcGetMemHandle: a handle for allocation `a` of device `d` (allocated in this process).
orError_t exportAllocation(const char* call, Device& d, const DeviceMemory::Allocation& a,
                           orIpcMemHandle_t* handle);
// orIpcOpenMemHandle: maps the allocation of another process's `handle`; its start into *devPtr.
orError_t openHandle(const char* call, const orIpcMemHandle_t& handle, void** devPtr);
// orIpcCloseMemHandle: unmaps memory opened by openHandle, after the work queued on every device.
orError_t closeImport(const char* call, void* devPtr);
// orIpcDiscardMemHandle: gives back the reference of a handle that will not be opened.
orError_t discardHandle(const char* call, const orIpcMemHandle_t& handle);
// orIpcMemHandleQuery: orSuccess once the reference of this process's `handle` is back, else
// orErrorNotReady.
orError_t queryHandle(const char* call, const orIpcMemHandle_t& handle);
// orIpcGetMemHandleInfo: what `handle` refers to, read from its bytes.
orError_t describeHandle(const char* call, const orIpcMemHandle_t& handle,
                         orIpcMemHandleInfo* info);

}  // namespace openreg::ipc
