// The private-pool half of DeviceCachingAllocator: Note [Private pools] in PrivatePool.h.
#include "core/allocator/PrivatePool.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <string>

#include "core/Exception.h"
#include "core/OpenRegStream.h"
#include "core/allocator/DeviceCachingAllocator.h"

namespace openreg::allocator {
namespace {

using c10::CachingAllocator::for_each_selected_stat_type;
using c10::CachingAllocator::StatType;

const char* modeName(orStreamCaptureMode mode) {
  switch (mode) {
    case orStreamCaptureModeGlobal:
      return "global";
    case orStreamCaptureModeThreadLocal:
      return "thread_local";
    case orStreamCaptureModeRelaxed:
      return "relaxed";
  }
  return "?";
}

}  // namespace

void DeviceCachingAllocator::beginAllocateToPool(c10::MempoolId_t id, unsigned long long captureId,
                                                 orStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (const PoolCapture& c : privatePools_.captures) {
    TORCH_CHECK(c.pool != id || c.captureId == 0 || captureId == 0, OR_DEVICE_NAME ": device ",
                static_cast<int>(device_), ": a capture is already allocating into private pool (",
                id.first, ", ", id.second,
                "); captures that share a pool must run one after the other");
  }
  auto& pool = privatePools_.pools[id];
  if (pool == nullptr) pool = std::make_unique<PrivatePool>(id);
  pool->useCount += 1;
  privatePools_.captures.push_back({id, captureId, mode, std::this_thread::get_id()});
}

void DeviceCachingAllocator::endAllocateToPool(c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto& captures = privatePools_.captures;
  captures.erase(
      std::remove_if(captures.begin(), captures.end(),
                     [&](const PoolCapture& c) { return c.pool == id && c.captureId != 0; }),
      captures.end());
}

// [marker: mem-pool]
// torch.openreg.MemPool: a private pool a program names itself. The MemPool holds one use of it;
// use_mem_pool(pool) routes the calling thread's allocations on this device to it (the other
// threads' go on to the shared pools), as CUDA's use_mem_pool does, and holds one more use while
// it lasts. A graph captured with pool=mem_pool.id allocates into the same pool.
void DeviceCachingAllocator::retainPool(c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto& pool = privatePools_.pools[id];
  if (pool == nullptr) pool = std::make_unique<PrivatePool>(id);
  pool->useCount += 1;
}

void DeviceCachingAllocator::beginAllocateThreadToPool(c10::MempoolId_t id) {
  beginAllocateToPool(id, /*captureId=*/0, orStreamCaptureModeRelaxed);
}

void DeviceCachingAllocator::endAllocateThreadToPool(c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto& captures = privatePools_.captures;
  const std::thread::id self = std::this_thread::get_id();
  auto it = std::find_if(captures.begin(), captures.end(), [&](const PoolCapture& c) {
    return c.pool == id && c.captureId == 0 && c.thread == self;
  });
  TORCH_CHECK(it != captures.end(), OR_DEVICE_NAME ": device ", static_cast<int>(device_),
              ": this thread is not allocating into pool (", id.first, ", ", id.second, ")");
  captures.erase(it);
  releasePool(id);
}

int DeviceCachingAllocator::poolUseCount(c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto it = privatePools_.pools.find(id);
  return it == privatePools_.pools.end() ? 0 : it->second->useCount;
}

// [marker: release-pool]
void DeviceCachingAllocator::releasePool(c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto it = privatePools_.pools.find(id);
  if (it == privatePools_.pools.end()) return;
  PrivatePool* pool = it->second.get();
  if (--pool->useCount > 0) return;
  releasing_ = pool;
  try {
    releaseCachedSegments();
  } catch (...) {
    releasing_ = nullptr;
    throw;
  }
  releasing_ = nullptr;
}

// [marker: pool-for]
BlockPool& DeviceCachingAllocator::poolFor(size_t size, c10::Stream stream) {
  const bool small = size <= kSmallSize;
  if (!privatePools_.captures.empty()) {
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    unsigned long long id = 0;
    OPENREG_CHECK(orStreamGetCaptureInfo(OpenRegStream(stream).stream(), &status, &id));
    if (status != orStreamCaptureStatusNone) {
      for (const PoolCapture& c : privatePools_.captures) {
        if (c.captureId != id || c.captureId == 0) continue;
        PrivatePool& pool = *privatePools_.pools.at(c.pool);
        return small ? pool.small : pool.large;
      }
    }
    const std::thread::id self = std::this_thread::get_id();
    for (auto c = privatePools_.captures.rbegin(); c != privatePools_.captures.rend(); ++c) {
      if (c->captureId != 0 || c->thread != self) continue;  // use_mem_pool: the innermost
      PrivatePool& pool = *privatePools_.pools.at(c->pool);
      return small ? pool.small : pool.large;
    }
    for (const PoolCapture& c : privatePools_.captures) {
      if (c.captureId == 0) continue;
      const bool strict = c.mode == orStreamCaptureModeGlobal ||
                          (c.mode == orStreamCaptureModeThreadLocal && c.thread == self);
      TORCH_CHECK(!strict, OR_DEVICE_NAME ": an allocation of ", size, " bytes on ",
                  OpenRegStream(stream), ", which is not capturing, while a graph capture in \"",
                  modeName(c.mode),
                  "\" mode is in progress on this device. Such memory would not come from the "
                  "graph's private pool. Allocate on the capturing stream (or a stream forked off "
                  "it), move the allocation out of the capture, or capture with "
                  "capture_error_mode=\"relaxed\".");
    }
  }
  return small ? smallBlocks_ : largeBlocks_;
}

std::vector<BlockPool*> DeviceCachingAllocator::releasablePools() {
  if (releasing_ != nullptr) return {&releasing_->small, &releasing_->large};
  std::vector<BlockPool*> pools{&smallBlocks_, &largeBlocks_};
  for (auto& [id, pool] : privatePools_.pools) {
    if (pool->useCount == 0) {
      pools.push_back(&pool->small);
      pools.push_back(&pool->large);
    }
  }
  return pools;
}

void DeviceCachingAllocator::countPrivateSegment(const BlockPool& pool, size_t bytes, bool added) {
  if (pool.owner == nullptr) return;
  pool.owner->segments += added ? 1 : -1;
  auto& stat = stats_.reserved_bytes_by_private_pools[pool.owner->id];
  for_each_selected_stat_type(statTypes(pool), [&](size_t t) {
    if (added) {
      stat[t].increase(bytes);
    } else {
      stat[t].decrease(bytes);
    }
  });
}

void DeviceCachingAllocator::erasePrivatePoolsReleased() {
  for (auto it = privatePools_.pools.begin(); it != privatePools_.pools.end();) {
    if (it->second->useCount == 0 && it->second->segments == 0) {
      it = privatePools_.pools.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace openreg::allocator
