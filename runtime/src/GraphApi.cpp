// Entry points of runtime.h's "Graphs" section: stream capture (Note [Stream capture] in
// Capture.h) and the graphs it makes (Note [Graph replay] in Graph.h).
#include <openreg/runtime.h>

#include "Capture.h"
#include "Graph.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

orError_t orStreamBeginCapture(orStream_t handle, orStreamCaptureMode mode) {
  OR_ENTER();
  if (mode != orStreamCaptureModeGlobal && mode != orStreamCaptureModeThreadLocal &&
      mode != orStreamCaptureModeRelaxed) {
    return fail(orErrorInvalidValue, __func__,
                "mode is not an "
                "orStreamCaptureMode");
  }
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  return beginCapture(__func__, *stream, mode);
}

orError_t orStreamEndCapture(orStream_t handle, orGraph_t* graph) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(graph);
  *graph = nullptr;
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  return endCapture(__func__, *stream, graph);
}

orError_t orStreamGetCaptureInfo(orStream_t handle, orStreamCaptureStatus* status,
                                 unsigned long long* id) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(status);
  Stream* stream = resolveStream(handle);
  if (stream == nullptr) return invalidStream(__func__);
  captureInfo(*stream, status, id);
  return orSuccess;
}

orError_t orGraphGetInfo(orGraph_t graph, size_t* tasks, int* streams) {
  OR_ENTER();
  GraphData* data = findGraph(graph);
  if (data == nullptr) return invalidGraph(__func__, "graph");
  if (tasks != nullptr) *tasks = data->taskCount();
  if (streams != nullptr) *streams = data->streamCount;
  return orSuccess;
}

orError_t orGraphInstantiate(orGraphExec_t* exec, orGraph_t graph, unsigned int flags) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(exec);
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  if (findGraph(graph) == nullptr) return invalidGraph(__func__, "graph");
  return instantiateGraph(__func__, graph, exec);
}

orError_t orGraphLaunch(orGraphExec_t exec, orStream_t streamHandle) {
  OR_ENTER();
  std::shared_ptr<GraphExec> owned = shareGraphExec(exec);
  if (owned == nullptr) return invalidGraph(__func__, "executable graph");
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) return invalidStream(__func__);
  return launchGraph(__func__, std::move(owned), *stream);
}

orError_t orGraphDebugDotPrint(orGraph_t graph, const char* path, unsigned int flags) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(path);
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  GraphData* data = findGraph(graph);
  if (data == nullptr) return invalidGraph(__func__, "graph");
  return writeGraphDot(__func__, *data, path);
}

orError_t orGraphDestroy(orGraph_t graph) {
  OR_ENTER();
  if (!destroyGraph(graph)) return invalidGraph(__func__, "graph");
  return orSuccess;
}

orError_t orGraphExecDestroy(orGraphExec_t exec) {
  OR_ENTER();
  if (!destroyGraphExec(exec)) return invalidGraph(__func__, "executable graph");
  return orSuccess;  // queued launches keep their own reference
}

}  // extern "C"
