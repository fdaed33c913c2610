#include "core/GraphImpl.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/OpenRegStream.h"
#include "core/allocator/DeviceAllocator.h"

namespace openreg {
namespace {

// Pool ids, as CUDA numbers them: a graph's own pool is {n, 0}, a handle for sharing {0, n}.
std::atomic<c10::CaptureId_t> nextPoolUid{1};

// Captures in progress, by the runtime's capture id, for noteGeneratorUse.
struct Registry {
  std::mutex mutex;
  std::unordered_map<unsigned long long, std::vector<at::Generator>*> generators;
};
Registry& registry() {
  static auto* r = new Registry();  // immortal: a capture may be open at exit
  return *r;
}

orStreamCaptureMode runtimeMode(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::Default:  // CUDA's default, and torch.cuda.graph's
    case at::GraphCaptureMode::Global:
      return orStreamCaptureModeGlobal;
    case at::GraphCaptureMode::ThreadLocal:
      return orStreamCaptureModeThreadLocal;
    case at::GraphCaptureMode::Relaxed:
      return orStreamCaptureModeRelaxed;
  }
  TORCH_CHECK(false, OR_DEVICE_NAME ": unknown graph capture mode ", static_cast<int>(mode));
}

allocator::DeviceCachingAllocator& cachingAllocator(c10::DeviceIndex device) {
  return deviceAllocator().forDevice(device);
}

}  // namespace

// [marker: graph-impl]
Graph::Graph(const at::GraphImplArgs& args) : keepGraph_(args.keep_graph) {}

Graph::~Graph() {
  try {
    reset();
  } catch (const std::exception& e) {
    TORCH_WARN(OR_DEVICE_NAME ": destroying a graph: ", e.what());
  }
}

// [marker: graph-capture-begin]
void Graph::capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) {
  TORCH_CHECK(!capturing_ && !captured_, OR_DEVICE_NAME
              ": this graph already holds a capture; call reset() before capturing again, "
              "or use a new graph");
  device_ = current_device();
  const OpenRegStream stream = getCurrentOpenRegStream(device_);
  const orStreamCaptureMode runtime = runtimeMode(mode);
  if (pool.first == 0 && pool.second == 0) {
    pool = {nextPoolUid.fetch_add(1), 0};
  }
  OPENREG_CHECK(orStreamBeginCapture(stream.stream(), runtime));
  orStreamCaptureStatus status;
  OPENREG_CHECK(orStreamGetCaptureInfo(stream.stream(), &status, &captureId_));
  try {
    cachingAllocator(device_).beginAllocateToPool(pool, captureId_, runtime);
  } catch (...) {
    orGraph_t dropped = nullptr;
    (void)orStreamEndCapture(stream.stream(), &dropped);
    if (dropped != nullptr) (void)orGraphDestroy(dropped);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().generators[captureId_] = &generators_;
  }
  stream_ = stream.stream();
  pool_ = pool;
  capturing_ = true;
}

// [marker: graph-capture-end]
void Graph::capture_end() {
  TORCH_CHECK(capturing_, OR_DEVICE_NAME ": capture_end() without a capture_begin()");
  capturing_ = false;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().generators.erase(captureId_);
  }
  allocator::DeviceCachingAllocator& memory = cachingAllocator(device_);
  memory.endAllocateToPool(pool_);
  const orError_t status = orStreamEndCapture(stream_, &graph_);
  if (status != orSuccess) {
    generators_.clear();
    memory.releasePool(pool_);  // nothing will replay into it
    OPENREG_CHECK(status);
  }
  captured_ = true;
  OPENREG_CHECK(orGraphGetInfo(graph_, &tasks_, nullptr));
  if (!keepGraph_) instantiate();
}

void Graph::instantiate() {
  TORCH_CHECK(captured_,
              OR_DEVICE_NAME ": instantiate() needs a captured graph; capture one first");
  TORCH_CHECK(graph_ != nullptr, OR_DEVICE_NAME
              ": the graph was instantiated at capture_end() and not kept; construct it "
              "with keep_graph=True to instantiate it again");
  if (exec_ != nullptr) OPENREG_CHECK(orGraphExecDestroy(exec_));
  exec_ = nullptr;
  OPENREG_CHECK(orGraphInstantiate(&exec_, graph_, 0));
  if (!keepGraph_ && !debug_) {
    OPENREG_CHECK(orGraphDestroy(graph_));
    graph_ = nullptr;
  }
}

