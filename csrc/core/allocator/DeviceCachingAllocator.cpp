#include "core/allocator/DeviceCachingAllocator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <sstream>
#include <string>

#include "core/Exception.h"
#include "core/FaultInjection.h"
#include "core/Functions.h"
#include "core/Ipc.h"
#include "core/Stream.h"
#include "core/allocator/MemoryHistory.h"

namespace openreg::allocator {
namespace {

using c10::CachingAllocator::for_each_selected_stat_type;
using c10::CachingAllocator::StatType;

size_t roundSize(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize
                              : (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segmentSizeFor(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

bool shouldSplit(const Block* block, size_t size) {
  const size_t remaining = block->size - size;
  return block->pool->isSmall ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

std::string formatBytes(size_t bytes) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (bytes < (1 << 20)) {
    os << bytes / 1024.0 << " KiB";
  } else if (bytes < (size_t{1} << 30)) {
    os << bytes / 1048576.0 << " MiB";
  } else {
    os << bytes / 1073741824.0 << " GiB";
  }
  return os.str();
}

}  // namespace

DeviceCachingAllocator::DeviceCachingAllocator(c10::DeviceIndex device) : device_(device) {}

DeviceCachingAllocator::StatTypes DeviceCachingAllocator::statTypes(const BlockPool& pool) const {
  StatTypes types{};
  types[static_cast<size_t>(StatType::AGGREGATE)] = true;
  types[static_cast<size_t>(pool.isSmall ? StatType::SMALL_POOL : StatType::LARGE_POOL)] = true;
  return types;
}

// [marker: allocator-malloc]
Block* DeviceCachingAllocator::malloc(size_t requested, c10::Stream stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (FaultInjection::armed()) {  // Note [Fault injection] in core/FaultInjection.h
    const std::string note = FaultInjection::allocation(device_);
    if (!note.empty()) throwOutOfMemory(requested, segmentSizeFor(roundSize(requested)), note);
  }
  processEvents();
  const size_t size = roundSize(requested);
  BlockPool& pool = poolFor(size, stream);
  Block* block = takeFreeBlock(pool, stream, size);
  if (block == nullptr) block = newSegment(pool, stream, size, requested);
  if (shouldSplit(block, size)) {
    auto* rest =
        new Block(stream, block->size - size, &pool, static_cast<char*>(block->ptr) + size);
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    insertFree(rest);
  }
  // A new owner: poison a failed task left in the block is not its data (orMemReuse).
  OPENREG_CHECK(orMemReuse(block->ptr, block->size));
  block->allocated = true;
  block->requested = requested;
  activeBlocks_.insert(block);
  for_each_selected_stat_type(statTypes(pool), [&](size_t t) {
    stats_.allocation[t].increase(1);
    stats_.allocated_bytes[t].increase(block->size);
    stats_.active[t].increase(1);
    stats_.active_bytes[t].increase(block->size);
    stats_.requested_bytes[t].increase(requested);
  });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::Alloc, device_, block->ptr, block->size, stream);
  }
  return block;
}

// [marker: allocator-segment-fallback]
// A new segment holding a block of `size` bytes (Note [Caching allocator]): the size class's
// segment, once more after returning the cache if need be, and failing that the smallest segment
// that holds the request.
Block* DeviceCachingAllocator::newSegment(BlockPool& pool, c10::Stream stream, size_t size,
                                          size_t requested) {
  const size_t segmentSize = segmentSizeFor(size);
  Block* block = allocateSegment(pool, stream, segmentSize);
  if (block == nullptr) {
    // [marker: allocator-oom-retry]
    // Return what the cache holds and try once more, as CUDA's allocator does.
    stats_.num_alloc_retries += 1;
    ipc::collectSentBlocks(device_);  // blocks other processes held and let go of (core/Ipc.h)
    releaseCachedSegments();
    block = allocateSegment(pool, stream, segmentSize);
  }
  if (block == nullptr && segmentSize > size) block = allocateSegment(pool, stream, size);
  if (block == nullptr) throwOutOfMemory(requested, size);
  return block;
}

// [marker: allocator-free]
void DeviceCachingAllocator::free(Block* block) noexcept {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::FreeRequested, device_, block->ptr, block->size,
                          block->stream);
  }
  block->allocated = false;
  for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
    stats_.allocation[t].decrease(1);
    stats_.allocated_bytes[t].decrease(block->size);
    stats_.requested_bytes[t].decrease(block->requested);
  });
  // Used on other streams: reusable once the work queued there so far has completed.
  for (const c10::Stream& use : block->streamUses) {
    if (!recordFreeEvent(block, use)) waitForUse(use);
  }
  block->streamUses.clear();
  if (block->pendingEvents == 0) freeBlock(block);
}

