#include "core/TaskWarnings.h"

#include <atomic>
#include <deque>
#include <mutex>

namespace openreg {
namespace {

// Bounded: a kernel warning in a loop the host never meets again must not grow without end.
constexpr size_t kMaxPending = 1024;

std::mutex mutex;
std::deque<c10::Warning> pending;
std::atomic<bool> anyPending{false};

}  // namespace

void TaskWarningSink::process(const c10::Warning& warning) {
  std::lock_guard<std::mutex> lock(mutex);
  if (pending.size() == kMaxPending) pending.pop_front();
  pending.push_back(warning);
  anyPending.store(true, std::memory_order_release);
}

// [marker: deliver-task-warnings]
void deliverTaskWarnings() {
  if (!anyPending.load(std::memory_order_acquire)) return;
  std::deque<c10::Warning> taken;
  {
    std::lock_guard<std::mutex> lock(mutex);
    taken.swap(pending);
    anyPending.store(false, std::memory_order_relaxed);
  }
  for (const c10::Warning& warning : taken) c10::warn(warning);
}

}  // namespace openreg