// [marker: graph-replay]
void Graph::replay() {
  TORCH_CHECK(captured_, OR_DEVICE_NAME ": replay() needs a captured graph; capture one first");
  if (exec_ == nullptr) instantiate();
  DeviceScope scope(device_);
  const orStream_t stream = getCurrentOpenRegStream(device_).stream();
  // Note [Random numbers in graphs]: the replay is one use of each generator.
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(generators_.size());
  for (at::Generator& g : generators_) {
    locks.emplace_back(g.mutex());
    g.get<GeneratorImpl>()->waitForPreviousUseOn(stream);
  }
  OPENREG_CHECK(orGraphLaunch(exec_, stream));
  for (const at::Generator& g : generators_) g.get<GeneratorImpl>()->recordUseOn(stream);
}

// [marker: graph-reset]
void Graph::reset() {
  if (capturing_) {
    capturing_ = false;
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      registry().generators.erase(captureId_);
    }
    cachingAllocator(device_).endAllocateToPool(pool_);
    orGraph_t dropped = nullptr;
    (void)orStreamEndCapture(stream_, &dropped);  // an invalidated capture leaves no graph
    graph_ = dropped;
    captured_ = true;  // the capture's use of the pool is released below, graph or not
  }
  if (exec_ != nullptr) OPENREG_WARN(orGraphExecDestroy(exec_));
  if (graph_ != nullptr) OPENREG_WARN(orGraphDestroy(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
  generators_.clear();
  tasks_ = 0;
  if (captured_) {
    captured_ = false;
    cachingAllocator(device_).releasePool(pool_);
  }
}

c10::MempoolId_t Graph::pool() const {
  TORCH_CHECK(capturing_ || captured_,
              OR_DEVICE_NAME ": pool() is defined once capture has begun (the id is chosen then)");
  return pool_;
}

void Graph::enable_debug_mode() {
  debug_ = true;
}

// [marker: graph-debug-dump]
void Graph::debug_dump(const std::string& path) {
  TORCH_CHECK(graph_ != nullptr, OR_DEVICE_NAME
              ": debug_dump() needs the captured graph: call enable_debug_mode() (or "
              "construct the graph with keep_graph=True) before capturing");
  OPENREG_CHECK(orGraphDebugDotPrint(graph_, path.c_str(), 0));
}

c10::MempoolId_t graphPoolHandle() {
  return {0, nextPoolUid.fetch_add(1)};
}

bool isCurrentStreamCapturing() {
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  OPENREG_CHECK(orStreamGetCaptureInfo(getCurrentOpenRegStream().stream(), &status, nullptr));
  return status != orStreamCaptureStatusNone;
}

void noteGeneratorUse(orStream_t stream, GeneratorImpl* generator) {
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  unsigned long long id = 0;
  OPENREG_CHECK(orStreamGetCaptureInfo(stream, &status, &id));
  if (status == orStreamCaptureStatusNone) return;
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto it = registry().generators.find(id);
  if (it == registry().generators.end()) return;  // a capture begun outside a Graph
  for (const at::Generator& g : *it->second) {
    if (g.unsafeGetGeneratorImpl() == generator) return;
  }
  it->second->push_back(at::Generator(c10::intrusive_ptr<GeneratorImpl>::reclaim_copy(generator)));
}

}  // namespace openreg

// [marker: register-graph-impl]
// The key is what at::has_graph_impl looks up: c10::DeviceTypeName(PrivateUse1, false), which is
// the renamed backend's name upper-cased ("OPENREG"; get_privateuse1_backend(false) applies
// toupper). Written in namespace at, where the registry is declared.
namespace at {
REGISTER_GRAPH_IMPL(OPENREG, ::openreg::Graph);
}  // namespace at
