// Stream capture: the capture table, the hooks of Capture.h, and beginning, ending and asking
// about a capture (for GraphApi.cpp). See Note [Stream capture] in Capture.h.
#include "Capture.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "Graph.h"
#include "Runtime.h"

namespace openreg {

std::atomic<int> gActiveCaptures{0};

namespace {

struct Capture {
  std::uint64_t id = 0;
  int device = 0;
  orStreamCaptureMode mode = orStreamCaptureModeGlobal;
  std::thread::id thread;                        // the thread that began it
  std::vector<std::shared_ptr<Stream>> streams;  // [0] the origin, then the forked ones
  // clocks[i][j]: how many of stream j's captured operations stream i has waited for (its own
  // count at j == i). The origin has joined stream j when clocks[0][j] == clocks[j][j].
  std::vector<std::vector<std::uint64_t>> clocks;
  std::vector<CapturedOp> ops;
  std::string invalid;                // the first error that invalidated it; empty while valid
  std::vector<std::uint64_t> events;  // events whose latest record is one of its markers
};

// An event recorded in a capture: where, and what its stream had waited for at that point.
struct Marker {
  Capture* capture = nullptr;
  int stream = 0;
  std::vector<std::uint64_t> clock;
};

// Immortal, as the runtime's other tables (Note [Runtime initialization]): a capture may be in
// progress while static destructors run.
struct CaptureTable {
  std::mutex mutex;
  std::vector<std::unique_ptr<Capture>> captures;       // in progress
  std::unordered_map<const Stream*, Capture*> members;  // stream -> its capture
  std::unordered_map<std::uint64_t, Marker> markers;    // event handle -> captured record
  std::uint64_t nextId = 1;
};

CaptureTable& table() {
  static auto* t = new CaptureTable();
  return *t;
}

Capture* captureOf(CaptureTable& t, const Stream& stream) {
  auto it = t.members.find(&stream);
  return it == t.members.end() ? nullptr : it->second;
}

int indexOf(const Capture& c, const Stream& stream) {
  for (std::size_t i = 0; i < c.streams.size(); ++i)
    if (c.streams[i].get() == &stream) return static_cast<int>(i);
  return -1;
}

// Invalidates `c` (keeping the first reason) and returns orErrorStreamCaptureUnsupported with
// `message`. The recorded operations are dropped at the end of the capture.
orError_t invalidate(Capture& c, std::string message) {
  if (c.invalid.empty()) c.invalid = message;
  return fail(orErrorStreamCaptureUnsupported,
              message + " The capture is invalidated: end it (orStreamEndCapture).");
}

orError_t invalidated(const Capture& c) {
  return fail(orErrorStreamCaptureInvalidated,
              OR_DEVICE_NAME ": the stream belongs to a capture an earlier error invalidated (" +
                  c.invalid + "); end the capture (orStreamEndCapture) before using the stream");
}

void append(Capture& c, int stream, CapturedOp&& op) {
  op.stream = stream;
  c.ops.push_back(std::move(op));
  ++c.clocks[stream][stream];
}

// Adds `stream` to `c` (a fork); its index.
int join(Capture& c, CaptureTable& t, Stream& stream) {
  c.streams.push_back(stream.shared_from_this());
  for (auto& row : c.clocks) row.push_back(0);
  c.clocks.emplace_back(c.streams.size(), 0);
  t.members[&stream] = &c;
  return static_cast<int>(c.streams.size()) - 1;
}

}  // namespace

namespace detail {

// [marker: capture-op]
bool captureOpSlow(Stream& stream, StreamOp& op, bool mustComplete, orError_t* error) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Capture* c = captureOf(t, stream);
  if (c == nullptr) return false;
  if (!c->invalid.empty()) {
    *error = invalidated(*c);
  } else if (mustComplete) {
    *error = invalidate(
        *c, OR_DEVICE_NAME
        ": an operation that must complete before its call returns (a copy to or from "
        "pageable host memory, a synchronous copy or memset, a blocking launch) was issued to a "
        "stream that captures a graph, which cannot wait for it. Use pinned host memory "
        "(orMallocHost) or move the operation out of the capture.");
  } else {
    CapturedOp captured;
    captured.task = std::move(op.task);
    append(*c, indexOf(*c, stream), std::move(captured));
    *error = orSuccess;
  }
  return true;
}

bool captureEventRecordSlow(std::uint64_t event, Stream& stream, orError_t* error) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Capture* c = captureOf(t, stream);
  if (c == nullptr) {
    t.markers.erase(event);  // a real record replaces the captured one
    return false;
  }
  if (!c->invalid.empty()) {
    *error = invalidated(*c);
    return true;
  }
  const int index = indexOf(*c, stream);
  CapturedOp record;
  record.kind = CapturedOp::Kind::Record;
  append(*c, index, std::move(record));
  t.markers[event] = Marker{c, index, c->clocks[index]};
  c->events.push_back(event);
  *error = orSuccess;
  return true;
}

