// The runtime's global state: configuration, devices, handle tables, per-thread state, and the
// entry check every API function starts with.
//
// Note [Runtime initialization]
// The runtime initializes lazily and in two steps, under a mutex (not std::call_once, which
// cannot be reset in a forked child):
//  1. configured: the environment is read, once. Enough for device queries (count, current
//     device, properties, priority range), which therefore start no thread and map no memory.
//  2. ready: each device's address space, workers and default stream exist. Every call that
//     touches memory, streams or events gets here first.
// Devices, their workers and the tables are never destroyed: worker threads may still run at
// exit, and tearing them down from a static destructor would race with them. The exception is a
// failed step 2, which undoes itself: every device's memory is mapped before any worker starts,
// and a failure unmaps what was mapped (and joins workers already started), so it leaves no
// thread, mapping or file behind. Step 1 also rejects a configuration whose devices cannot fit
// in the address space, so such a failure shows in the first device query, before any set-up.
// After a failure every call, device queries included, returns orErrorInitializationError with
// the reason, and the PyTorch layer's device_count(), asked after the failure, says 0.
// A child forked after step 2 inherits the memory but not the worker threads, so every call in it
// that needs step 2 returns orErrorInitializationError with a message saying to use spawn; device
// queries keep working, as torch.cuda.device_count() does in such a child. A child forked before
// step 2 initializes normally, so asking how many devices there are never poisons fork.
#pragma once

#include <openreg/runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "Config.h"
#include "DeviceMemory.h"
#include "Event.h"
#include "Executor.h"
#include "HandleTable.h"
#include "Messages.h"
#include "Stream.h"

namespace openreg {

struct Device {
  int index = 0;
  DeviceMemory memory;
  std::unique_ptr<Executor> executor;
  std::shared_ptr<Stream> defaultStream;

  // Streams that may still have work: live handles plus destroyed ones not yet drained. Device
  // synchronization walks this list.
  std::mutex streamsMutex;
  std::vector<std::shared_ptr<Stream>> streams;  // guarded by streamsMutex
};

struct Runtime {
  Config config;
  std::vector<std::unique_ptr<Device>> devices;
  HandleTable<Stream> streams;
  HandleTable<Event> events;
};

namespace detail {
enum class State : int { Uninitialized, Configured, Ready, Failed, ForkedChild };
extern std::atomic<State> gState;
extern Runtime* gRuntime;
orError_t initializeSlow(State wanted);
}  // namespace detail

// Step 1 of Note [Runtime initialization]: the configuration is read; runtime().config is valid.
inline orError_t ensureConfigured() {
  const detail::State state = detail::gState.load(std::memory_order_acquire);
  if (state == detail::State::Ready || state == detail::State::Configured ||
      state == detail::State::ForkedChild) {
    return orSuccess;
  }
  return detail::initializeSlow(detail::State::Configured);
}

// Step 2: devices exist; returns orSuccess when the runtime is usable.
inline orError_t ensureInitialized() {
  if (detail::gState.load(std::memory_order_acquire) == detail::State::Ready) return orSuccess;
  return detail::initializeSlow(detail::State::Ready);
}

// Valid after ensureConfigured() returned orSuccess.
inline Runtime& runtime() {
  return *detail::gRuntime;
}
inline int deviceCount() {
  return runtime().config.deviceCount;
}
// Valid after ensureInitialized() returned orSuccess.
inline Device& device(int index) {
  return *runtime().devices[index];
}

// How workers wait for work and host threads for the device (valid after ensureConfigured()).
inline WaitPolicy waitPolicy() {
  const Config& c = runtime().config;
  using Release = Config::OpenmpRelease;
  return {c.workerSpinMicros, c.openmpRelease == Release::Never ? -1 : c.openmpReleaseMicros,
          c.openmpRelease == Release::WhenAlone};
}

// What a new stream takes of the configuration (valid after ensureConfigured()).
inline StreamLimits streamLimits() {
  return {runtime().config.queueDepth, waitPolicy()};
}

// The calling thread's current device.
int& currentDeviceSlot();
inline int currentDevice() {
  return currentDeviceSlot();
}

// The device whose range contains `p`, or nullptr. O(device count), lock-free.
Device* deviceOfPointer(const void* p);

// Note [Error messages]
// orGetLastErrorMessage() must describe the call that just failed, never an older one, so every
// error an API function returns goes through fail(), which sets the thread's message. A bare
// `return orErrorInvalidValue;` would leave the previous failure's text in place, and the caller
// would read a wrong explanation. Messages of argument errors start with "openreg: <function>: "
// (written by callMessage in Messages.h, never by hand) and name the parameter; two kinds carry
// someone else's words instead: orErrorLaunchFailure the failed task's (Note [Task errors] in
// Stream.cpp) and orErrorInitializationError the configuration's. The null-pointer checks use
// OR_REQUIRE_NOT_NULL, which names both for us.
// ErrorMessage.EveryEarlyReturnNamesTheCallAndTheParameter and the fuzzer (runtime/tests/Fuzz.cpp)
// check the rule.

// [marker: fail]
// Sets the calling thread's last-error message and returns `error`.
orError_t fail(orError_t error, std::string message);
// The same with the message of an error of API function `call`, callMessage(call, what).
orError_t fail(orError_t error, const char* call, std::string_view what);
// A NULL pointer argument: orErrorInvalidValue, "openreg: <call>: <parameter> is NULL".
orError_t nullArgument(const char* call, const char* parameter);
// The calling thread's last-error message ("" if none).
const char* lastErrorMessage();
// The category of the failed task that message describes (orTaskFail), else 0.
int lastFailureCategory();
// orErrorNotPermitted for a synchronizing `call` made inside a task.
orError_t synchronizingInTask(const char* call);

// The calling thread's state that a task may change (its last error, its current device), kept
// and put back around tasks a host thread runs itself (Note [A waiting host runs the queued
// tasks] in Stream.cpp): a task's own calls must not change what the host's next call reads.
class SavedThreadState {
 public:
  SavedThreadState();
  ~SavedThreadState();
  SavedThreadState(const SavedThreadState&) = delete;
  SavedThreadState& operator=(const SavedThreadState&) = delete;

