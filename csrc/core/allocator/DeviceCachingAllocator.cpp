#include "core/allocator/DeviceCachingAllocator.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/util/Exception.h>
#include <c10/util/llvmMathExtras.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <sstream>
#include <string>

#include "core/Exception.h"
#include "core/FaultInjection.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/SharedStorage.h"
#include "core/allocator/MemoryHistory.h"

namespace openreg::allocator {
namespace {

using c10::CachingAllocator::for_each_selected_stat_type;
using c10::CachingAllocator::StatType;

using Config = c10::CachingAllocator::AcceleratorAllocatorConfig;

// [marker: allocator-round-size]
// A multiple of kMinBlockSize; with roundup_power2_divisions, the next of the evenly spaced sizes
// the configuration puts between two powers of 2 (so that varying sizes reuse the same blocks).
size_t roundSize(size_t size) {
  if (size <= kMinBlockSize) return kMinBlockSize;
  const size_t divisions = Config::roundup_power2_divisions(size);
  if (divisions > 1 && size > kMinBlockSize * divisions && !c10::llvm::isPowerOf2_64(size)) {
    const size_t floor = c10::llvm::PowerOf2Floor(size);
    const size_t step = floor / divisions;
    if (step == 0) return floor << 1;
    const size_t down = size & ~(step - 1);
    return down == size ? size : down + step;
  }
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segmentSizeFor(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return Config::large_segment_size();
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// A block of max_split_size or more is never split: it serves one request of about its size
// (Note [Allocator configuration]).
bool shouldSplit(const Block* block, size_t size) {
  const size_t remaining = block->size - size;
  if (block->pool->isSmall || block->expandable != nullptr) return remaining >= kMinBlockSize;
  return size < Config::max_split_size() && remaining > kSmallSize;
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
  if (block == nullptr && allowed_ != SIZE_MAX && Config::garbage_collection_threshold() > 0.0)
    collectGarbage();
  if (block == nullptr) block = newSegment(pool, stream, size, requested);
  if (shouldSplit(block, size)) {
    Block* rest =
        newBlock(stream, block->size - size, &pool, static_cast<char*>(block->ptr) + size);
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    block->next = rest;
    rest->expandable = block->expandable;
    block->size = size;
    insertFree(rest);
  }
  // A new owner: poison a failed task left in the block is not its data (orMemReuse), from the
  // point in the stream where the new owner's work starts: work queued before may still read the
  // old owner's bytes (stream-ordered reuse), and must see their failure.
  OPENREG_CHECK(orMemReuse(block->ptr, block->size, OpenRegStream(stream).stream()));
  block->allocated = true;
  block->requested = requested;
  activeBlocks_.insert(block);
  if (block->size >= Config::max_split_size()) stats_.oversize_allocations.increase(1);
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
  if (expandsSegments(pool) &&
      expandableSegmentFor(pool, stream) != nullptr) {  // Note [Expandable segments]
    Block* block = growExpandable(pool, stream, size);
    if (block == nullptr) {
      stats_.num_alloc_retries += 1;
      ipc::collectSentBlocks(device_);
      releaseCachedSegments();
      block = growExpandable(pool, stream, size);
    }
    if (block == nullptr) throwOutOfMemory(requested, size);
    return block;
  }
  const size_t segmentSize = segmentSizeFor(size);
  Block* block = allocateSegment(pool, stream, segmentSize);
  if (block == nullptr) {
    // [marker: allocator-oom-retry]
    // Return what the cache holds and try once more, as CUDA's allocator does.
    stats_.num_alloc_retries += 1;
    ipc::collectSentBlocks(
        device_);  // blocks other processes held and let go of (core/SharedStorage.h)
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
  if (block->size >= Config::max_split_size()) stats_.oversize_allocations.decrease(1);
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
      TORCH_WARN(OR_DEVICE_NAME
                 ": freeing memory used on another stream (record_stream) could not record "
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
  // An oversize block (max_split_size or more) serves no smaller request, and no request it would
  // exceed by max_non_split_rounding_mb: CUDA's rules, which keep large blocks whole.
  const size_t maxSplit = Config::max_split_size();
  if (size < maxSplit && block->size >= maxSplit) return nullptr;
  if (size >= maxSplit && block->size >= size + Config::max_non_split_rounding_size())
    return nullptr;
  eraseFree(block);
  return block;
}

Block* DeviceCachingAllocator::allocateSegment(BlockPool& pool, c10::Stream stream,
                                               size_t segmentSize) {
  // set_per_process_memory_fraction: a segment past the allowed bytes is not asked for.
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  if (static_cast<size_t>(stats_.reserved_bytes[aggregate].current) + segmentSize > allowed_)
    return nullptr;
  void* ptr = nullptr;
  orError_t status;
  {
    DeviceScope scope(device_);
    status = orMalloc(&ptr, segmentSize);
  }
  if (status == orErrorMemoryAllocation) return nullptr;
  OPENREG_CHECK(status);
  stats_.num_device_alloc += 1;
  if (segmentSize >= Config::max_split_size()) stats_.oversize_segments.increase(1);
  for_each_selected_stat_type(statTypes(pool), [&](size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(segmentSize);
  });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::SegmentAlloc, device_, ptr, segmentSize, stream);
  }
  countPrivateSegment(pool, segmentSize, /*added=*/true);
  return newBlock(stream, segmentSize, &pool, ptr);
}

namespace {
constexpr size_t kSpares = 64;  // recycled blocks and set nodes kept, each
}  // namespace

Block* DeviceCachingAllocator::newBlock(c10::Stream stream, size_t size, BlockPool* pool,
                                        void* ptr) {
  if (spareBlocks_.empty()) return new Block(stream, size, pool, ptr);
  Block* block = spareBlocks_.back().release();
  spareBlocks_.pop_back();
  *block = Block(stream, size, pool, ptr);
  return block;
}

void DeviceCachingAllocator::deleteBlock(Block* block) {
  if (spareBlocks_.size() < kSpares) {
    spareBlocks_.emplace_back(block);
  } else {
    delete block;
  }
}

void DeviceCachingAllocator::insertFree(Block* block) {
  block->freedAt = ++frees_;
  if (spareNodes_.empty()) {
    block->pool->blocks.insert(block);
  } else {
    BlockSet::node_type node = std::move(spareNodes_.back());
    spareNodes_.pop_back();
    node.value() = block;
    block->pool->blocks.insert(std::move(node));
  }
  if (block->isSplit() && block->expandable == nullptr) {  // Note [Expandable segments]
    block->countedInactive = true;
    for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
      stats_.inactive_split[t].increase(1);
      stats_.inactive_split_bytes[t].increase(block->size);
    });
  }
}

void DeviceCachingAllocator::eraseFree(Block* block) {
  BlockSet::node_type node = block->pool->blocks.extract(block);
  if (!node.empty() && spareNodes_.size() < kSpares) spareNodes_.push_back(std::move(node));
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
  if (Block* prev = block->prev; prev != nullptr && prev->isCached()) {
    eraseFree(prev);
    block->ptr = prev->ptr;
    block->size += prev->size;
    block->prev = prev->prev;
    if (block->prev != nullptr) block->prev->next = block;
    deleteBlock(prev);
  }
  if (Block* next = block->next; next != nullptr && next->isCached()) {
    eraseFree(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    deleteBlock(next);
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
  std::vector<Block*> segments = wholeFreeSegments();
  std::exception_ptr error;
  if (releasing_ == nullptr) {
    try {
      shrinkExpandableSegments();
    } catch (...) {
      error = std::current_exception();
    }
  }
  for (Block* block : segments) {
    try {
      releaseSegment(block);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  erasePrivatePoolsReleased();
  if (error) std::rethrow_exception(error);
}

std::vector<Block*> DeviceCachingAllocator::wholeFreeSegments() {
  std::vector<Block*> segments;
  for (BlockPool* pool : releasablePools()) {
    for (Block* block : pool->blocks) {
      if (!block->isSplit() && block->expandable == nullptr) segments.push_back(block);
    }
  }
  return segments;
}

// One whole free segment back to the runtime: see releaseCachedSegments. Raises orFree's error
// after forgetting the segment if the runtime no longer knows it.
void DeviceCachingAllocator::releaseSegment(Block* block) {
  std::exception_ptr error;
  try {
    DeviceScope scope(device_);
    OPENREG_CHECK(orFree(block->ptr));
  } catch (...) {
    error = std::current_exception();
    orPointerAttributes attributes;
    if (orPointerGetAttributes(&attributes, block->ptr) != orErrorInvalidDevicePointer)
      std::rethrow_exception(error);
  }
  eraseFree(block);
  stats_.num_device_free += 1;
  if (block->size >= Config::max_split_size()) stats_.oversize_segments.decrease(1);
  for_each_selected_stat_type(statTypes(*block->pool), [&](size_t t) {
    stats_.segment[t].decrease(1);
    stats_.reserved_bytes[t].decrease(block->size);
  });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::SegmentFree, device_, block->ptr, block->size,
                          block->stream);
  }
  countPrivateSegment(*block->pool, block->size, /*added=*/false);
  deleteBlock(block);
  if (error) std::rethrow_exception(error);
}

bool DeviceCachingAllocator::expandsSegments(const BlockPool& pool) const {
  return Config::use_expandable_segments() && !pool.isSmall && pool.owner == nullptr;
}

// [marker: allocator-garbage-collection]
// garbage_collection_threshold, with a memory fraction set (as on CUDA, where it acts only then):
// when the reserved bytes pass that share of the allowed bytes, whole free segments go back to the
// runtime, those freed longest ago first, until the reserved bytes are under it again. A program
// whose sizes drift keeps its recent blocks and sheds the stale ones, without the full
// release-and-retry of an out-of-memory.
void DeviceCachingAllocator::collectGarbage() {
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  const auto target =
      static_cast<size_t>(Config::garbage_collection_threshold() * static_cast<double>(allowed_));
  auto reserved = [&] { return static_cast<size_t>(stats_.reserved_bytes[aggregate].current); };
  if (reserved() <= target) return;
  std::vector<Block*> segments = wholeFreeSegments();
  std::sort(segments.begin(), segments.end(),
            [](const Block* a, const Block* b) { return a->freedAt < b->freedAt; });
  for (Block* block : segments) {
    if (reserved() <= target) break;
    releaseSegment(block);
  }
  erasePrivatePoolsReleased();
}

void DeviceCachingAllocator::setMemoryFraction(double fraction) {
  TORCH_CHECK_VALUE(fraction >= 0.0 && fraction <= 1.0, OR_DEVICE_NAME ": invalid memory fraction ",
                    fraction, " for device ", static_cast<int>(device_),
                    ": set_per_process_memory_fraction takes a number between 0 and 1");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  size_t free = 0, total = 0;
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemGetInfo(&free, &total));
  }
  fraction_ = fraction;
  allowed_ = static_cast<size_t>(fraction * static_cast<double>(total));
}

double DeviceCachingAllocator::memoryFraction() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return fraction_;
}

void DeviceCachingAllocator::emptyCache() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  releaseCachedSegments();
}