// [marker: capture-wait]
bool captureEventWaitSlow(Stream& stream, std::uint64_t event, bool pending, orError_t* error) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Capture* c = captureOf(t, stream);
  auto marker = t.markers.find(event);
  if (marker == t.markers.end()) {
    if (c == nullptr) return false;
    if (!c->invalid.empty()) {
      *error = invalidated(*c);
    } else if (pending) {
      *error = invalidate(*c, callMessage("orStreamWaitEvent",
                                          "a capturing stream waits on an event recorded outside "
                                          "the capture whose work is still pending; a replay "
                                          "could not wait for it. Synchronize before capturing, "
                                          "or record the event inside the capture."));
    } else {
      *error = orSuccess;  // nothing to wait for, now or in a replay
    }
    return true;
  }
  Capture& origin = *marker->second.capture;
  if (c != nullptr && c != &origin) {
    *error = invalidate(*c, callMessage("orStreamWaitEvent",
                                        "a capturing stream waits on an event recorded in "
                                        "another capture."));
    return true;
  }
  if (!origin.invalid.empty()) {
    *error = invalidated(origin);
    return true;
  }
  if (c == nullptr && stream.device() != origin.device) {
    *error = invalidate(
        origin,
        callMessage("orStreamWaitEvent", "a stream of device " + std::to_string(stream.device()) +
                                             " cannot join a capture of device " +
                                             std::to_string(origin.device) + "."));
    return true;
  }
  const int index = c == nullptr ? join(origin, t, stream) : indexOf(origin, stream);
  const std::vector<std::uint64_t>& seen = marker->second.clock;
  std::vector<std::uint64_t>& mine = origin.clocks[index];
  for (std::size_t j = 0; j < seen.size(); ++j) mine[j] = std::max(mine[j], seen[j]);
  CapturedOp wait;
  wait.kind = CapturedOp::Kind::Wait;
  wait.peer = marker->second.stream;
  append(origin, index, std::move(wait));
  *error = orSuccess;
  return true;
}

orError_t checkCaptureSafeSlow(const char* call) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const std::thread::id self = std::this_thread::get_id();
  orError_t result = orSuccess;
  for (auto& c : t.captures) {
    const bool forbidden = c->mode == orStreamCaptureModeGlobal ||
                           (c->mode == orStreamCaptureModeThreadLocal && c->thread == self);
    if (!forbidden) continue;
    result = invalidate(
        *c,
        callMessage(
            call, std::string("synchronizing calls are not permitted while a ") +
                      (c->mode == orStreamCaptureModeGlobal ? "global-mode" : "thread-local-mode") +
                      " graph capture is in progress on device " + std::to_string(c->device) +
                      " (the capture records work instead of running it). Move the call "
                      "out of the capture, or capture in relaxed mode."));
  }
  return result;
}

