// Blocks and pools of the device caching allocator. See Note [Caching allocator] in
// DeviceCachingAllocator.h.
#pragma once

#include <c10/core/Stream.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>
#include <unordered_set>
#include <vector>

namespace openreg::allocator {

// Size classes, as in CUDA's caching allocator: requests of at most kSmallSize bytes share
// kSmallBuffer segments (the small pool); requests up to kMinLargeAlloc share large segments;
// larger ones get a segment of their own, rounded to kRoundLarge.
constexpr size_t kMinBlockSize = 512;        // every block size is a multiple of this
constexpr size_t kSmallSize = 1 << 20;       // largest request served by the small pool
constexpr size_t kSmallBuffer = 2 << 20;     // segment size of the small pool
constexpr size_t kMinLargeAlloc = 10 << 20;  // requests below this share large segments
constexpr size_t kRoundLarge = 2 << 20;
// The segment size between kSmallSize and kMinLargeAlloc is large_segment_size_mb (20 MiB unless
// configured: Note [Allocator configuration] in AllocatorConfig.h).

struct Block;
struct PrivatePool;

// Orders blocks by address.
struct BlockAddressOrder {
  bool operator()(const Block* a, const Block* b) const;
};

// A segment that reserves a large range of the device's address space and maps memory into it
// granule by granule, wherever its blocks need it (Note [Expandable segments] in
// ExpandableSegment.cpp). Its blocks cover the whole range: mapped ones, allocated or free, and
// unmapped ones (Block::mapped false), which are in no pool's free set but in `unmapped`.
struct ExpandableSegment {
  explicit ExpandableSegment(c10::Stream stream) : stream(stream) {}
  void* base = nullptr;
  size_t reserved = 0;  // bytes of address space
  size_t mapped = 0;    // bytes mapped
  c10::Stream stream;
  std::vector<bool> granules;                    // which granules of the range are mapped
  std::set<Block*, BlockAddressOrder> unmapped;  // the unmapped blocks
};

// Orders free blocks by stream, then size, then address, so that a lookup finds the smallest
// block of the right stream that is large enough.
struct BlockComparator {
  bool operator()(const Block* a, const Block* b) const;
};

using BlockSet = std::set<Block*, BlockComparator>;

struct BlockPool {
  explicit BlockPool(bool small) : isSmall(small) {}
  BlockSet blocks;  // free blocks only
  const bool isSmall;
  PrivatePool* owner = nullptr;  // the private pool it belongs to (Note [Private pools])
};

struct Block {
  Block(c10::Stream stream, size_t size, BlockPool* pool, void* ptr)
      : stream(stream), size(size), pool(pool), ptr(ptr) {}

  c10::Stream stream;    // the stream the block was allocated on; it is reused there first
  size_t size;           // bytes in the block
  size_t requested = 0;  // bytes the caller asked for (allocated blocks)
  BlockPool* pool;
  void* ptr;                                // device address
  bool allocated = false;                   // handed out to a caller
  bool mapped = true;                       // false: an unmapped range of an expandable segment
  bool countedInactive = false;             // free, split, and counted in inactive_split stats
  int pendingEvents = 0;                    // events to complete before the block may be reused
  unsigned long long freedAt = 0;           // when it last became free (a count of frees): its age
  ExpandableSegment* expandable = nullptr;  // the expandable segment it lies in, if any
  std::set<c10::Stream, bool (*)(const c10::Stream&, const c10::Stream&)> streamUses{
      [](const c10::Stream& a, const c10::Stream& b) {
        return std::make_tuple(a.device_index(), a.id()) <
               std::make_tuple(b.device_index(), b.id());
      }};
  Block* prev = nullptr;  // neighbours within the same segment
  Block* next = nullptr;

  bool isSplit() const { return prev != nullptr || next != nullptr; }
  bool isFree() const { return !allocated && pendingEvents == 0; }
  // Free memory: in its pool's free set, a neighbour a freed block merges with.
  bool isCached() const { return mapped && isFree(); }
};

inline bool BlockComparator::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->stream.device_index(), a->stream.id(), a->size,
                         reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->stream.device_index(), b->stream.id(), b->size,
                         reinterpret_cast<uintptr_t>(b->ptr));
}

inline bool BlockAddressOrder::operator()(const Block* a, const Block* b) const {
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

}  // namespace openreg::allocator
