#include "core/allocator/MemoryHistory.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "core/Functions.h"
#include "core/OpenRegStream.h"

namespace openreg::allocator {
namespace {

// Immortal: frees run from tensor destructors, some at process exit.
struct State {
  std::mutex mutex;
  size_t maxEntries = 0;
  bool cppFrames = false;
  std::deque<TraceEntry> entries;
  std::unordered_map<size_t, std::shared_ptr<c10::GatheredContext>> live;  // by block address
};

State& state() {
  static auto* s = new State();
  return *s;
}

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::atomic<bool> MemoryHistory::recording_{false};

void MemoryHistory::start(size_t maxEntries, bool cppFrames) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.maxEntries = maxEntries;
  s.cppFrames = cppFrames;
  while (s.entries.size() > s.maxEntries) s.entries.pop_front();
  recording_.store(true);
}

void MemoryHistory::stop() {
  recording_.store(false);
  // Frees are no longer seen, so the stacks of live allocations would go stale (an address reused
  // without recording would show an old stack). The trace stays until clear().
  State& s = state();
  std::unordered_map<size_t, std::shared_ptr<c10::GatheredContext>> live;
  std::lock_guard<std::mutex> lock(s.mutex);
  live.swap(s.live);
}

void MemoryHistory::clear() {
  State& s = state();
  std::deque<TraceEntry> entries;
  std::unordered_map<size_t, std::shared_ptr<c10::GatheredContext>> live;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    entries.swap(s.entries);
    live.swap(s.live);
  }
  // Tracebacks are released outside the lock.
}

// [marker: memory-history-record]
void MemoryHistory::record(TraceAction action, c10::DeviceIndex device, const void* addr,
                           size_t size, c10::Stream stream) noexcept {
  try {
    State& s = state();
    bool cpp = false;
    bool traced = false;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      cpp = s.cppFrames;
      traced = s.maxEntries > 0;
    }
    // Gathered outside the lock: a Python frame walk, and with cpp an unwind. Without a trace
    // (enabled="state") only an allocation's stack is kept.
    std::shared_ptr<c10::GatheredContext> context;
    if (traced || action == TraceAction::Alloc) {
      context = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, cpp);
    }
    TraceEntry entry{
        action,  device, reinterpret_cast<size_t>(addr), size, OpenRegStream(stream).stream(),
        nowUs(), context};
    std::shared_ptr<c10::GatheredContext> released;  // dropped after the lock
    std::lock_guard<std::mutex> lock(s.mutex);
    if (action == TraceAction::Alloc) {
      s.live[entry.addr] = context;
    } else if (action == TraceAction::FreeCompleted) {
      auto it = s.live.find(entry.addr);
      if (it != s.live.end()) {
        released = std::move(it->second);
        s.live.erase(it);
      }
    }
    if (s.maxEntries == 0) return;
    if (s.entries.size() == s.maxEntries) s.entries.pop_front();
    s.entries.push_back(std::move(entry));
  } catch (...) {
    // Recording must never make an allocation or a free fail (Note [A free never throws]).
  }
}

std::vector<std::vector<TraceEntry>> MemoryHistory::trace() {
  std::vector<std::vector<TraceEntry>> traces(static_cast<size_t>(device_count()));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const TraceEntry& entry : s.entries) {
    if (static_cast<size_t>(entry.device) < traces.size()) traces[entry.device].push_back(entry);
  }
  return traces;
}

void MemoryHistory::annotate(std::vector<c10::CachingDeviceAllocator::SegmentInfo>& segments) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& segment : segments) {
    size_t address = segment.address;
    for (auto& block : segment.blocks) {
      if (block.allocated) {
        auto it = s.live.find(address);
        if (it != s.live.end()) block.context_when_allocated = it->second;
      }
      address += block.size;
    }
  }
}

}  // namespace openreg::allocator
