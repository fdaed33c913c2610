// Entry points of runtime.h's "Sharing device memory between processes" section
// (Note [Sharing device memory between processes] in Ipc.h).
#include <openreg/runtime.h>

#include <string>

#include "Ipc.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(handle);
  Device* d = deviceOfPointer(devPtr);
  DeviceMemory::Allocation a;
  if (DeviceMemory::ReservationInfo r; d != nullptr && d->memory.findReservation(devPtr, &r)) {
    return fail(orErrorInvalidValue, __func__,
                "devPtr is in a reservation (orMemAddressReserve, "
                "orMemMap): memory mapped into a reservation cannot be shared between processes");
  }
  if (d == nullptr || !d->memory.find(devPtr, &a)) {
    return fail(orErrorInvalidDevicePointer, __func__, "devPtr is in no live device allocation");
  }
  if (a.importedFrom != 0) {
    return fail(orErrorInvalidDevicePointer, __func__,
                "devPtr is memory shared by process " + std::to_string(a.importedFrom) +
                    "; it cannot be passed on: share it from the process that allocated it");
  }
  return ipc::exportAllocation(__func__, *d, a, handle);
}

orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle, unsigned int flags) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(devPtr);
  if (flags != 0) {
    return fail(orErrorInvalidValue, __func__, "flags must be 0, not " + std::to_string(flags));
  }
  return ipc::openHandle(__func__, handle, devPtr);
}

orError_t orIpcCloseMemHandle(void* devPtr) {
  OR_ENTER_SYNCHRONIZING();
  return ipc::closeImport(__func__, devPtr);
}

orError_t orIpcDiscardMemHandle(orIpcMemHandle_t handle) {
  OR_ENTER_SYNCHRONIZING();
  return ipc::discardHandle(__func__, handle);
}

orError_t orIpcMemHandleQuery(orIpcMemHandle_t handle) {
  OR_ENTER();
  return ipc::queryHandle(__func__, handle);
}

orError_t orIpcGetMemHandleInfo(orIpcMemHandleInfo* info, orIpcMemHandle_t handle) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(info);
  return ipc::describeHandle(__func__, handle, info);
}

}  // extern "C"
