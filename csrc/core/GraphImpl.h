// openreg's graph: capture a stream's work once, replay it with one launch. The implementation of
// at::GraphImplInterface behind torch.accelerator.Graph (and torch.openreg.Graph) for openreg
// devices, registered with REGISTER_GRAPH_IMPL in GraphImpl.cpp. docs/graphs.md has the whole
// design.
//
// Note [Graph lifetime]
// capture_begin starts a runtime capture on the current stream (orStreamBeginCapture: Note
// [Stream capture] in runtime/src/Capture.h) and routes the allocations of that capture to the
// graph's private pool (Note [Private pools] in core/allocator/PrivatePool.h); capture_end ends
// both, whatever happened in between, so a failed capture leaves the device usable and raises the
// runtime's reason. The graph holds one use of its pool from a successful capture until reset()
// or its destruction; replays may use that memory at any time until then. keep_graph keeps the
// runtime graph after capture_end (for instantiate() and debug_dump), otherwise it is instantiated
// and dropped there. Not thread-safe: one graph object is used by one thread at a time, as
// CUDAGraph is.
//
// Note [Random numbers in graphs]
// A random operator's task reads its generator's state when it runs and writes the advanced state
// back (Note [Asynchronous random numbers] in Generator.h), so a replayed random task draws fresh
// numbers on every replay, and a replay after manual_seed(s) draws what the same operators would
// draw eagerly after manual_seed(s). What the graph must add is the generator's ordering: each
// generator used on a capturing stream is registered with the capture (noteGeneratorUse), and a
// replay is one more use of it: ordered after its previous use on another stream, recorded as its
// latest use, so seeding or reading the state on the host waits for the replay's draws.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/GraphImplInterface.h>
#include <openreg/runtime.h>

#include <string>
#include <vector>

#include "core/Macros.h"

namespace openreg {

class OPENREG_TORCH_API Graph final : public at::GraphImplInterface {
 public:
  explicit Graph(const at::GraphImplArgs& args = {});
  ~Graph() override;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture_begin(c10::MempoolId_t pool = {0, 0},
                     at::GraphCaptureMode mode = at::GraphCaptureMode::Default) override;
  void capture_end() override;
  void instantiate() override;
  void replay() override;
  void reset() override;
  c10::MempoolId_t pool() const override;
  void enable_debug_mode() override;
  void debug_dump(const std::string& path) override;

  // Tasks per replay and streams captured (for tests and the bench).
  size_t taskCount() const { return tasks_; }

 private:
  const bool keepGraph_;
  bool debug_ = false;
  bool capturing_ = false;
  bool captured_ = false;  // holds a capture and one use of pool_
  c10::DeviceIndex device_ = -1;
  orStream_t stream_ = nullptr;  // the stream the capture began on
  unsigned long long captureId_ = 0;
  c10::MempoolId_t pool_{0, 0};
  orGraph_t graph_ = nullptr;
  orGraphExec_t exec_ = nullptr;
  size_t tasks_ = 0;
  std::vector<at::Generator> generators_;  // used by the captured work
};

// A new pool id for graphs to share, as torch.cuda.graph_pool_handle() makes.
OPENREG_TORCH_API c10::MempoolId_t graphPoolHandle();
// Whether the current stream of the current device captures a graph.
OPENREG_TORCH_API bool isCurrentStreamCapturing();
struct GeneratorImpl;
// Called after a use of `generator` was recorded on `stream`: when the stream captures, the
// capture's graph registers the generator (Note [Random numbers in graphs]).
void noteGeneratorUse(orStream_t stream, GeneratorImpl* generator);

}  // namespace openreg