// [marker: allocator-oom-message]
// What CUDA's message says, in openreg's terms: what was asked, what the device and the process's
// allowance leave, what PyTorch holds in tensors and in its cache, the largest free cached block,
// and the setting to try. The engine adds the operator (Note [Out of memory names the operator]).
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
  size_t largest = 0;
  for (BlockPool* pool : {&smallBlocks_, &largeBlocks_}) {
    for (const Block* block : pool->blocks) largest = std::max(largest, block->size);
  }
  std::ostringstream os;
  os << OR_DEVICE_NAME " out of memory on device " << static_cast<int>(device_)
     << ". Tried to allocate " << formatBytes(requested) << " (a " << formatBytes(segmentSize)
     << " segment)" << note << ". The device has a total capacity of " << formatBytes(total)
     << ", of which " << formatBytes(free) << " is free";
  if (allowed_ != SIZE_MAX) {
    os << "; this process is allowed " << formatBytes(allowed_)
       << " (set_per_process_memory_fraction(" << fraction_ << "))";
  }
  os << ". Of the memory PyTorch holds, " << formatBytes(allocated) << " is in tensors and "
     << formatBytes(reserved - std::min(reserved, allocated))
     << " is reserved by the caching allocator but unallocated; its largest free block is "
     << formatBytes(largest) << ".";
  if (allowed_ != SIZE_MAX && reserved + segmentSize > allowed_) {
    os << " The allowance is what stands in the way: raise it with "
          "torch.openreg.set_per_process_memory_fraction.";
  } else if (reserved - std::min(reserved, allocated) >= requested &&
             !Config::use_expandable_segments()) {
    os << " Reserved but unallocated memory is large: setting "
          "PYTORCH_OPENREG_ALLOC_CONF=expandable_segments:True may avoid the fragmentation, and "
          "torch.openreg.empty_cache() returns the cache to the device.";
  } else {
    os << " Free tensors you no longer need, or set OPENREG_DEVICE_MEMORY for a larger device.";
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, os.str());
}

