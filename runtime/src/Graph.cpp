// Graphs and executable graphs: their handle tables, instantiation, replay and the DOT dump (for
// GraphApi.cpp). See Note [Graph replay] in Graph.h.
#include "Graph.h"

#include <cstdio>
#include <string>
#include <vector>

#include "HandleTable.h"
#include "Runtime.h"

namespace openreg {

struct GraphExec {
  std::shared_ptr<GraphData> data;
  std::vector<Task*> tasks;  // into data->ops, in capture order
};

namespace {

// Immortal, as the runtime's handle tables (Note [Runtime initialization]).
HandleTable<GraphData>& graphs() {
  static auto* t = new HandleTable<GraphData>();
  return *t;
}
HandleTable<GraphExec>& execs() {
  static auto* t = new HandleTable<GraphExec>();
  return *t;
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

GraphData* findGraph(orGraph_t graph) {
  return graphs().find(reinterpret_cast<std::uint64_t>(graph));
}

std::shared_ptr<GraphExec> shareGraphExec(orGraphExec_t exec) {
  return execs().share(reinterpret_cast<std::uint64_t>(exec));
}

orError_t invalidGraph(const char* call, const char* what) {
  return fail(orErrorInvalidResourceHandle, call,
              std::string("the ") + what + " handle is not live (destroyed, or never created)");
}

std::size_t GraphData::taskCount() const {
  std::size_t tasks = 0;
  for (const CapturedOp& op : ops) tasks += op.kind == CapturedOp::Kind::Task;
  return tasks;
}

orError_t instantiateGraph(const char* call, orGraph_t graph, orGraphExec_t* exec) {
  const std::uint64_t key = reinterpret_cast<std::uint64_t>(graph);
  // A shared reference: erase-and-reinsert is not an option, so find the owner through a copy.
  auto made = std::make_shared<GraphExec>();
  made->data = graphs().share(key);
  if (made->data == nullptr) return invalidGraph(call, "graph");
  for (CapturedOp& op : made->data->ops) {
    if (op.kind == CapturedOp::Kind::Task) made->tasks.push_back(&op.task);
  }
  const std::uint64_t handle = execs().insert(std::move(made));
  if (handle == 0) {
    return fail(orErrorMemoryAllocation, call, "too many live executable graphs");
  }
  *exec = reinterpret_cast<orGraphExec_t>(handle);
  return orSuccess;
}

// [marker: graph-launch]
orError_t launchGraph(const char* call, std::shared_ptr<GraphExec> exec, Stream& stream) {
  if (stream.device() != exec->data->device) {
    return fail(orErrorInvalidResourceHandle, call,
                "the graph was captured on device " + std::to_string(exec->data->device) +
                    " but the stream belongs to device " + std::to_string(stream.device()));
  }
  if (orError_t e = checkStreamNotCapturing(call, stream); e != orSuccess) return e;
  StreamOp op;
  op.task = Task(ReplayTask{std::move(exec), stream.shared_from_this()});
  return launchOp(stream, std::move(op));
}

// [marker: graph-dot]
orError_t writeGraphDot(const char* call, const GraphData& graph, const char* path) {
  std::string dot =
      "digraph " OR_DEVICE_NAME "_graph {\n  label=\"" OR_DEVICE_NAME " graph: device " +
      std::to_string(graph.device) + ", capture " + std::to_string(graph.captureId) + ", " +
      std::to_string(graph.streamCount) + " stream(s)\";\n  node [shape=box];\n";
  std::vector<int> last(static_cast<std::size_t>(graph.streamCount), -1);
  std::vector<int> lastRecord(static_cast<std::size_t>(graph.streamCount), -1);
  // Appends, not `"n" + std::to_string(i)`: GCC 12 warns (-Wrestrict) on that form, wrongly.
  const auto edge = [&dot](int from, std::size_t to, const char* style) {
    dot.append("  n").append(std::to_string(from)).append(" -> n").append(std::to_string(to));
    dot.append(style).append(";\n");
  };
  int taskNumber = 0;
  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const CapturedOp& op = graph.ops[i];
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
    return fail(orErrorInvalidValue, call, std::string("cannot write ") + path);
  }
  const bool written = std::fwrite(dot.data(), 1, dot.size(), f) == dot.size();
  if (std::fclose(f) != 0 || !written) {
    return fail(orErrorInvalidValue, call, std::string("cannot write ") + path);
  }
  return orSuccess;
}

bool destroyGraph(orGraph_t graph) {
  return graphs().erase(reinterpret_cast<std::uint64_t>(graph)) != nullptr;
}

bool destroyGraphExec(orGraphExec_t exec) {
  return execs().erase(reinterpret_cast<std::uint64_t>(exec)) != nullptr;
}

}  // namespace openreg
