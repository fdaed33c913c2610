// The expandable-segment half of DeviceCachingAllocator.
//
// [marker: expandable-segments]
// Note [Expandable segments]
// With expandable_segments:True (Note [Allocator configuration]), the large pool of each stream
// gets one segment that reserves twice as much of the device's address space as the device has
// memory (orMemAddressReserve: no memory is charged) and maps memory into it granule by granule
// (orMemMap, 2 MiB), wherever its blocks need it, as CUDA's expandable segments do (CUDA reserves
// 1.125 times: a hole's memory is mapped again past live blocks, and the range must have room
// there). A device's reservations may total 7 times its capacity, so a stream that finds no address
// space left keeps fixed segments.
//
// Its blocks cover the whole reservation. A mapped block is allocated or free, and splits down to
// 512 bytes and merges like any other; an unmapped block (Block::mapped false) starts and ends on
// a granule, is in no pool's free set (no request can take it as it is) but in the segment's
// `unmapped` set, and merges only with unmapped neighbours. At first one unmapped block covers the
// reservation. The segment also records which granules are mapped, and so knows how many
// contiguous mapped ranges it has: the segment statistic counts those, and the snapshot lists
// each as a segment of its own (CUDA's snapshot does the same), so the snapshot's segments add up
// to the reserved bytes, which are the mapped bytes.
//
// A request no free block serves maps memory at the lowest address where a run of free and
// unmapped blocks holds it: a hole that empty_cache left between live blocks is filled before the
// segment grows at its end (the run's last unmapped block is the rest of the reservation). Only
// the unmapped granules the request needs are mapped; the mapped block merges with the free
// blocks beside it. Lowest address first lets the pieces of a segment merge again, as in CUDA.
//
// empty_cache() and the out-of-memory retry (releaseCachedSegments), and nothing else, as in
// CUDA, unmap every whole granule inside a free block, anywhere in the segment; a granule shared
// with an allocated block stays mapped, as a free block of its own. They first wait for the work
// queued on the segment's stream (waitForStreamWork): orMemUnmap does not wait, and a block freed
// in stream order may still be read by queued kernels. Free blocks of an expandable segment are
// not counted as inactive_split: their whole granules can always be given back (CUDA's reason).
// Small requests (1 MiB and less) and graph pools keep fixed segments. The reservation lives as
// long as the allocator.
#include <openreg/runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/allocator/DeviceCachingAllocator.h"
#include "core/allocator/MemoryHistory.h"

namespace openreg::allocator {
namespace {

using c10::CachingAllocator::for_each_selected_stat_type;
using c10::CachingAllocator::StatType;

size_t granularity() {
  static const size_t g = [] {
    size_t value = 0;
    OPENREG_CHECK(orMemGetAllocationGranularity(&value));
    return value;
  }();
  return g;
}

size_t roundUp(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t offsetOf(const ExpandableSegment& segment, const void* ptr) {
  return static_cast<size_t>(static_cast<const char*>(ptr) -
                             static_cast<const char*>(segment.base));
}

// Waits for the work queued on `stream` so far, leaving a failure of that work to the stream's
// own next synchronization (an event that carries no failure).
void waitForStreamWork(c10::Stream stream) {
  DeviceScope scope(stream.device_index());
  orEvent_t event = nullptr;
  OPENREG_CHECK(orEventCreateWithFlags(&event, orEventDisableTiming | orEventDisableFailure));
  orError_t status = orEventRecord(event, OpenRegStream(stream).stream());
  if (status == orSuccess) status = orEventSynchronize(event);
  OPENREG_WARN(orEventDestroy(event));
  OPENREG_CHECK(status);
}

// The lowest run of free blocks, mapped or not, that holds `size` bytes and starts at an unmapped
// block or at the free block just before one; nullptr if the segment has no such run.
Block* lowestRunFor(const ExpandableSegment& segment, size_t size) {
  for (Block* hole : segment.unmapped) {
    Block* start = hole->prev != nullptr && hole->prev->isCached() ? hole->prev : hole;
    size_t bytes = 0;
    for (Block* b = start; b != nullptr && b->isFree() && bytes < size; b = b->next) {
      bytes += b->size;
    }
    if (bytes >= size) return start;
  }
  return nullptr;
}

// The bytes mapping the run at `start` for `size` bytes takes: the granules its unmapped blocks
// lack, as growExpandable maps them.
size_t bytesToMap(const Block* start, size_t size) {
  size_t covered = 0, bytes = 0;
  for (const Block* b = start; covered < size; b = b->next) {
    const size_t take =
        b->mapped ? b->size : std::min(b->size, roundUp(size - covered, granularity()));
    if (!b->mapped) bytes += take;
    covered += take;
  }
  return bytes;
}

// Links `block` between `prev` and `next` (either may be null).
void link(Block* prev, Block* block, Block* next) {
  block->prev = prev;
  block->next = next;
  if (prev != nullptr) prev->next = block;
  if (next != nullptr) next->prev = block;
}

}  // namespace

ExpandableSegment* DeviceCachingAllocator::expandableSegmentFor(BlockPool& pool,
                                                                c10::Stream stream) {
  for (const auto& segment : expandable_) {
    if (segment->stream == stream) return segment.get();
  }
  size_t free = 0, total = 0;
  auto segment = std::make_unique<ExpandableSegment>(stream);
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemGetInfo(&free, &total));
    // Twice the capacity: with live blocks spread over the first capacity's worth of the range,
    // all the free memory the retry unmaps can still be mapped past them.
    segment->reserved = 2 * roundUp(total, granularity());
    const orError_t status = orMemAddressReserve(&segment->base, segment->reserved);
    if (status == orErrorMemoryAllocation) return nullptr;  // no address space left
    OPENREG_CHECK(status);
  }
  segment->granules.assign(segment->reserved / granularity(), false);
  Block* all = newBlock(stream, segment->reserved, &pool, segment->base);
  all->mapped = false;
  all->expandable = segment.get();
  segment->unmapped.insert(all);
  expandable_.push_back(std::move(segment));
  return expandable_.back().get();
}