DeviceStats DeviceCachingAllocator::getStats() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  DeviceStats stats = stats_;
  // The setting in force, as CUDA reports it: -1 when unset (no limit).
  stats.max_split_size = static_cast<int64_t>(Config::max_split_size());
  return stats;
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
  fn(stats.oversize_allocations);  // reset with the others, as CUDA's allocator does
  fn(stats.oversize_segments);
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
  // An expandable segment's contiguous mapped ranges are segments of their own, as CUDA reports
  // them (Note [Expandable segments]); an unmapped block is in no pool's free set and never active.
  auto addHead = [&](Block* b) {
    if (b->prev == nullptr || !b->prev->mapped) heads.push_back(b);
  };
  for (Block* b : smallBlocks_.blocks) addHead(b);
  for (Block* b : largeBlocks_.blocks) addHead(b);
  for (auto& [id, pool] : privatePools_.pools) {  // a private segment may hold no live block
    for (Block* b : pool->small.blocks) addHead(b);
    for (Block* b : pool->large.blocks) addHead(b);
  }
  for (Block* b : activeBlocks_) addHead(b);
  std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
  std::vector<SegmentInfo> segments;
  for (Block* head : heads) {
    SegmentInfo segment;
    segment.device = device_;
    segment.address = reinterpret_cast<size_t>(head->ptr);
    segment.stream = OpenRegStream(head->stream).stream();
    segment.is_large = !head->pool->isSmall;
    segment.is_expandable = head->expandable != nullptr;
    if (head->pool->owner != nullptr) segment.owner_private_pool_id = head->pool->owner->id;
    for (Block* b = head; b != nullptr && b->mapped; b = b->next) {
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
