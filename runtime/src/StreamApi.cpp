// Entry points of runtime.h's "Streams" section: creating, querying, synchronizing and
// destroying streams, waiting on events, and the host-function launch.
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <algorithm>
#include <string>

#include "Capture.h"
#include "Runtime.h"

using namespace openreg;

namespace {

orError_t createStream(const char* call, orStream_t* out, int priority) {
  if (out == nullptr) return nullArgument(call, "stream");
  Device& d = device(currentDevice());
  priority = std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority);
  auto stream =
      std::make_shared<Stream>(d.index, priority, /*isDefault=*/false, *d.executor, streamLimits());
  const std::uint64_t handle = runtime().streams.insert(stream);
  if (handle == 0) {
    return fail(orErrorMemoryAllocation, call, "too many live streams");
  }
  stream->setHandle(handle);
  {
    std::lock_guard<std::mutex> lock(d.streamsMutex);
    pruneStreamsLocked(d);
    d.streams.push_back(std::move(stream));
  }
  *out = reinterpret_cast<orStream_t>(handle);
  return orSuccess;
}

}  // namespace

extern "C" {

orError_t orStreamCreate(orStream_t* stream) {
  OR_ENTER();
  return createStream(__func__, stream, kLeastStreamPriority);
}

orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags, int priority) {
  OR_ENTER();
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  return createStream(__func__, stream, priority);
}

orError_t orStreamGetPriority(orStream_t handle, int* priority) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(priority);
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  *priority = stream->priority();
  return orSuccess;
}

orError_t orDeviceGetDefaultStream(int index, orStream_t* stream) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(stream);
  if (index < 0 || index >= deviceCount()) return invalidDevice(__func__, index);
  *stream = reinterpret_cast<orStream_t>(device(index).defaultStream->handle());
  return orSuccess;
}

orError_t orStreamGetDevice(orStream_t handle, int* device) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(device);
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  *device = stream->device();
  return orSuccess;
}

orError_t orStreamDestroy(orStream_t handle) {
  OR_ENTER();
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  if (orError_t e = checkStreamNotCapturing(__func__, *stream); e != orSuccess) return e;
  if (stream->isDefault()) {
    return fail(orErrorNotPermitted, __func__, "a default stream cannot be destroyed");
  }
  std::shared_ptr<Stream> owned = runtime().streams.erase(reinterpret_cast<std::uint64_t>(handle));
  if (owned == nullptr) return invalidStream(__func__);  // lost a race with another destroy
  owned->markDestroyed();
  return orSuccess;
}

orError_t orStreamQuery(orStream_t handle) {
  OR_ENTER();
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  if (orError_t e = checkStreamNotCapturing(__func__, *stream); e != orSuccess) return e;
  if (!stream->idle()) return orErrorNotReady;
  return stream->takeError();
}

orError_t orStreamSynchronize(orStream_t handle) {
  OR_ENTER_SYNCHRONIZING();
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  if (orError_t e = checkStreamNotCapturing(__func__, *stream); e != orSuccess) return e;
  stream->waitFor(stream->submitted());
  return stream->takeError();
}

orError_t orStreamWaitEvent(orStream_t handle, orEvent_t eventHandle, unsigned int flags) {
  OR_ENTER();
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  Event* event = runtime().events.find(reinterpret_cast<std::uint64_t>(eventHandle));
  if (event == nullptr) {
    return invalidEvent(__func__);
  }
  std::shared_ptr<EventRecord> record = event->latest();
  if (orError_t e; captureEventWait(*stream, reinterpret_cast<std::uint64_t>(eventHandle),
                                    record != nullptr && !record->done(), &e))
    return e;                                                 // Note [Stream capture]
  if (record == nullptr || record->done()) return orSuccess;  // nothing to wait for
  StreamOp op;
  op.kind = StreamOp::Kind::Wait;
  op.record = std::move(record);
  stream->enqueue(std::move(op));
  return orSuccess;
}

orError_t orLaunchHostFunc(orStream_t stream, void (*fn)(void*), void* arg) {
  if (fn == nullptr) {
    OR_ENTER();
    return fail(orErrorInvalidValue, __func__, "fn is NULL");
  }
  StreamOp op;
  op.task = Task([fn, arg] { fn(arg); });
  return launchOn(__func__, stream, std::move(op));
}

}  // extern "C"