// [marker: expandable-grow]
// A free block of at least `size` bytes, out of the free set, its memory mapped where it was not;
// nullptr if the segment has no room, the allowance or the device not the memory.
Block* DeviceCachingAllocator::growExpandable(BlockPool& pool, c10::Stream stream, size_t size) {
  ExpandableSegment* segment = expandableSegmentFor(pool, stream);
  if (segment == nullptr) return nullptr;
  Block* block = lowestRunFor(*segment, size);
  if (block == nullptr) return nullptr;
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  if (static_cast<size_t>(stats_.reserved_bytes[aggregate].current) + bytesToMap(block, size) >
      allowed_)
    return nullptr;
  if (block->mapped) {
    eraseFree(block);
  } else {
    block = mapHole(block, std::min(block->size, roundUp(size, granularity())));
    if (block == nullptr) return nullptr;
  }
  // Free and unmapped blocks alternate (neighbours of a kind merge), so what the block lacks is
  // in the unmapped block after it; mapping it merges the two, and the free block after that.
  while (block->size < size) {
    Block* hole = block->next;
    TORCH_INTERNAL_ASSERT(hole != nullptr && !hole->mapped);
    Block* grown = mapHole(hole, std::min(hole->size, roundUp(size - block->size, granularity())));
    if (grown == nullptr) {  // what was mapped stays, cached: the retry gives it back
      insertFree(block);
      return nullptr;
    }
    block = grown;
  }
  return block;
}

// Maps the first `bytes` (whole granules) of the unmapped block `hole`. Returns the mapped block
// merged with the free blocks on either side, out of the free set; nullptr, changing nothing, if
// the device has not the memory.
Block* DeviceCachingAllocator::mapHole(Block* hole, size_t bytes) {
  ExpandableSegment* segment = hole->expandable;
  orError_t status;
  {
    DeviceScope scope(device_);
    status = orMemMap(hole->ptr, bytes);
  }
  if (status == orErrorMemoryAllocation) return nullptr;
  OPENREG_CHECK(status);
  segment->unmapped.erase(hole);
  if (bytes < hole->size) {  // the rest stays unmapped
    Block* rest = newBlock(hole->stream, hole->size - bytes, hole->pool,
                           static_cast<char*>(hole->ptr) + bytes);
    rest->mapped = false;
    rest->expandable = segment;
    link(hole, rest, hole->next);
    segment->unmapped.insert(rest);
    hole->size = bytes;
  }
  hole->mapped = true;
  countMapping(*segment, *hole->pool, hole->ptr, bytes, /*mapped=*/true);
  if (Block* prev = hole->prev; prev != nullptr && prev->isCached()) {
    eraseFree(prev);
    hole->ptr = prev->ptr;
    hole->size += prev->size;
    link(prev->prev, hole, hole->next);
    deleteBlock(prev);
  }
  if (Block* next = hole->next; next != nullptr && next->isCached()) {
    eraseFree(next);
    hole->size += next->size;
    link(hole->prev, hole, next->next);
    deleteBlock(next);
  }
  return hole;
}

