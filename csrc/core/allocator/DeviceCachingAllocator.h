// DeviceCachingAllocator: the caching allocator of one openreg device.
//
// Note [Caching allocator]
// Device memory comes from the runtime in segments (orMalloc), which are carved into blocks.
// A freed block goes back to its pool, not to the runtime, and is reused at once by the next
// request on the same stream: work on one stream runs in order, so the new owner's work cannot
// overtake the old owner's. A block that was used on other streams (record_stream) is reused only
// after an event recorded on each of those streams at free time has completed. Free neighbours
// merge; empty_cache() returns whole free segments to the runtime. So a steady-state loop that
// frees and reallocates the same sizes makes no runtime call at all (num_device_alloc stays put).
//
// When a segment cannot be had, the allocator releases its cached segments and tries again. If
// the size class's segment still cannot be had, it takes the smallest segment that holds the
// request: a request that fits the device never fails because its segment was rounded up (a
// 4 MiB tensor asks for a 20 MiB segment, more than a 16 MiB device has). If that fails too it
// raises torch.OutOfMemoryError naming the device, the request, what PyTorch holds and what the
// device has left (allocator-oom-message in DeviceCachingAllocator.cpp); by then the cache has
// gone back to the runtime and num_ooms and num_alloc_retries have counted it.
//
// The sizes, splitting and garbage collection follow the configuration (Note [Allocator
// configuration] in AllocatorConfig.h): roundup_power2_divisions rounds requests up to a few sizes
// per power of 2; a block of max_split_size_mb or more is never split and serves only a request
// close to its size; set_per_process_memory_fraction caps the segments' total, and
// garbage_collection_threshold then sheds the oldest free segments before that cap is reached.
//
// Note [A free never throws]
// free() runs from the DataPtr deleter, in tensor destructors, so it is noexcept and every path
// under it must not throw. Freeing a block used on other streams records an event on each of
// them; where that fails (a child forked after the parent used the device has no workers, so
// every event call fails there), the free waits for that stream instead, ignoring its errors,
// and where even that is impossible (the forked child again) the block goes back to its pool at
// once: no work can still be using it. It warns once per process.
//
// Threading: one recursive mutex per device (a free may run from a tensor destructor inside the
// allocator's own callers). Never takes the GIL, never calls Python.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <c10/util/flat_hash_map.h>
#include <openreg/runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/Macros.h"
#include "core/allocator/Block.h"
#include "core/allocator/PrivatePool.h"

namespace openreg::allocator {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::SegmentInfo;

class OPENREG_TORCH_API DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(c10::DeviceIndex device);

  // A block of at least `size` bytes for work on `stream`. Throws c10::OutOfMemoryError.
  Block* malloc(size_t size, c10::Stream stream);
  // Never throws: see Note [A free never throws].
  void free(Block* block) noexcept;
  // Marks `block` as used on `stream`, so that a free waits for the work queued there.
  void recordStream(Block* block, c10::Stream stream);
  // Returns every fully free segment to the runtime. Raises the runtime's first error, after
  // trying every segment; the statistics count only the segments the runtime released.
  void emptyCache();

  // set_per_process_memory_fraction: segments past fraction x capacity are refused (an
  // out-of-memory error); 1 by default.
  void setMemoryFraction(double fraction);
  double memoryFraction();

  DeviceStats getStats();
  void resetAccumulatedStats();
  void resetPeakStats();
  std::vector<SegmentInfo> snapshot();

  // Private pools (Note [Private pools] in PrivatePool.h; defined in PrivatePool.cpp).
  // Routes the allocations of capture `captureId` to pool `id` (created, or one more use of it).
  void beginAllocateToPool(c10::MempoolId_t id, unsigned long long captureId,
                           orStreamCaptureMode mode);
  // The capture ended: its pool serves no more allocations (it keeps its memory).
  void endAllocateToPool(c10::MempoolId_t id);
  // One use of the pool fewer; at none, its free segments go back to the runtime.
  void releasePool(c10::MempoolId_t id);
  // MemPool (marker mem-pool in PrivatePool.cpp): one use more, creating the pool; the calling
  // thread's allocations into the pool (one use more) and back (that use released).
  void retainPool(c10::MempoolId_t id);
  void beginAllocateThreadToPool(c10::MempoolId_t id);
  void endAllocateThreadToPool(c10::MempoolId_t id);
  int poolUseCount(c10::MempoolId_t id);

 private:
  using StatTypes = c10::CachingAllocator::StatTypes;

  StatTypes statTypes(const BlockPool& pool) const;
  Block* takeFreeBlock(BlockPool& pool, c10::Stream stream, size_t size);
  Block* newSegment(BlockPool& pool, c10::Stream stream, size_t size, size_t requested);
  Block* allocateSegment(BlockPool& pool, c10::Stream stream, size_t segmentSize);
  bool recordFreeEvent(Block* block, c10::Stream use) noexcept;
  void waitForUse(c10::Stream use) noexcept;
  void insertFree(Block* block);
  void eraseFree(Block* block);
  // Block objects and free-set nodes, recycled: a steady loop splits a block on every allocation
  // and merges it back on every free, and their heap allocations showed in the engine's profile.
  Block* newBlock(c10::Stream stream, size_t size, BlockPool* pool, void* ptr);
  void deleteBlock(Block* block);
  void freeBlock(Block* block);
  void processEvents();
  void synchronizeAndProcessEvents();
  void releaseCachedSegments();
  std::vector<Block*> wholeFreeSegments();
  void releaseSegment(Block* block);
  void collectGarbage();
  // Expandable segments (ExpandableSegment.cpp).
  bool expandsSegments(const BlockPool& pool) const;
  ExpandableSegment* expandableSegmentFor(BlockPool& pool, c10::Stream stream);
  Block* growExpandable(BlockPool& pool, c10::Stream stream, size_t size);
  Block* mapHole(Block* hole, size_t bytes);
  void shrinkExpandableSegments();
  void unmapFree(ExpandableSegment& segment, Block* block);
  void countMapping(ExpandableSegment& segment, const BlockPool& pool, const void* ptr,
                    size_t bytes, bool mapped);
  BlockPool& poolFor(size_t size, c10::Stream stream);
  // What releaseCachedSegments returns: the shared pools and the private pools no graph uses, or
  // only releasing_ while releasePool runs.
  std::vector<BlockPool*> releasablePools();
  void countPrivateSegment(const BlockPool& pool, size_t bytes, bool added);
  void erasePrivatePoolsReleased();
  [[noreturn]] void throwOutOfMemory(size_t requested, size_t segmentSize,
                                     const std::string& note = {});

  const c10::DeviceIndex device_;
  std::recursive_mutex mutex_;
  DeviceStats stats_;
  BlockPool smallBlocks_{true};
  BlockPool largeBlocks_{false};
  ska::flat_hash_set<Block*> activeBlocks_;      // allocated, or freed with events pending
  std::vector<BlockSet::node_type> spareNodes_;  // see newBlock
  std::vector<std::unique_ptr<Block>> spareBlocks_;
  std::deque<std::pair<orEvent_t, Block*>> pending_;  // events a freed block waits for
  PrivatePools privatePools_;
  PrivatePool* releasing_ = nullptr;  // set by releasePool around its releaseCachedSegments
  double fraction_ = 1.0;             // set_per_process_memory_fraction
  size_t allowed_ = SIZE_MAX;         // bytes the segments may total; SIZE_MAX: no limit set
  unsigned long long frees_ = 0;      // blocks made free so far: their ages (Block::freedAt)
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_;  // one per stream, large pool
};

}  // namespace openreg::allocator
