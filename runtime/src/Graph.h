// Graphs and executable graphs: what orStreamEndCapture produces and orGraphLaunch runs.
//
// Note [Graph replay]
// A graph owns the operations of one capture in host order (Note [Stream capture] in Capture.h).
// An executable graph shares them (so it outlives orGraphDestroy of its graph) and keeps the list
// of their tasks; orGraphLaunch enqueues one task on the stream, which runs each captured task
// through the stream's own Stream::runTask. So a replayed task is checked against poisoned memory,
// poisons what it writes when it fails, and leaves its failure on the replaying stream exactly as
// the same task launched alone would (Note [Task errors] in Stream.cpp); the tasks after it still
// run, and those that read what it poisoned fail with its error instead. A task is run as often as
// the graph is launched: captured callables must be re-runnable (they keep their captures and
// consume none of them).
#pragma once

#include <openreg/runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "Capture.h"

namespace openreg {

struct GraphData {
  int device = 0;
  int streamCount = 1;
  std::uint64_t captureId = 0;
  std::vector<CapturedOp> ops;  // host order
};

// Registers a captured graph; the handle, or nullptr when the table is full.
orGraph_t registerGraph(std::shared_ptr<GraphData> data);

}  // namespace openreg
