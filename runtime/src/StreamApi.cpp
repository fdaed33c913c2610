// Stream entry points and the kernel launch.
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

// [marker: launch]
// The one launch path, for orLaunchTask and orLaunchHostFunc; `call` names the entry point. `op`
// holds the task, already the runtime's: on error it is destroyed without running.
// With `wait`, returns once the task has run (openreg::launchAndWait).
orError_t launchOn(const char* call, orStream_t handle, StreamOp&& op, bool wait = false) {
  OR_ENTER();
  if (wait && onDeviceWorker()) return synchronizingInTask(call);
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(call);
  return launchOp(*stream, std::move(op), wait);
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

// [marker: launch-task]
// Note [Tasks across the C ABI] in runtime.h. The object moves once, from the caller's storage
// into the queued operation (no allocation), as it did when the C++ Task itself was passed.
orError_t orLaunchTask(orStream_t stream, const orTaskOps* ops, void* task, size_t size,
                       unsigned int flags) {
  // No OR_ENTER here: the object is the runtime's once these checks pass, whatever comes after.
  OR_REQUIRE_NOT_NULL(ops);
  OR_REQUIRE_NOT_NULL(task);
  if (ops->run == nullptr || ops->relocate == nullptr || ops->destroy == nullptr) {
    return fail(orErrorInvalidValue, __func__,
                "ops->run, ops->relocate and ops->destroy are required");
  }
  // From here on the object is the runtime's (runtime.h): destroyed in place if it cannot be taken.
  if (size == 0 || size > OR_TASK_INLINE_BYTES) {
    ops->destroy(task);
    return fail(orErrorInvalidValue, __func__,
                "size must be 1.." + std::to_string(OR_TASK_INLINE_BYTES) + " bytes, not " +
                    std::to_string(size));
  }
  if ((flags & ~static_cast<unsigned>(orLaunchTaskWait)) != 0) {
    ops->destroy(task);
    return fail(orErrorInvalidValue, __func__, "unknown flags");
  }
  StreamOp op;
  op.task.adopt(ops, task);
  return launchOn(__func__, stream, std::move(op), (flags & orLaunchTaskWait) != 0);
}

}  // extern "C"