// [marker: expandable-shrink]
void DeviceCachingAllocator::shrinkExpandableSegments() {
  const size_t g = granularity();
  for (const auto& owned : expandable_) {
    ExpandableSegment* segment = owned.get();
    std::vector<Block*> emptied;  // free blocks holding a whole granule
    for (Block* block : largeBlocks_.blocks) {
      if (block->expandable != segment) continue;
      const size_t begin = roundUp(offsetOf(*segment, block->ptr), g);
      const size_t end = (offsetOf(*segment, block->ptr) + block->size) / g * g;
      if (begin < end) emptied.push_back(block);
    }
    if (emptied.empty()) continue;
    waitForStreamWork(segment->stream);  // its queued work may still read the blocks
    for (Block* block : emptied) unmapFree(*segment, block);
  }
}

// Unmaps the whole granules inside the free block `block`; the partial granules at its ends stay
// mapped, as free blocks of their own.
void DeviceCachingAllocator::unmapFree(ExpandableSegment& segment, Block* block) {
  const size_t g = granularity();
  char* const base = static_cast<char*>(segment.base);
  char* const begin = static_cast<char*>(block->ptr);
  char* const end = begin + block->size;
  char* const from = base + roundUp(offsetOf(segment, begin), g);
  char* const to = base + offsetOf(segment, end) / g * g;
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemUnmap(from, static_cast<size_t>(to - from)));
  }
  eraseFree(block);
  std::vector<Block*> rests;
  if (from > begin) {
    Block* before = newBlock(block->stream, static_cast<size_t>(from - begin), block->pool, begin);
    before->expandable = &segment;
    link(block->prev, before, block);
    rests.push_back(before);
  }
  if (to < end) {
    Block* after = newBlock(block->stream, static_cast<size_t>(end - to), block->pool, to);
    after->expandable = &segment;
    link(block, after, block->next);
    rests.push_back(after);
  }
  block->ptr = from;
  block->size = static_cast<size_t>(to - from);
  block->mapped = false;
  countMapping(segment, *block->pool, from, block->size, /*mapped=*/false);
  if (Block* prev = block->prev; prev != nullptr && !prev->mapped) {
    segment.unmapped.erase(prev);
    block->ptr = prev->ptr;
    block->size += prev->size;
    link(prev->prev, block, block->next);
    deleteBlock(prev);
  }
  if (Block* next = block->next; next != nullptr && !next->mapped) {
    segment.unmapped.erase(next);
    block->size += next->size;
    link(block->prev, block, next->next);
    deleteBlock(next);
  }
  segment.unmapped.insert(block);
  for (Block* rest : rests) insertFree(rest);
}

// The statistics, the granule record and the memory history of one orMemMap or orMemUnmap of
// [ptr, ptr + bytes). A segment, for the statistic, is a contiguous mapped range.
void DeviceCachingAllocator::countMapping(ExpandableSegment& segment, const BlockPool& pool,
                                          const void* ptr, size_t bytes, bool mapped) {
  const size_t first = offsetOf(segment, ptr) / granularity();
  const size_t last = first + bytes / granularity();  // one past
  const bool joinsLeft = first > 0 && segment.granules[first - 1];
  const bool joinsRight = last < segment.granules.size() && segment.granules[last];
  std::fill(segment.granules.begin() + static_cast<std::ptrdiff_t>(first),
            segment.granules.begin() + static_cast<std::ptrdiff_t>(last), mapped);
  // Mapping joins the ranges on either side, or starts one; unmapping does the reverse.
  const int ranges = 1 - static_cast<int>(joinsLeft) - static_cast<int>(joinsRight);
  const int change = mapped ? ranges : -ranges;
  if (mapped) {
    segment.mapped += bytes;
    stats_.num_device_alloc += 1;
  } else {
    segment.mapped -= bytes;
    stats_.num_device_free += 1;
  }
  for_each_selected_stat_type(statTypes(pool), [&](size_t t) {
    if (mapped) {
      stats_.reserved_bytes[t].increase(bytes);
    } else {
      stats_.reserved_bytes[t].decrease(bytes);
    }
    if (change > 0) stats_.segment[t].increase(static_cast<size_t>(change));
    if (change < 0) stats_.segment[t].decrease(static_cast<size_t>(-change));
  });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(mapped ? TraceAction::SegmentMap : TraceAction::SegmentUnmap, device_,
                          ptr, bytes, segment.stream);
  }
}

}  // namespace openreg::allocator
