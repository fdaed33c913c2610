// Stream capture: the hooks the entry points call while some stream captures a graph.
//
// Note [Stream capture]
// Capture lives beside the stream, not in it: a table (Capture.cpp) maps each capturing stream to
// its capture, and the entry points that enqueue or synchronize ask it first. While no capture is
// in progress every hook is one relaxed load of gActiveCaptures, so the launch path pays nothing
// for graphs it does not use.
// What is recorded: every StreamOp a launch, copy or memset would have enqueued (launchOp), in
// host order across all the capture's streams, plus markers for event records and waits. A
// stream joins a capture by waiting on an event recorded in it (a fork); each stream keeps a
// vector clock of how much of every member stream's work it has waited for, so orStreamEndCapture
// can tell whether every fork was joined back to the origin.
// Host order is a valid order to run the graph in: an operation is issued after everything it
// depends on (its stream's earlier work, and the record its wait refers to, which had to be
// issued before the wait could name it). So the executable graph is the list of tasks in capture
// order, run one after the other (Graph.cpp); records and waits inside it have nothing left to
// order and vanish.
// A call that cannot be recorded invalidates the capture (orErrorStreamCaptureUnsupported): the
// capture goes on collecting nothing, every later operation on its streams fails with
// orErrorStreamCaptureInvalidated, and orStreamEndCapture reports the first error and releases
// the streams, so the device is usable again once the capture is ended.
#pragma once

#include <openreg/runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "Stream.h"

namespace openreg {

// The number of captures in progress (any device, any thread).
extern std::atomic<int> gActiveCaptures;

namespace detail {
bool captureOpSlow(Stream& stream, StreamOp& op, bool mustComplete, orError_t* error);
bool captureEventRecordSlow(std::uint64_t event, Stream& stream, orError_t* error);
bool captureEventWaitSlow(Stream& stream, std::uint64_t event, bool pending, orError_t* error);
orError_t checkCaptureSafeSlow(const char* call);
orError_t checkStreamNotCapturingSlow(const char* call, Stream& stream);
orError_t checkEventNotCapturedSlow(const char* call, std::uint64_t event);
}  // namespace detail

// launchOp: true when `op` belongs to a capture (recorded, or refused: *error says which); false
// when it must be enqueued as usual.
inline bool captureOp(Stream& stream, StreamOp& op, bool mustComplete, orError_t* error) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return false;
  return detail::captureOpSlow(stream, op, mustComplete, error);
}

// orEventRecord: true when `stream` captures (the record is a marker of the capture, nothing is
// enqueued). Otherwise the event's earlier captured record, if any, is forgotten.
inline bool captureEventRecord(std::uint64_t event, Stream& stream, orError_t* error) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return false;
  return detail::captureEventRecordSlow(event, stream, error);
}

// orStreamWaitEvent: true when the wait belongs to a capture (recorded, a fork, or refused).
// `pending`: the event's latest enqueued record has not completed.
inline bool captureEventWait(Stream& stream, std::uint64_t event, bool pending, orError_t* error) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return false;
  return detail::captureEventWaitSlow(stream, event, pending, error);
}

// The synchronizing calls the strict capture modes forbid (orDeviceSynchronize, orEventSynchronize,
// orMemcpy, orMemset, orFree, orFreeHost): orErrorStreamCaptureUnsupported when `call` would break
// a capture in progress, which it invalidates.
inline orError_t checkCaptureSafe(const char* call) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return orSuccess;
  return detail::checkCaptureSafeSlow(call);
}

// orStreamSynchronize, orStreamQuery: never on a capturing stream.
inline orError_t checkStreamNotCapturing(const char* call, Stream& stream) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return orSuccess;
  return detail::checkStreamNotCapturingSlow(call, stream);
}

// orEventQuery, orEventSynchronize: never on an event whose latest record is in a capture.
inline orError_t checkEventNotCaptured(const char* call, std::uint64_t event) {
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return orSuccess;
  return detail::checkEventNotCapturedSlow(call, event);
}

// orStreamBeginCapture: `stream` begins a capture in `mode` (checked by the caller);
// orErrorNotPermitted, naming `call`, if it already belongs to one.
orError_t beginCapture(const char* call, Stream& stream, orStreamCaptureMode mode);

// orStreamEndCapture: ends the capture `stream` began, releasing its streams, and registers its
// graph into *graph (left as the caller set it on error). The errors of orStreamEndCapture, naming
// `call`.
orError_t endCapture(const char* call, Stream& stream, orGraph_t* graph);

// orStreamGetCaptureInfo: the capture status of `stream` and, if `id` is not NULL, its capture's id
// (0 when none).
void captureInfo(const Stream& stream, orStreamCaptureStatus* status, unsigned long long* id);

// What orStreamEndCapture hands to the graph: the captured operations in host order.
struct CapturedOp {
  enum class Kind : std::uint8_t { Task, Record, Wait };
  Kind kind = Kind::Task;
  int stream = 0;  // index among the capture's streams, 0 the origin
  Task task;       // Kind::Task
  int peer = -1;   // Kind::Wait: the stream whose record it waits on
};

}  // namespace openreg
