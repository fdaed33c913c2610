#include "Runtime.h"

#include <pthread.h>

#include <algorithm>

#include "Activity.h"
#include "Capture.h"
#include "FaultHandler.h"
#include "OpenMpThreads.h"

namespace openreg {
namespace detail {

std::atomic<State> gState{State::Uninitialized};
Runtime* gRuntime = nullptr;

namespace {

std::mutex gInitMutex;
std::string gInitError;  // guarded by gInitMutex

// See Note [Runtime initialization]. Holding gInitMutex across fork() keeps the child from
// inheriting it locked.
void atforkPrepare() {
  gInitMutex.lock();
}
void atforkParent() {
  gInitMutex.unlock();
}
void atforkChild() {
  gInitMutex.unlock();
  if (gState.load(std::memory_order_relaxed) == State::Ready) {
    gState.store(State::ForkedChild, std::memory_order_release);
  }
}

// [marker: create-devices]
// All or nothing, see Note [Runtime initialization]: every device's memory is mapped before any
// worker starts, and on a failure the devices set up so far are destroyed (~DeviceMemory unmaps,
// ~Executor joins), so nothing is left behind.
std::string createDevices(Runtime& rt) {
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < rt.config.deviceCount; ++i) {
    auto d = std::make_unique<Device>();
    d->index = i;
    if (std::string error = d->memory.map(i, rt.config.deviceMemory); !error.empty()) {
      return OR_DEVICE_NAME ": cannot set up device " + std::to_string(i) + ": " + error;
    }
    devices.push_back(std::move(d));
  }
  try {
    for (auto& d : devices) {
      d->executor = std::make_unique<Executor>(d->index, rt.config.streamWorkers, waitPolicy());
    }
  } catch (const std::exception& e) {
    return std::string(OR_DEVICE_NAME ": cannot start the device workers: ") + e.what() +
           " (lower OPENREG_STREAM_WORKERS or OPENREG_DEVICE_COUNT)";
  }
  for (auto& d : devices) {
    d->defaultStream =
        std::make_shared<Stream>(d->index, 0, /*isDefault=*/true, *d->executor, streamLimits());
    d->defaultStream->setHandle(rt.streams.insert(d->defaultStream));
    d->streams.push_back(d->defaultStream);
    rt.devices.push_back(std::move(d));
  }
  return {};
}

}  // namespace

orError_t initializeSlow(State wanted) {
  std::lock_guard<std::mutex> lock(gInitMutex);
  switch (gState.load(std::memory_order_acquire)) {
    case State::Ready:
      return orSuccess;
    case State::Failed:
      return fail(orErrorInitializationError, gInitError);
    case State::ForkedChild:
      if (wanted == State::Configured) return orSuccess;
      return fail(orErrorInitializationError, OR_DEVICE_NAME
                  ": cannot re-initialize the runtime in a forked subprocess: it was "
                  "initialized in the parent, whose device workers the child does not have. Use "
                  "the 'spawn' start method to use openreg devices in a subprocess.");
    case State::Uninitialized: {
      static bool atforkRegistered = false;
      if (!atforkRegistered) {
        pthread_atfork(atforkPrepare, atforkParent, atforkChild);
        atforkRegistered = true;
      }
      // Never freed (see Note [Runtime initialization]), even when a later step fails: a thread
      // that saw the configured state may still be reading the configuration.
      gRuntime = new Runtime();
      gInitError = readConfigFromEnvironment(gRuntime->config);
      if (!gInitError.empty()) {
        gState.store(State::Failed, std::memory_order_release);
        return fail(orErrorInitializationError, gInitError);
      }
      gState.store(State::Configured, std::memory_order_release);
      if (wanted == State::Configured) return orSuccess;
      break;
    }
    case State::Configured:
      if (wanted == State::Configured) return orSuccess;
      break;
  }
  gInitError = createDevices(*gRuntime);
  if (!gInitError.empty()) {
    gState.store(State::Failed, std::memory_order_release);
    return fail(orErrorInitializationError, gInitError);
  }
  if (gRuntime->config.faultHandler) installFaultHandler();
  registerOpenregProcess();  // Note [OpenMP threads on shared cores]
  gState.store(State::Ready, std::memory_order_release);
  return orSuccess;
}

}  // namespace detail

namespace {
thread_local std::string tLastError;
thread_local int tLastCategory = 0;
}  // namespace

orError_t fail(orError_t error, std::string message) {
  tLastError = std::move(message);
  tLastCategory = 0;
  return error;
}

orError_t fail(orError_t error, const char* call, std::string_view what) {
  return fail(error, callMessage(call, what));
}

