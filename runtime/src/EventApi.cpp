// Entry points of runtime.h's "Events" section.
#include <openreg/runtime.h>

#include "Capture.h"
#include "Runtime.h"

using namespace openreg;

namespace {

Event* findEvent(orEvent_t handle) {
  return runtime().events.find(reinterpret_cast<std::uint64_t>(handle));
}

orError_t createEvent(const char* call, orEvent_t* event, unsigned int flags) {
  OR_ENTER();
  if (event == nullptr) return nullArgument(call, "event");
  constexpr unsigned kKnown = orEventDisableTiming | orEventDisableFailure;
  if ((flags & ~kKnown) != 0) {
    return fail(orErrorInvalidValue, call, "unknown flags " + std::to_string(flags));
  }
  auto created = std::make_shared<Event>(currentDevice(), (flags & orEventDisableTiming) == 0,
                                         (flags & orEventDisableFailure) == 0);
  const std::uint64_t handle = runtime().events.insert(std::move(created));
  if (handle == 0) {
    return fail(orErrorMemoryAllocation, call, "too many live events");
  }
  *event = reinterpret_cast<orEvent_t>(handle);
  return orSuccess;
}

}  // namespace

extern "C" {

orError_t orEventCreate(orEvent_t* event) {
  return createEvent(__func__, event, orEventDefault);
}

orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags) {
  return createEvent(__func__, event, flags);
}

// [marker: event-record]
orError_t orEventRecord(orEvent_t handle, orStream_t streamHandle) {
  OR_ENTER();
  Event* event = findEvent(handle);
  if (event == nullptr) return invalidEvent(__func__);
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) {
    return invalidStream(__func__);
  }
  if (stream->device() != event->device()) {
    return fail(orErrorInvalidResourceHandle, __func__,
                "the event belongs to device " + std::to_string(event->device()) +
                    " but the stream to device " + std::to_string(stream->device()) +
                    "; create the event while the stream's device is current");
  }
  if (orError_t e; captureEventRecord(reinterpret_cast<std::uint64_t>(handle), *stream, &e))
    return e;  // Note [Stream capture]
  StreamOp op;
  op.kind = StreamOp::Kind::Record;
  // Published only once queued (and so bound to its stream and ticket): a record the event
  // pointed at before that could be waited on by the very stream whose full queue
  // (Note [Bounded queues]) holds back its enqueue, a deadlock, and would have no stream yet.
  auto record = std::make_shared<EventRecord>(event->carriesFailure());
  op.record = record;
  stream->enqueue(std::move(op));
  event->publish(std::move(record));
  return orSuccess;
}

// [marker: event-record-host]
orError_t orEventRecordHost(orEvent_t handle) {
  OR_ENTER();
  Event* event = findEvent(handle);
  if (event == nullptr) return invalidEvent(__func__);
  if (!event->armHost()) {
    return fail(orErrorNotPermitted, __func__,
                "the event's previous host record is still pending; "
                "complete it with orEventCompleteHost first");
  }
  return orSuccess;
}

orError_t orEventCompleteHost(orEvent_t handle, const char* failureMessage) {
  OR_ENTER();
  Event* event = findEvent(handle);
  if (event == nullptr) return invalidEvent(__func__);
  std::shared_ptr<EventRecord> record = event->takeHost();
  if (record == nullptr) {
    return fail(orErrorNotPermitted, __func__,
                "the event has no pending host record; arm one "
                "with orEventRecordHost first");
  }
  FailureRef failure;
  if (failureMessage != nullptr) {
    failure = std::make_shared<const Failure>(std::string(failureMessage));
  }
  record->completeFromHost(std::move(failure));
  return orSuccess;
}

orError_t orEventQuery(orEvent_t handle) {
  OR_ENTER();
  Event* event = findEvent(handle);
  if (event == nullptr) return invalidEvent(__func__);
  if (orError_t e = checkEventNotCaptured(__func__, reinterpret_cast<std::uint64_t>(handle));
      e != orSuccess)
    return e;
  std::shared_ptr<EventRecord> record = event->latest();
  if (record == nullptr) return orSuccess;
  if (!record->done()) return orErrorNotReady;
  const FailureRef failure = record->failure();
  return failure != nullptr ? report(*failure) : orSuccess;
}

orError_t orEventSynchronize(orEvent_t handle) {
  OR_ENTER_SYNCHRONIZING();
  Event* event = findEvent(handle);
  if (event == nullptr) return invalidEvent(__func__);
  if (orError_t e = checkEventNotCaptured(__func__, reinterpret_cast<std::uint64_t>(handle));
      e != orSuccess)
    return e;
  if (orError_t e = checkCaptureSafe(__func__); e != orSuccess) return e;
  if (std::shared_ptr<EventRecord> record = event->latest()) {
    record->wait(waitPolicy());
    if (const FailureRef failure = record->failure()) return report(*failure);
  }
  return orSuccess;
}

orError_t orEventElapsedTime(float* ms, orEvent_t startHandle, orEvent_t endHandle) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(ms);
  Event* start = findEvent(startHandle);
  Event* end = findEvent(endHandle);
  if (start == nullptr || end == nullptr) return invalidEvent(__func__);
  if (!start->timing() || !end->timing()) {
    return fail(orErrorInvalidResourceHandle, __func__,
                "both events need timing (created without "
                "orEventDisableTiming)");
  }
  if (start->device() != end->device()) {
    return fail(orErrorInvalidResourceHandle, __func__, "the events belong to different devices");
  }
  std::shared_ptr<EventRecord> a = start->latest();
  std::shared_ptr<EventRecord> b = end->latest();
  if (a == nullptr || b == nullptr) {
    return fail(orErrorInvalidResourceHandle, __func__, "both events must have been recorded");
  }
  if (!a->done() || !b->done()) return orErrorNotReady;
  *ms = static_cast<float>(static_cast<double>(b->timeNs() - a->timeNs()) / 1e6);
  return orSuccess;
}

orError_t orEventDestroy(orEvent_t handle) {
  OR_ENTER();
  std::shared_ptr<Event> event = runtime().events.erase(reinterpret_cast<std::uint64_t>(handle));
  if (event == nullptr) return invalidEvent(__func__);
  // Nobody can complete a pending host record any more: fail it rather than leave its waiting
  // streams parked for ever (Note [Host-completed records]).
  if (std::shared_ptr<EventRecord> record = event->takeHost()) {
    record->completeFromHost(std::make_shared<const Failure>(
        OR_DEVICE_NAME ": an event was destroyed before the host completed its host record"));
  }
  return orSuccess;
}

}  // extern "C"
