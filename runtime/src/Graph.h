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

#include <cstddef>
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

  // The tasks one launch runs (the ops that are not event records or waits).
  std::size_t taskCount() const;
};

// An executable graph: a graph's tasks, shared with the graph (Graph.cpp).
struct GraphExec;

// Registers a captured graph; the handle, or nullptr when the table is full.
orGraph_t registerGraph(std::shared_ptr<GraphData> data);

// The graph of a live handle, or nullptr.
GraphData* findGraph(orGraph_t graph);
// The executable graph of a live handle, or nullptr.
std::shared_ptr<GraphExec> shareGraphExec(orGraphExec_t exec);
// orErrorInvalidResourceHandle naming `call`: the `what` ("graph", "executable graph") handle is
// not live.
orError_t invalidGraph(const char* call, const char* what);

// orGraphInstantiate: a new executable graph of `graph` into *exec; the errors name `call`.
orError_t instantiateGraph(const char* call, orGraph_t graph, orGraphExec_t* exec);
// orGraphLaunch: enqueues one replay of `exec` on `stream` (of the graph's device, not capturing).
orError_t launchGraph(const char* call, std::shared_ptr<GraphExec> exec, Stream& stream);
// orGraphDebugDotPrint: writes `graph` to the file `path` in Graphviz DOT.
orError_t writeGraphDot(const char* call, const GraphData& graph, const char* path);

// orGraphDestroy, orGraphExecDestroy: false when the handle is not live.
bool destroyGraph(orGraph_t graph);
bool destroyGraphExec(orGraphExec_t exec);

}  // namespace openreg