orError_t report(const Failure& failure) {
  failure.reported.store(true, std::memory_order_release);  // Note [Task errors] in Stream.cpp
  tLastError = failure.message;
  tLastCategory = failure.category;
  return orErrorLaunchFailure;
}

orError_t nullArgument(const char* call, const char* parameter) {
  return fail(orErrorInvalidValue, call, std::string(parameter) + " is NULL");
}

orError_t synchronizingInTask(const char* call) {
  return fail(orErrorNotPermitted, call,
              "synchronizing calls are forbidden inside a task (a function running on a "
              "device worker): it would wait for work queued behind the task itself. Make the "
              "call from the host, or use the asynchronous form (orMemcpyAsync with pinned "
              "memory, orMemsetAsync, orStreamWaitEvent).");
}

SavedThreadState::SavedThreadState()
    : error_(tLastError), category_(tLastCategory), device_(currentDeviceSlot()) {}

SavedThreadState::~SavedThreadState() {
  tLastError = std::move(error_);
  tLastCategory = category_;
  currentDeviceSlot() = device_;
}

const char* lastErrorMessage() {
  return tLastError.c_str();
}

int lastFailureCategory() {
  return tLastCategory;
}

int& currentDeviceSlot() {
  thread_local int current = 0;
  return current;
}

Device* deviceOfPointer(const void* p) {
  for (auto& d : runtime().devices) {
    if (d->memory.contains(p)) return d.get();
  }
  return nullptr;
}

Stream* resolveStream(orStream_t handle) {
  if (handle == nullptr) return device(currentDevice()).defaultStream.get();
  return runtime().streams.find(reinterpret_cast<std::uint64_t>(handle));
}

orError_t invalidStream(const char* call) {
  return fail(orErrorInvalidResourceHandle, call,
              "the stream handle is not live (destroyed, or "
              "never created)");
}

orError_t invalidDevice(const char* call, int index) {
  return fail(orErrorInvalidDevice, call,
              "invalid device index " + std::to_string(index) + ": there are " +
                  std::to_string(deviceCount()) + " devices (set OPENREG_DEVICE_COUNT for more)");
}

orError_t invalidEvent(const char* call) {
  return fail(orErrorInvalidResourceHandle, call,
              "the event handle is not live (destroyed, or "
              "never created)");
}

// [marker: launch]
// The one launch path, for orLaunchTask and orLaunchHostFunc; `call` names the entry point. `op`
// holds the task, already the runtime's: on error it is destroyed without running.
// With `wait`, returns once the task has run (openreg::launchAndWait).
orError_t launchOn(const char* call, orStream_t handle, StreamOp&& op, bool wait) {
  OR_ENTER();
  if (wait && onDeviceWorker()) return synchronizingInTask(call);
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(call);
  return launchOp(*stream, std::move(op), wait);
}

// [marker: launch-op]
orError_t launchOp(Stream& stream, StreamOp&& op, bool mustComplete) {
  if (orError_t e; captureOp(stream, op, mustComplete, &e)) return e;  // Note [Stream capture]
  if (recordingActivity()) wrapForActivity(stream, op);                // Note [Task activity]
  // A blocking launch from inside a task would wait for its own stream: see Note [Synchronizing
  // inside a task]. Callers that must complete are refused before they get here.
  if (!mustComplete && (!runtime().config.launchBlocking || onDeviceWorker())) {
    stream.enqueue(std::move(op));
    return orSuccess;
  }
  FailureRef own;  // the caller waits, so the worker may write it
  op.outcome = &own;
  stream.waitFor(stream.enqueue(std::move(op)));
  return stream.takeError(own);
}

void pruneStreamsLocked(Device& d) {
  auto& s = d.streams;
  s.erase(
      std::remove_if(s.begin(), s.end(),
                     [](const std::shared_ptr<Stream>& x) { return x->destroyed() && x->idle(); }),
      s.end());
}

namespace {
std::vector<std::shared_ptr<Stream>> liveStreams(Device& d) {
  std::lock_guard<std::mutex> lock(d.streamsMutex);
  pruneStreamsLocked(d);
  return d.streams;
}
}  // namespace

orError_t synchronizeDevice(Device& d) {
  orError_t result = orSuccess;
  for (auto& s : liveStreams(d)) {
    s->waitFor(s->submitted());
    if (orError_t e = s->takeError(); e != orSuccess && result == orSuccess) result = e;
  }
  return result;
}

void waitForAllDevices() {
  for (auto& d : runtime().devices) {
    for (auto& s : liveStreams(*d)) s->waitFor(s->submitted());
  }
}

}  // namespace openreg