// See Note [A free never throws].
bool DeviceCachingAllocator::recordFreeEvent(Block* block, c10::Stream use) noexcept {
  orEvent_t event = nullptr;
  std::string reason;
  try {
    DeviceScope scope(use.device_index());
    // It orders the block's reuse after the stream's work, nothing more: a failure of that work
    // is the stream's to report, and carried here it would raise in every later allocation.
    orError_t status = orEventCreateWithFlags(&event, orEventDisableTiming | orEventDisableFailure);
    if (status == orSuccess) status = orEventRecord(event, OpenRegStream(use).stream());
    if (status == orSuccess) {
      pending_.emplace_back(event, block);
      block->pendingEvents += 1;
      return true;
    }
    reason = orGetLastErrorMessage();
  } catch (const c10::Error& e) {
    reason = e.what_without_backtrace();
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (event != nullptr) (void)orEventDestroy(event);
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    try {
      TORCH_WARN(
          "openreg: freeing memory used on another stream (record_stream) could not record "
          "an event there (",
          reason,
          "). The memory went back to the cache after that stream's work completed, or "
          "at once where no work can run (a forked child). This warning is shown once.");
    } catch (...) {
      // A warning handler that throws (warnings turned into errors) must not escape a free.
    }
  }
  return false;
}

void DeviceCachingAllocator::waitForUse(c10::Stream use) noexcept {
  try {
    DeviceScope scope(use.device_index());
    // Errors are ignored: a free cannot raise. A task error this synchronization reports is
    // therefore lost to the stream's next one, the price of a path taken only when no event can
    // be had. A destroyed stream may still be draining, so its device is waited for instead. In a
    // forked child both fail at once: no worker exists there, so no work can still use the memory.
    if (orStreamSynchronize(OpenRegStream(use).stream()) == orErrorInvalidResourceHandle) {
      (void)orDeviceSynchronize();
    }
  } catch (...) {
    // As above: nothing left to wait for.
  }
}

void DeviceCachingAllocator::recordStream(Block* block, c10::Stream stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (stream == block->stream) return;  // ordered already
  block->streamUses.insert(stream);
}

Block* DeviceCachingAllocator::takeFreeBlock(BlockPool& pool, c10::Stream stream, size_t size) {
  Block key(stream, size, &pool, nullptr);
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  eraseFree(block);
  return block;
}

Block* DeviceCachingAllocator::allocateSegment(BlockPool& pool, c10::Stream stream,
                                               size_t segmentSize) {
  void* ptr = nullptr;
  orError_t status;
  {
    DeviceScope scope(device_);
    status = orMalloc(&ptr, segmentSize);
  }
  if (status == orErrorMemoryAllocation) return nullptr;
  OPENREG_CHECK(status);
  stats_.num_device_alloc += 1;
  for_each_selected_stat_type(statTypes(pool), [&](size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(segmentSize);
  });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::SegmentAlloc, device_, ptr, segmentSize, stream);
  }
  countPrivateSegment(pool, segmentSize, /*added=*/true);
  return new Block(stream, segmentSize, &pool, ptr);
}

void DeviceCachingAllocator::insertFree(Block* block) {
  block->pool->blocks.insert(block);
  if (block->isSplit()) {
    block->countedInactive = true;
    for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
      stats_.inactive_split[t].increase(1);
      stats_.inactive_split_bytes[t].increase(block->size);
    });
  }
}

void DeviceCachingAllocator::eraseFree(Block* block) {
  block->pool->blocks.erase(block);
  if (block->countedInactive) {
    block->countedInactive = false;
    for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
      stats_.inactive_split[t].decrease(1);
      stats_.inactive_split_bytes[t].decrease(block->size);
    });
  }
}

// Returns a block with no pending events to its pool, merged with free neighbours.
void DeviceCachingAllocator::freeBlock(Block* block) {
  const size_t size = block->size;
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::FreeCompleted, device_, block->ptr, size, block->stream);
  }
  for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
    stats_.active[t].decrease(1);
    stats_.active_bytes[t].decrease(size);
  });
  activeBlocks_.erase(block);
  if (Block* prev = block->prev; prev != nullptr && prev->isFree()) {
    eraseFree(prev);
    block->ptr = prev->ptr;
    block->size += prev->size;
    block->prev = prev->prev;
    if (block->prev != nullptr) block->prev->next = block;
    delete prev;
  }
  if (Block* next = block->next; next != nullptr && next->isFree()) {
    eraseFree(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    delete next;
  }
  insertFree(block);
}

void DeviceCachingAllocator::processEvents() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const orError_t status = orEventQuery(it->first);
    if (status == orErrorNotReady) {
      ++it;
      continue;
    }
    OPENREG_CHECK(status);
    OPENREG_WARN(orEventDestroy(it->first));
    Block* block = it->second;
    it = pending_.erase(it);
    if (--block->pendingEvents == 0) freeBlock(block);
  }
}

void DeviceCachingAllocator::synchronizeAndProcessEvents() {
  for (auto& [event, block] : pending_) OPENREG_CHECK(orEventSynchronize(event));
  processEvents();
}

