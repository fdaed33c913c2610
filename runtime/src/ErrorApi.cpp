// Entry points of runtime.h's "Errors" section: the names and descriptions of error codes, the
// thread's last error, initialization and the version.
#include <openreg/runtime.h>

#include "Runtime.h"

#define OPENREG_ERROR_LIST(X)                                                                  \
  X(orSuccess, "no error")                                                                     \
  X(orErrorNotReady, "work is still pending on the device")                                    \
  X(orErrorMemoryAllocation, "out of memory: the device (or host) cannot hold the allocation") \
  X(orErrorInvalidValue, "an argument is out of range, null, or inconsistent")                 \
  X(orErrorInvalidDevice, "invalid device index")                                              \
  X(orErrorInvalidResourceHandle,                                                              \
    "invalid stream or event handle (destroyed, or of another device)")                        \
  X(orErrorInvalidDevicePointer, "not a live device allocation")                               \
  X(orErrorInvalidMemcpyDirection, "the pointers do not match the copy kind")                  \
  X(orErrorInitializationError, "the runtime cannot be initialized in this process")           \
  X(orErrorLaunchFailure, "a task on a stream failed")                                         \
  X(orErrorNotPermitted, "operation not permitted on this object")                             \
  X(orErrorStreamCaptureUnsupported,                                                           \
    "the call conflicts with a stream capture in progress, which it invalidated")              \
  X(orErrorStreamCaptureInvalidated, "the stream capture was invalidated")                     \
  X(orErrorOutOfResources,                                                                     \
    "the system refused a resource other than device capacity (file descriptors, mappings)")

extern "C" {

const char* orGetErrorName(orError_t error) {
  switch (error) {
#define OPENREG_NAME_CASE(code, text) \
  case code:                          \
    return #code;
    OPENREG_ERROR_LIST(OPENREG_NAME_CASE)
#undef OPENREG_NAME_CASE
  }
  return "orErrorUnknownCode";
}

const char* orGetErrorString(orError_t error) {
  switch (error) {
#define OPENREG_STRING_CASE(code, text) \
  case code:                            \
    return text;
    OPENREG_ERROR_LIST(OPENREG_STRING_CASE)
#undef OPENREG_STRING_CASE
  }
  return "unknown error code";
}

const char* orGetLastErrorMessage(void) {
  return openreg::lastErrorMessage();
}

orError_t orGetLastErrorCategory(int* category) {
  OR_REQUIRE_NOT_NULL(category);
  *category = openreg::lastFailureCategory();
  return orSuccess;
}

orError_t orInit(unsigned int flags) {
  OR_ENTER();
  return flags == 0 ? orSuccess : openreg::fail(orErrorInvalidValue, __func__, "flags must be 0");
}

orError_t orRuntimeGetVersion(int* version) {
  OR_REQUIRE_NOT_NULL(version);
  *version = OPENREG_RUNTIME_VERSION;
  return orSuccess;
}

}  // extern "C"
