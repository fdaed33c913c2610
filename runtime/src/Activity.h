// The runtime side of Note [Task activity] (openreg/activity.hpp): what a launch asks and does.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "Stream.h"

namespace openreg {

namespace detail {
extern std::atomic<bool> gActivityRecording;
}  // namespace detail

// The one check a launch makes when no recording is on.
inline bool recordingActivity() noexcept {
  return detail::gActivityRecording.load(std::memory_order_relaxed);
}

// Replaces the task of `op` (a Kind::Run op about to be enqueued on `stream`) with one that times
// it and records its TaskActivity when it has run. Does nothing if the recording has just ended.
void wrapForActivity(const Stream& stream, StreamOp& op);

// orActivityBegin: starts a recording; false (and nothing changes) if one is already on.
bool beginRecording();
// orActivityEnd: stops the recording, waits for the tasks launched during it (Note [Ending a
// recording] in Activity.cpp) and hands over its activities; none if no recording was on.
std::vector<orTaskActivity> endRecording();

// The calling thread's correlation stack and label (orActivityPushCorrelation,
// orActivityPopCorrelation, orActivitySetLabel): what its launches record. pushCorrelation is
// false when there is no host memory for the id.
bool pushCorrelation(std::uint64_t id) noexcept;
void popCorrelation() noexcept;
void setLabel(orTaskKind kind, const char* name, orTaskKind* previousKind,
              const char** previousName) noexcept;

// orHostActivity*: Note [Host-timed activity] in <openreg/activity.hpp>. Begin joins the recording
// that is on (host.generation stays 0 when none is); end adds the activity to that recording if it
// is still on.
void beginHostActivity(orHostActivity& host, const Stream& stream, const char* name);
void startHostActivity(orHostActivity& host) noexcept;
void endHostActivity(orHostActivity& host, bool failed);

}  // namespace openreg
