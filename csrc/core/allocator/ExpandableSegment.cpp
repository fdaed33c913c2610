// The expandable-segment half of DeviceCachingAllocator.
//
// [marker: expandable-segments]
// Note [Expandable segments]
// With expandable_segments:True (Note [Allocator configuration]), the large pool of each stream
// gets one segment that reserves as much of the device's address space as the device has memory
// (orMemAddressReserve: no memory is charged) and maps memory into it, granule by granule
// (orMemMap, 2 MiB), as it grows. A request no free block serves grows the segment at its end:
// by what the free block at the end lacks, or by the whole request. Blocks in it split down to
// 512 bytes and merge like any others. So a program whose tensor sizes change every step (variable
// sequence lengths) keeps one contiguous range, where fixed segments leave each size's leftovers
// stranded: the bench shows reserved / peak allocated with and without (docs/memory.md).
// empty_cache() and the out-of-memory retry unmap the free block at the end, in whole granules,
// after the segment's stream has finished its queued work (orMemUnmap does not wait: a block freed
// in stream order may still be read by queued kernels). Only the end shrinks: a free block between
// live ones stays mapped, for the next request of its size. Small requests (1 MiB and less) and
// graph pools keep fixed segments. The reservation lives as long as the allocator.
#include <openreg/runtime.h>

#include <algorithm>
#include <memory>

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

}  // namespace

ExpandableSegment* DeviceCachingAllocator::expandableSegmentFor(c10::Stream stream) {
  for (const auto& segment : expandable_) {
    if (segment->stream == stream) return segment.get();
  }
  size_t free = 0, total = 0;
  auto segment = std::make_unique<ExpandableSegment>(stream);
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemGetInfo(&free, &total));
    segment->reserved = roundUp(total, granularity());
    const orError_t status = orMemAddressReserve(&segment->base, segment->reserved);
    if (status == orErrorMemoryAllocation) return nullptr;  // no address space left
    OPENREG_CHECK(status);
  }
  expandable_.push_back(std::move(segment));
  return expandable_.back().get();
}

// [marker: expandable-grow]
Block* DeviceCachingAllocator::growExpandable(BlockPool& pool, c10::Stream stream, size_t size) {
  ExpandableSegment* segment = expandableSegmentFor(stream);
  if (segment == nullptr) return nullptr;
  Block* last = segment->last;
  // A free block at the end grows into the request; one large enough already was passed over by
  // takeFreeBlock (max_split_size's rules), so the request goes after it.
  const bool extendLast = last != nullptr && last->isFree() && last->size < size;
  const size_t bytes = roundUp(extendLast ? size - last->size : size, granularity());
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  if (segment->mapped + bytes > segment->reserved ||
      static_cast<size_t>(stats_.reserved_bytes[aggregate].current) + bytes > allowed_)
    return nullptr;
  void* at = static_cast<char*>(segment->base) + segment->mapped;
  orError_t status;
  {
    DeviceScope scope(device_);
    status = orMemMap(at, bytes);
  }
  if (status == orErrorMemoryAllocation) return nullptr;
  OPENREG_CHECK(status);
  if (segment->mapped == 0) {
    for_each_selected_stat_type(statTypes(pool), [&](size_t t) { stats_.segment[t].increase(1); });
  }
  segment->mapped += bytes;
  stats_.num_device_alloc += 1;
  for_each_selected_stat_type(statTypes(pool),
                              [&](size_t t) { stats_.reserved_bytes[t].increase(bytes); });
  if (MemoryHistory::recording()) {
    MemoryHistory::record(TraceAction::SegmentMap, device_, at, bytes, stream);
  }
  if (extendLast) {
    eraseFree(last);
    last->size += bytes;
    return last;
  }
  Block* block = newBlock(stream, bytes, &pool, at);
  block->expandable = segment;
  block->prev = last;
  if (last != nullptr) last->next = block;
  segment->last = block;
  return block;
}

// [marker: expandable-shrink]
void DeviceCachingAllocator::shrinkExpandableSegments() {
  for (const auto& owned : expandable_) {
    ExpandableSegment* segment = owned.get();
    Block* last = segment->last;
    if (last == nullptr || !last->isFree()) continue;
    char* end = static_cast<char*>(segment->base) + segment->mapped;
    char* from = static_cast<char*>(segment->base) +
                 roundUp(static_cast<size_t>(static_cast<char*>(last->ptr) -
                                             static_cast<char*>(segment->base)),
                         granularity());
    const size_t bytes = static_cast<size_t>(end - from);
    if (bytes == 0) continue;
    waitForStreamWork(segment->stream);  // its queued work may still read the block
    {
      DeviceScope scope(device_);
      OPENREG_CHECK(orMemUnmap(from, bytes));
    }
    segment->mapped -= bytes;
    stats_.num_device_free += 1;
    for_each_selected_stat_type(statTypes(*last->pool), [&](size_t t) {
      stats_.reserved_bytes[t].decrease(bytes);
      if (segment->mapped == 0) stats_.segment[t].decrease(1);
    });
    if (MemoryHistory::recording()) {
      MemoryHistory::record(TraceAction::SegmentUnmap, device_, from, bytes, segment->stream);
    }
    eraseFree(last);
    if (last->size == bytes) {  // the whole block was unmapped
      segment->last = last->prev;
      if (last->prev != nullptr) last->prev->next = nullptr;
      deleteBlock(last);
    } else {
      last->size -= bytes;
      insertFree(last);
    }
  }
}

}  // namespace openreg::allocator
