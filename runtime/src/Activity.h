// The runtime side of Note [Task activity] (openreg/activity.hpp): what a launch asks and does.
#pragma once

#include <atomic>

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

}  // namespace openreg