 private:
  std::string error_;
  int category_;
  int device_;
};

// Resolves a stream handle (0: the current device's default stream). nullptr if not live.
Stream* resolveStream(orStream_t handle);

// orErrorInvalidDevice for a device index out of range, naming the API call.
orError_t invalidDevice(const char* call, int index);
// The error for a stream handle that is not live, naming the API call.
orError_t invalidStream(const char* call);
// The same for an event handle.
orError_t invalidEvent(const char* call);

// orLaunchTask and orLaunchHostFunc: initializes, resolves the stream `handle` and hands `op` to
// launchOp; with `wait` (not from inside a task), returns once the task has run.
orError_t launchOn(const char* call, orStream_t handle, StreamOp&& op, bool wait = false);

// Every launch-like call (task, copy, memset) enqueues its operation here: returns at once,
// unless `mustComplete` or OPENREG_LAUNCH_BLOCKING asks for completion, in which case it waits and
// returns the operation's own failure, or else the stream's pending one.
orError_t launchOp(Stream& stream, StreamOp&& op, bool mustComplete = false);

// Synchronizes every stream of `d`, returning the first pending task error.
orError_t synchronizeDevice(Device& d);
// Waits for every stream of every device, leaving task errors pending (frees).
void waitForAllDevices();

// Drops destroyed streams that have drained from d.streams. Caller holds d.streamsMutex.
void pruneStreamsLocked(Device& d);

// Device queries begin with this: configuration only, see Note [Runtime initialization].
#define OR_ENTER_CONFIGURED()                                           \
  do {                                                                  \
    if (const orError_t or_enter_error = ::openreg::ensureConfigured(); \
        or_enter_error != orSuccess)                                    \
      return or_enter_error;                                            \
  } while (0)

// Every other API function begins with this.
#define OR_ENTER()                                                       \
  do {                                                                   \
    if (const orError_t or_enter_error = ::openreg::ensureInitialized(); \
        or_enter_error != orSuccess)                                     \
      return or_enter_error;                                             \
  } while (0)

// Synchronizing API functions begin with this instead of OR_ENTER: they are refused inside a
// task, see Note [Synchronizing inside a task] in Executor.h.
#define OR_ENTER_SYNCHRONIZING()                                                      \
  do {                                                                                \
    OR_ENTER();                                                                       \
    if (::openreg::onDeviceWorker()) return ::openreg::synchronizingInTask(__func__); \
  } while (0)

// A pointer argument must not be NULL; see Note [Error messages]. In an API function, __func__
// is the function's C name.
#define OR_REQUIRE_NOT_NULL(parameter)                                                \
  do {                                                                                \
    if ((parameter) == nullptr) return ::openreg::nullArgument(__func__, #parameter); \
  } while (0)

}  // namespace openreg
