#include "Pool.h"

#include <openreg/task.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

namespace openreg::pool {
namespace {

// Classes 64 bytes apart, so that a queue node (about 150 bytes) wastes less than a cache line.
constexpr std::size_t kStep = 64;
constexpr int kClasses = 32;  // 64 bytes to 2 KiB
constexpr std::size_t kLargest = kStep * kClasses;
// Blocks a cache keeps per class beyond what is in flight; more go back to the system.
constexpr std::size_t kKeep = 4096;

struct Cache;

// In front of every block; keeps the payload aligned to max_align_t.
struct alignas(std::max_align_t) Header {
  Cache* owner;  // nullptr: from operator new, not pooled
  int sizeClass;
};

struct FreeBlock {
  FreeBlock* next;
};

struct Cache {
  FreeBlock* local[kClasses] = {};        // owner only
  std::size_t localCount[kClasses] = {};  // owner only
  std::atomic<FreeBlock*> remote[kClasses] = {};
  Cache* nextOrphan = nullptr;  // guarded by gOrphansMutex
};

std::mutex gOrphansMutex;
Cache* gOrphans = nullptr;  // caches of exited threads, adopted by new ones

Header* headerOf(void* p) {
  return reinterpret_cast<Header*>(static_cast<char*>(p) - sizeof(Header));
}

void freeToSystem(FreeBlock* b) {
  ::operator delete(headerOf(b));
}

struct Holder {
  Cache* cache = nullptr;
  ~Holder() {
    if (cache == nullptr) return;
    std::lock_guard<std::mutex> lock(gOrphansMutex);
    cache->nextOrphan = gOrphans;
    gOrphans = cache;
  }
};

thread_local Cache* tCache = nullptr;  // trivially initialized: no guard on the fast path
thread_local Holder tHolder;

Cache* threadCache() {
  if (tCache != nullptr) return tCache;
  Cache* cache = nullptr;
  {
    std::lock_guard<std::mutex> lock(gOrphansMutex);
    if (gOrphans != nullptr) {
      cache = gOrphans;
      gOrphans = cache->nextOrphan;
      cache->nextOrphan = nullptr;
    }
  }
  if (cache == nullptr) cache = new Cache();
  tHolder.cache = cache;
  tCache = cache;
  return cache;
}

int classOf(std::size_t bytes) {
  return bytes == 0 ? 0 : static_cast<int>((bytes - 1) / kStep);
}

}  // namespace

void* allocate(std::size_t bytes) {
  if (bytes > kLargest) {
    auto* h = static_cast<Header*>(::operator new(sizeof(Header) + bytes));
    h->owner = nullptr;
    h->sizeClass = -1;
    return h + 1;
  }
  const int c = classOf(bytes);
  Cache* cache = threadCache();
  FreeBlock* b = cache->local[c];
  if (b == nullptr) {
    // Take back everything other threads returned, at once. Not counted (that would touch
    // every block now): localCount only bounds what this thread frees to itself.
    b = cache->remote[c].exchange(nullptr, std::memory_order_acquire);
    cache->localCount[c] = 0;
  }
  if (b != nullptr) {
    cache->local[c] = b->next;
    if (cache->localCount[c] > 0) --cache->localCount[c];
    return b;
  }
  auto* h = static_cast<Header*>(::operator new(sizeof(Header) + kStep * (c + 1)));
  h->owner = cache;
  h->sizeClass = c;
  return h + 1;
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  Header* h = headerOf(p);
  if (h->owner == nullptr) {
    ::operator delete(h);
    return;
  }
  const int c = h->sizeClass;
  auto* b = static_cast<FreeBlock*>(p);
  Cache* owner = h->owner;
  if (owner == tCache) {
    if (owner->localCount[c] >= kKeep) {
      freeToSystem(b);
      return;
    }
    b->next = owner->local[c];
    owner->local[c] = b;
    ++owner->localCount[c];
    return;
  }
  FreeBlock* top = owner->remote[c].load(std::memory_order_relaxed);
  do {
    b->next = top;
  } while (!owner->remote[c].compare_exchange_weak(top, b, std::memory_order_release,
                                                   std::memory_order_relaxed));
}

void ReleaseBatch::add(void* p) noexcept {
  Header* h = headerOf(p);
  if (h->owner == nullptr) {
    ::operator delete(h);
    return;
  }
  if (h->owner != owner_ || h->sizeClass != sizeClass_ || count_ == 64) flush();
  owner_ = h->owner;
  sizeClass_ = h->sizeClass;
  auto* b = static_cast<FreeBlock*>(p);
  b->next = static_cast<FreeBlock*>(first_);
  first_ = b;
  if (last_ == nullptr) last_ = b;
  ++count_;
}

void ReleaseBatch::flush() noexcept {
  if (count_ == 0) return;
  auto* owner = static_cast<Cache*>(owner_);
  auto* first = static_cast<FreeBlock*>(first_);
  auto* last = static_cast<FreeBlock*>(last_);
  const int c = sizeClass_;
  if (owner == tCache) {
    last->next = owner->local[c];
    owner->local[c] = first;
    owner->localCount[c] += static_cast<std::size_t>(count_);
  } else {
    FreeBlock* top = owner->remote[c].load(std::memory_order_relaxed);
    do {
      last->next = top;
    } while (!owner->remote[c].compare_exchange_weak(top, first, std::memory_order_release,
                                                     std::memory_order_relaxed));
  }
  owner_ = nullptr;
  sizeClass_ = -1;
  first_ = last_ = nullptr;
  count_ = 0;
}

}  // namespace openreg::pool

namespace openreg::detail {

void* allocateTaskStorage(std::size_t bytes) {
  return pool::allocate(bytes);
}

void releaseTaskStorage(void* p) noexcept {
  pool::release(p);
}

}  // namespace openreg::detail
