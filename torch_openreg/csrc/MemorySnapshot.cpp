// The caching allocator's segments and recorded history as Python objects, in the shape of
// torch.cuda.memory._snapshot(), which torch.cuda._memory_viz reads. Glue only: the data comes from
// libtorch_openreg (DeviceAllocator::snapshot, MemoryHistory); the frames are symbolized here, with
// the GIL held, by PyTorch's own torch::py_symbolize (Note [Memory history] in
// csrc/core/allocator/MemoryHistory.h).
#include "MemorySnapshot.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include "core/allocator/DeviceAllocator.h"
#include "core/allocator/MemoryHistory.h"

// Note [py_symbolize declared here]
// torch::py_symbolize is declared as torch/csrc/profiler/python/combined_traceback.h declares it
// (exported by libtorch_python): that header cannot be included from the 2.13.0 wheel, which does
// not ship the nlohmann/json.hpp it includes for its other function.
// tests/test_memory_history.py::test_the_wheel_still_lacks_the_header_py_symbolize_needs fails once
// a wheel ships it; then include the header instead.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace openreg::bindings {
namespace {

using openreg::allocator::TraceAction;
using openreg::allocator::TraceEntry;

const char* actionName(TraceAction action) {
  switch (action) {
    case TraceAction::Alloc:
      return "alloc";
    case TraceAction::FreeRequested:
      return "free_requested";
    case TraceAction::FreeCompleted:
      return "free_completed";
    case TraceAction::SegmentAlloc:
      return "segment_alloc";
    case TraceAction::SegmentFree:
      return "segment_free";
    case TraceAction::SegmentMap:
      return "segment_map";
    case TraceAction::SegmentUnmap:
      return "segment_unmap";
    case TraceAction::Oom:
      return "oom";
  }
  return "unknown";
}

// Symbolizes the contexts in one batch (frames shared between tracebacks are resolved once).
class Frames {
 public:
  void add(const std::shared_ptr<c10::GatheredContext>& context) {
    contexts_.push_back(context ? torch::getCapturedTracebackFromContext(context) : nullptr);
  }
  void resolve() {
    std::vector<torch::CapturedTraceback*> present;
    for (auto* c : contexts_) {
      if (c != nullptr) present.push_back(c);
    }
    std::vector<py::object> symbolized = torch::py_symbolize(present);
    size_t next = 0;
    for (auto* c : contexts_) frames_.push_back(c != nullptr ? symbolized[next++] : py::list());
  }
  py::object operator[](size_t i) const { return frames_[i]; }

 private:
  std::vector<torch::CapturedTraceback*> contexts_;
  std::vector<py::object> frames_;
};

}  // namespace

// [marker: memory-snapshot-segments]
py::list segmentsToList(std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments) {
  openreg::allocator::MemoryHistory::annotate(segments);
  Frames frames;
  for (const auto& segment : segments) {
    for (const auto& block : segment.blocks) frames.add(block.context_when_allocated);
  }
  frames.resolve();
  size_t next = 0;
  py::list list;
  for (const auto& segment : segments) {
    py::dict s;
    s["device"] = static_cast<int>(segment.device);
    s["address"] = segment.address;
    s["total_size"] = segment.total_size;
    s["allocated_size"] = segment.allocated_size;
    s["active_size"] = segment.active_size;
    s["requested_size"] = segment.requested_size;
    s["stream"] = reinterpret_cast<uintptr_t>(segment.stream);
    s["segment_type"] = segment.is_large ? "large" : "small";
    s["segment_pool_id"] =
        py::make_tuple(segment.owner_private_pool_id.first, segment.owner_private_pool_id.second);
    s["is_expandable"] = segment.is_expandable;
    s["frames"] = py::list();
    py::list blocks;
    size_t address = segment.address;
    for (const auto& block : segment.blocks) {
      py::dict b;
      b["address"] = address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.allocated ? "active_allocated"
                                   : (block.active ? "active_pending_free" : "inactive");
      b["frames"] = frames[next++];
      blocks.append(b);
      address += block.size;
    }
    s["blocks"] = blocks;
    list.append(s);
  }
  return list;
}

// [marker: memory-snapshot-history]
py::dict historySnapshot() {
  const auto traces = openreg::allocator::MemoryHistory::trace();
  Frames frames;
  for (const auto& trace : traces) {
    for (const TraceEntry& e : trace) frames.add(e.context);
  }
  frames.resolve();
  size_t next = 0;
  py::list deviceTraces;
  for (const auto& trace : traces) {
    py::list entries;
    for (const TraceEntry& e : trace) {
      py::dict d;
      d["action"] = actionName(e.action);
      d["addr"] = e.action == TraceAction::Oom ? 0 : e.addr;
      if (e.action == TraceAction::Oom) d["device_free"] = e.addr;
      d["size"] = e.size;
      d["stream"] = reinterpret_cast<uintptr_t>(e.stream);
      d["time_us"] = e.timeUs;
      d["frames"] = frames[next++];
      entries.append(d);
    }
    deviceTraces.append(entries);
  }
  py::dict snapshot;
  snapshot["segments"] = segmentsToList(openreg::deviceAllocator().snapshot());
  snapshot["device_traces"] = deviceTraces;
  return snapshot;
}

}  // namespace openreg::bindings