orError_t checkStreamNotCapturingSlow(const char* call, Stream& stream) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Capture* c = captureOf(t, stream);
  if (c == nullptr) return orSuccess;
  return invalidate(*c, callMessage(call,
                                    "the stream is capturing a graph (its work is recorded, not "
                                    "run), so it cannot be synchronized, queried, destroyed or "
                                    "replayed into until the capture ends."));
}

orError_t checkEventNotCapturedSlow(const char* call, std::uint64_t event) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto marker = t.markers.find(event);
  if (marker == t.markers.end()) return orSuccess;
  return invalidate(*marker->second.capture,
                    callMessage(call,
                                "the event was recorded in a graph capture in progress; its work "
                                "has not run, so it cannot be queried or waited for by the host."));
}

}  // namespace detail

// [marker: begin-capture]
orError_t beginCapture(const char* call, Stream& stream, orStreamCaptureMode mode) {
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (captureOf(t, stream) != nullptr) {
    return fail(orErrorNotPermitted, call, "the stream already belongs to a capture");
  }
  auto c = std::make_unique<Capture>();
  c->id = t.nextId++;
  c->device = stream.device();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->streams.push_back(stream.shared_from_this());
  c->clocks.emplace_back(1, 0);
  t.members[&stream] = c.get();
  t.captures.push_back(std::move(c));
  gActiveCaptures.fetch_add(1, std::memory_order_relaxed);
  return orSuccess;
}

// [marker: end-capture]
orError_t endCapture(const char* call, Stream& stream, orGraph_t* graph) {
  std::unique_ptr<Capture> ended;
  {
    CaptureTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    Capture* c = captureOf(t, stream);
    if (c == nullptr) {
      return fail(orErrorNotPermitted, call, "the stream is not capturing a graph");
    }
    if (c->streams.front().get() != &stream) {
      return fail(orErrorNotPermitted, call,
                  "the stream was forked off a capture; end the "
                  "capture on the stream that began it");
    }
    for (const auto& s : c->streams) t.members.erase(s.get());
    for (std::uint64_t event : c->events) {
      auto it = t.markers.find(event);
      if (it != t.markers.end() && it->second.capture == c) t.markers.erase(it);
    }
    auto it = std::find_if(t.captures.begin(), t.captures.end(),
                           [&](const std::unique_ptr<Capture>& x) { return x.get() == c; });
    ended = std::move(*it);
    t.captures.erase(it);
    gActiveCaptures.fetch_sub(1, std::memory_order_relaxed);
  }
  // The captured tasks are destroyed here, outside the table's lock, if no graph takes them.
  if (!ended->invalid.empty()) {
    return fail(orErrorStreamCaptureInvalidated, call,
                "the capture was invalidated: " + ended->invalid);
  }
  for (std::size_t j = 1; j < ended->streams.size(); ++j) {
    if (ended->clocks[0][j] < ended->clocks[j][j]) {
      return fail(orErrorStreamCaptureInvalidated, call,
                  ended->streams[j]->name() +
                      " was forked off the capture and not joined back: record an event on it "
                      "after its last work and make the capturing stream wait on it");
    }
  }
  auto data = std::make_shared<GraphData>();
  data->device = ended->device;
  data->streamCount = static_cast<int>(ended->streams.size());
  data->captureId = ended->id;
  data->ops = std::move(ended->ops);
  *graph = registerGraph(std::move(data));
  if (*graph == nullptr) {
    return fail(orErrorMemoryAllocation, call, "too many live graphs");
  }
  return orSuccess;
}

void captureInfo(const Stream& stream, orStreamCaptureStatus* status, unsigned long long* id) {
  *status = orStreamCaptureStatusNone;
  if (id != nullptr) *id = 0;
  if (gActiveCaptures.load(std::memory_order_relaxed) == 0) return;
  CaptureTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (const Capture* c = captureOf(t, stream)) {
    *status = c->invalid.empty() ? orStreamCaptureStatusActive : orStreamCaptureStatusInvalidated;
    if (id != nullptr) *id = c->id;
  }
}

}  // namespace openreg
