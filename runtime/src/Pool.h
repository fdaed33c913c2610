// Recycled memory for what a launch allocates: stream queue nodes and task callables too large
// for openreg::Task's inline storage.
//
// Note [Recycled launch memory]
// Every launch allocates on the host thread and frees on a device worker. With malloc that is a
// cross-thread free each time: glibc's per-thread cache fills on the worker and empties on the
// host, so both sides end up in the shared arena under its lock. Instead each thread owns a cache
// of blocks in size classes 64 bytes apart (up to 2 KiB). A thread allocates from its own cache
// without any atomic operation; a block freed by another thread goes back to its owner through a
// lock-free stack per size class (a push with compare-and-swap), which the owner takes whole, with
// one exchange, when its own list runs dry. Only the owner pops, so the stack has no ABA problem.
// A thread that exits leaves its cache to the next new thread (blocks in flight still find
// their way back to it), so caches are never freed: memory held is the peak of blocks in flight
// per thread, which the stream's bounded queue (Note [Bounded queues] in Stream.cpp) limits for
// host threads. Larger requests go to operator new.
#pragma once

#include <cstddef>

namespace openreg::pool {

// Memory for `bytes`, aligned to alignof(std::max_align_t). Throws std::bad_alloc.
void* allocate(std::size_t bytes);
// Returns memory from allocate(), from any thread.
void release(void* p) noexcept;

// Releases from one thread, gathered per owner and size class and given back with one atomic
// operation per batch instead of one per block (a worker frees a queue node per operation).
class ReleaseBatch {
 public:
  ReleaseBatch() = default;
  ReleaseBatch(const ReleaseBatch&) = delete;
  ReleaseBatch& operator=(const ReleaseBatch&) = delete;
  ~ReleaseBatch() { flush(); }
  void add(void* p) noexcept;
  void flush() noexcept;

 private:
  void* owner_ = nullptr;
  int sizeClass_ = -1;
  void* first_ = nullptr;
  void* last_ = nullptr;
  int count_ = 0;
};

// For std::allocate_shared: a shared object and its control block in one recycled block.
template <class T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { pool::release(p); }
  template <class U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace openreg::pool
