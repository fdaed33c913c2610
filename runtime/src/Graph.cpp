// Graphs: orGraphInstantiate, orGraphLaunch, orGraphGetInfo, orGraphDebugDotPrint and the
// destroy calls. See Note [Graph replay] in Graph.h.
#include "Graph.h"

#include <cstdio>
#include <string>
#include <vector>

#include "HandleTable.h"
#include "Runtime.h"

namespace openreg {
namespace {

struct GraphExec {
  std::shared_ptr<GraphData> data;
  std::vector<Task*> tasks;  // into data->ops, in capture order
};

// Immortal, as the runtime's handle tables (Note [Runtime initialization]).
HandleTable<GraphData>& graphs() {
  static auto* t = new HandleTable<GraphData>();
  return *t;
}
HandleTable<GraphExec>& execs() {
  static auto* t = new HandleTable<GraphExec>();
  return *t;
}

GraphData* findGraph(orGraph_t graph) {
  return graphs().find(reinterpret_cast<std::uint64_t>(graph));
}

orError_t invalidGraph(const char* call, const char* what) {
  return fail(orErrorInvalidResourceHandle, call,
              std::string("the ") + what + " handle is not live (destroyed, or never created)");
}

// [marker: replay-task]
// One launch of an executable graph: every captured task, in capture order, run by the stream
// it was launched on (Note [Graph replay]). It declares no memory of its own: each inner task is
// checked and poisons on its own account.
struct ReplayTask {
  std::shared_ptr<GraphExec> exec;
  std::shared_ptr<Stream> stream;
  void operator()() const {
    for (Task* task : exec->tasks) stream->runTask(*task, nullptr);
  }
};

const char* kindName(CapturedOp::Kind kind) {
  switch (kind) {
    case CapturedOp::Kind::Task:
      return "task";
    case CapturedOp::Kind::Record:
      return "event record";
    case CapturedOp::Kind::Wait:
      return "event wait";
  }
  return "?";
}

std::string describeAccesses(const Task& task) {
  AccessList accesses;
  task.accesses(accesses);
  if (!task.declaresAccesses()) return "\\nmemory: not declared";
  std::string out;
  char line[96];
  for (const MemoryAccess& a : accesses) {
    std::snprintf(line, sizeof line, "\\n%s %p +%zu B",
                  a.write ? (a.read ? "reads+writes" : "writes") : "reads", a.ptr, a.bytes);
    out += line;
  }
  return out;
}

}  // namespace

orGraph_t registerGraph(std::shared_ptr<GraphData> data) {
  return reinterpret_cast<orGraph_t>(graphs().insert(std::move(data)));
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orGraphGetInfo(orGraph_t graph, size_t* tasks, int* streams) {
  OR_ENTER();
  GraphData* data = findGraph(graph);
  if (data == nullptr) return invalidGraph(__func__, "graph");
  if (tasks != nullptr) {
    *tasks = 0;
    for (const CapturedOp& op : data->ops) *tasks += op.kind == CapturedOp::Kind::Task;
  }
  if (streams != nullptr) *streams = data->streamCount;
  return orSuccess;
}

orError_t orGraphInstantiate(orGraphExec_t* exec, orGraph_t graph, unsigned int flags) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(exec);
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  const std::uint64_t key = reinterpret_cast<std::uint64_t>(graph);
  if (graphs().find(key) == nullptr) return invalidGraph(__func__, "graph");
  // A shared reference: erase-and-reinsert is not an option, so find the owner through a copy.
  auto made = std::make_shared<GraphExec>();
  made->data = graphs().share(key);
  if (made->data == nullptr) return invalidGraph(__func__, "graph");
  for (CapturedOp& op : made->data->ops) {
    if (op.kind == CapturedOp::Kind::Task) made->tasks.push_back(&op.task);
  }
  const std::uint64_t handle = execs().insert(std::move(made));
  if (handle == 0) {
    return fail(orErrorMemoryAllocation, __func__, "too many live executable graphs");
  }
  *exec = reinterpret_cast<orGraphExec_t>(handle);
  return orSuccess;
}

// [marker: graph-launch]
orError_t orGraphLaunch(orGraphExec_t exec, orStream_t streamHandle) {
  OR_ENTER();
  const std::uint64_t key = reinterpret_cast<std::uint64_t>(exec);
  std::shared_ptr<GraphExec> owned = execs().share(key);
  if (owned == nullptr) return invalidGraph(__func__, "executable graph");
  Stream* stream = resolveStream(streamHandle);
  if (stream == nullptr) return invalidStream(__func__);
  if (stream->device() != owned->data->device) {
    return fail(orErrorInvalidResourceHandle, __func__,
                "the graph was captured on device " + std::to_string(owned->data->device) +
                    " but the stream belongs to device " + std::to_string(stream->device()));
  }
  if (orError_t e = checkStreamNotCapturing(__func__, *stream); e != orSuccess) return e;
  StreamOp op;
  op.task = Task(ReplayTask{std::move(owned), stream->shared_from_this()});
  return launchOp(*stream, std::move(op));
}

// [marker: graph-dot]
orError_t orGraphDebugDotPrint(orGraph_t graph, const char* path, unsigned int flags) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(path);
  if (flags != 0) return fail(orErrorInvalidValue, __func__, "flags must be 0");
  GraphData* data = findGraph(graph);
  if (data == nullptr) return invalidGraph(__func__, "graph");
  std::string dot =
      "digraph " OR_DEVICE_NAME "_graph {\n  label=\"" OR_DEVICE_NAME " graph: device " +
      std::to_string(data->device) + ", capture " + std::to_string(data->captureId) + ", " +
      std::to_string(data->streamCount) + " stream(s)\";\n  node [shape=box];\n";
  std::vector<int> last(static_cast<std::size_t>(data->streamCount), -1);
  std::vector<int> lastRecord(static_cast<std::size_t>(data->streamCount), -1);
  // Appends, not `"n" + std::to_string(i)`: GCC 12 warns (-Wrestrict) on that form, wrongly.
  const auto edge = [&dot](int from, std::size_t to, const char* style) {
    dot.append("  n").append(std::to_string(from)).append(" -> n").append(std::to_string(to));
    dot.append(style).append(";\n");
  };
  int taskNumber = 0;
  for (std::size_t i = 0; i < data->ops.size(); ++i) {
    const CapturedOp& op = data->ops[i];
    std::string label = kindName(op.kind);
    if (op.kind == CapturedOp::Kind::Task) {
      label.append(" ").append(std::to_string(taskNumber++));
      if (const char* name = op.task.name()) label.append(": ").append(name);
      label.append(describeAccesses(op.task));
    }
    label.append("\\nstream ").append(std::to_string(op.stream));
    dot.append("  n").append(std::to_string(i)).append(" [label=\"").append(label).append("\"];\n");
    const auto s = static_cast<std::size_t>(op.stream);
    if (last[s] >= 0) edge(last[s], i, "");
    if (op.kind == CapturedOp::Kind::Wait) {
      const int record = lastRecord[static_cast<std::size_t>(op.peer)];
      if (record >= 0) edge(record, i, " [style=dashed]");
    }
    if (op.kind == CapturedOp::Kind::Record) lastRecord[s] = static_cast<int>(i);
    last[s] = static_cast<int>(i);
  }
  dot += "}\n";
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    return fail(orErrorInvalidValue, __func__, std::string("cannot write ") + path);
  }
  const bool written = std::fwrite(dot.data(), 1, dot.size(), f) == dot.size();
  if (std::fclose(f) != 0 || !written) {
    return fail(orErrorInvalidValue, __func__, std::string("cannot write ") + path);
  }
  return orSuccess;
}

orError_t orGraphDestroy(orGraph_t graph) {
  OR_ENTER();
  if (graphs().erase(reinterpret_cast<std::uint64_t>(graph)) == nullptr)
    return invalidGraph(__func__, "graph");
  return orSuccess;
}

orError_t orGraphExecDestroy(orGraphExec_t exec) {
  OR_ENTER();
  std::shared_ptr<GraphExec> owned = execs().erase(reinterpret_cast<std::uint64_t>(exec));
  if (owned == nullptr) return invalidGraph(__func__, "executable graph");
  return orSuccess;  // queued launches keep their own reference
}

}  // extern "C"