// [marker: allocator-release]
// Every whole free segment goes back to the runtime, and the statistics follow what the runtime
// did. orFree never reports an earlier task's failure (that stays pending for the next
// synchronizing call, runtime.h), but it can fail without releasing the segment (in a forked
// child). A segment counts as released when orFree succeeded or the runtime no longer knows the
// pointer; otherwise it stays in its pool, cached and counted. The first error is raised once
// every segment has been tried.
void DeviceCachingAllocator::releaseCachedSegments() {
  synchronizeAndProcessEvents();
  stats_.num_sync_all_streams += 1;
  std::vector<Block*> segments;
  for (BlockPool* pool : releasablePools()) {
    for (Block* block : pool->blocks) {
      if (!block->isSplit()) segments.push_back(block);
    }
  }
  std::exception_ptr error;
  for (Block* block : segments) {
    try {
      DeviceScope scope(device_);
      OPENREG_CHECK(orFree(block->ptr));
    } catch (...) {
      if (!error) error = std::current_exception();
      orPointerAttributes attributes;
      if (orPointerGetAttributes(&attributes, block->ptr) != orErrorInvalidDevicePointer) continue;
    }
    block->pool->blocks.erase(block);
    stats_.num_device_free += 1;
    for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
      stats_.segment[t].decrease(1);
      stats_.reserved_bytes[t].decrease(block->size);
    });
    if (MemoryHistory::recording()) {
      MemoryHistory::record(TraceAction::SegmentFree, device_, block->ptr, block->size,
                            block->stream);
    }
    countPrivateSegment(*block->pool, block->size, /*added=*/false);
    delete block;
  }
  erasePrivatePoolsReleased();
  if (error) std::rethrow_exception(error);
}

void DeviceCachingAllocator::emptyCache() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  releaseCachedSegments();
}

void DeviceCachingAllocator::throwOutOfMemory(size_t requested, size_t segmentSize,
                                              const std::string& note) {
  stats_.num_ooms += 1;
  size_t free = 0, total = 0;
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemGetInfo(&free, &total));
  }
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::Oom, device_, reinterpret_cast<void*>(free), requested,
                          getCurrentOpenRegStream(device_).unwrap());
  }
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  const size_t allocated = static_cast<size_t>(stats_.allocated_bytes[aggregate].current);
  const size_t reserved = static_cast<size_t>(stats_.reserved_bytes[aggregate].current);
  TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory on device ",
                   static_cast<int>(device_), ": tried to allocate ", formatBytes(requested),
                   " (a ", formatBytes(segmentSize), " segment)", note, ". The device has ",
                   formatBytes(total), " in total and ", formatBytes(free), " free; PyTorch holds ",
                   formatBytes(allocated), " in tensors and ", formatBytes(reserved),
                   " reserved by the caching allocator. Free tensors you no longer "
                   "need, or set OPENREG_DEVICE_MEMORY for a larger device.");
}

DeviceStats DeviceCachingAllocator::getStats() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return stats_;
}

// Applies `fn` to every Stat of every stat type.
template <class F>
void forEachStat(DeviceStats& stats, F fn) {
  for (size_t t = 0; t < static_cast<size_t>(StatType::NUM_TYPES); ++t) {
    for (auto* stat :
         {&stats.allocation[t], &stats.segment[t], &stats.active[t], &stats.inactive_split[t],
          &stats.allocated_bytes[t], &stats.reserved_bytes[t], &stats.active_bytes[t],
          &stats.inactive_split_bytes[t], &stats.requested_bytes[t]}) {
      fn(*stat);
    }
    for (auto& [id, stat] : stats.reserved_bytes_by_private_pools) fn(stat[t]);
  }
}

void DeviceCachingAllocator::resetAccumulatedStats() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

void DeviceCachingAllocator::resetPeakStats() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

// [marker: allocator-snapshot]
std::vector<SegmentInfo> DeviceCachingAllocator::snapshot() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<Block*> heads;
  auto addHead = [&](Block* b) {
    if (b->prev == nullptr) heads.push_back(b);
  };
  for (Block* b : smallBlocks_.blocks) addHead(b);
  for (Block* b : largeBlocks_.blocks) addHead(b);
  for (Block* b : activeBlocks_) addHead(b);
  std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
  std::vector<SegmentInfo> segments;
  for (Block* head : heads) {
    SegmentInfo segment;
    segment.device = device_;
    segment.address = reinterpret_cast<size_t>(head->ptr);
    segment.stream = OpenRegStream(head->stream).stream();
    segment.is_large = !head->pool->isSmall;
    for (Block* b = head; b != nullptr; b = b->next) {
      c10::CachingDeviceAllocator::BlockInfo info;
      info.size = b->size;
      info.requested_size = b->allocated ? b->requested : 0;
      info.allocated = b->allocated;
      info.active = b->allocated || b->pendingEvents > 0;
      segment.total_size += b->size;
      if (info.allocated) {
        segment.allocated_size += b->size;
        segment.requested_size += b->requested;
      }
      if (info.active) segment.active_size += b->size;
      segment.blocks.push_back(info);
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

}  // namespace openreg::allocator
