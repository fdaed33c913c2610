// Every failing call sets the thread's message, naming the call and the parameter: none returns an
// error code while leaving an older failure's message in place. See Note [Error messages] in
// runtime/src/Runtime.h.
#include <functional>
#include <string>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

struct BadCall {
  const char* function;
  const char* parameter;  // what the message must name besides the function
  orError_t expected;
  std::function<orError_t()> call;
};

}  // namespace

TEST(ErrorMessage, EveryEarlyReturnNamesTheCallAndTheParameter) {
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 64));
  orEvent_t start, end;
  OR_OK(orEventCreate(&start));
  OR_OK(orEventCreate(&end));
  orStream_t stale;
  OR_OK(orStreamCreate(&stale));
  OR_OK(orStreamDestroy(stale));
  int host = 0;
  size_t size = 0;
  void* reserved = nullptr;
  const std::vector<BadCall> calls = {
      {"orGetDeviceCount", "count", orErrorInvalidValue, [] { return orGetDeviceCount(nullptr); }},
      {"orGetDevice", "device", orErrorInvalidValue, [] { return orGetDevice(nullptr); }},
      {"orGetDeviceProperties", "prop", orErrorInvalidValue,
       [] { return orGetDeviceProperties(nullptr, 0); }},
      {"orMemGetInfo", "free", orErrorInvalidValue, [&] { return orMemGetInfo(nullptr, &size); }},
      {"orGetSynchronizationCount", "count", orErrorInvalidValue,
       [] { return orGetSynchronizationCount(nullptr); }},
      {"orMemGetInfo", "total", orErrorInvalidValue, [&] { return orMemGetInfo(&size, nullptr); }},
      {"orDeviceGetDefaultStream", "stream", orErrorInvalidValue,
       [] { return orDeviceGetDefaultStream(0, nullptr); }},
      {"orRuntimeGetVersion", "version", orErrorInvalidValue,
       [] { return orRuntimeGetVersion(nullptr); }},
      {"orStreamCreate", "stream", orErrorInvalidValue, [] { return orStreamCreate(nullptr); }},
      {"orStreamCreateWithPriority", "stream", orErrorInvalidValue,
       [] { return orStreamCreateWithPriority(nullptr, 0, 0); }},
      {"orStreamGetPriority", "priority", orErrorInvalidValue,
       [] { return orStreamGetPriority(nullptr, nullptr); }},
      {"orStreamGetDevice", "device", orErrorInvalidValue,
       [] { return orStreamGetDevice(nullptr, nullptr); }},
      {"orEventCreate", "event", orErrorInvalidValue, [] { return orEventCreate(nullptr); }},
      {"orEventCreateWithFlags", "event", orErrorInvalidValue,
       [] { return orEventCreateWithFlags(nullptr, 0); }},
      {"orEventElapsedTime", "ms", orErrorInvalidValue,
       [&] { return orEventElapsedTime(nullptr, start, end); }},
      {"orMalloc", "devPtr", orErrorInvalidValue, [] { return orMalloc(nullptr, 16); }},
      {"orMallocHost", "ptr", orErrorInvalidValue, [] { return orMallocHost(nullptr, 16); }},
      {"orPointerGetAttributes", "attributes", orErrorInvalidValue,
       [&] { return orPointerGetAttributes(nullptr, dev); }},
      {"orGetKernelPointer", "kernelPtr", orErrorInvalidValue,
       [&] { return orGetKernelPointer(nullptr, dev); }},
      {"orMemGetAllocationGranularity", "granularity", orErrorInvalidValue,
       [] { return orMemGetAllocationGranularity(nullptr); }},
      {"orMemAddressReserve", "ptr", orErrorInvalidValue,
       [] { return orMemAddressReserve(nullptr, 2 << 20); }},
      {"orMemAddressReserve", "size", orErrorInvalidValue,
       [&] { return orMemAddressReserve(&reserved, 4096); }},
      {"orMemMap", "ptr", orErrorInvalidValue, [&] { return orMemMap(&host, 2 << 20); }},
      {"orMemUnmap", "size", orErrorInvalidValue, [&] { return orMemUnmap(dev, 0); }},
      {"orMemAddressFree", "ptr", orErrorInvalidValue,
       [&] { return orMemAddressFree(nullptr, 2 << 20); }},
      // Calls that forwarded to another entry point and reported under its name.
      {"orMemset", "range", orErrorInvalidValue, [&] { return orMemset(dev, 0, 65); }},
      {"orLaunchHostFunc", "stream", orErrorInvalidResourceHandle,
       [&] {
         return orLaunchHostFunc(
             stale, [](void*) {}, nullptr);
       }},
      {"orMemset", "devPtr", orErrorInvalidDevicePointer, [&] { return orMemset(&host, 0, 4); }},
  };
  for (const BadCall& c : calls) {
    SCOPED_TRACE(std::string(c.function) + " (" + c.parameter + ")");
    // Another failure first, so a stale message cannot pass for this call's.
    ASSERT_EQ(orSetDevice(-1), orErrorInvalidDevice);
    EXPECT_EQ(c.call(), c.expected);
    const std::string message = lastMessage();
    EXPECT_EQ(message.find(std::string("openreg: ") + c.function + ": "), 0u) << message;
    EXPECT_NE(message.find(c.parameter), std::string::npos) << message;
  }
  OR_OK(orEventDestroy(start));
  OR_OK(orEventDestroy(end));
  OR_OK(orFree(dev));
}
