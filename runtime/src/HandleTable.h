// HandleTable<T>: maps opaque C handles (orStream_t, orEvent_t) to live objects.
//
// Note [Handle validation]
// A handle is not a pointer: it encodes (slot index + 1) << 32 | generation. Destroying a handle
// bumps its slot's generation, so a stale handle, even after its slot is reused, fails lookup
// with orErrorInvalidResourceHandle instead of reaching freed or foreign memory. Lookup takes no
// lock: slots live in chunks that are allocated once and never freed, and a slot's generation and
// object pointer are atomics. The table owns each object through a shared_ptr; the runtime's own
// machinery (queued work, parked streams) keeps further references, so destroying a handle never
// frees an object that work still uses.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace openreg {

template <class T>
class HandleTable {
 public:
  HandleTable() = default;
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // Registers `object` and returns its handle value (never 0), or 0 when the table is full.
  std::uint64_t insert(std::shared_ptr<T> object) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (next_ == kChunkSize * kMaxChunks) return 0;
      index = next_++;
      if (index % kChunkSize == 0) chunks_[index / kChunkSize].store(new Slot[kChunkSize]);
    }
    Slot& slot = slotAt(index);
    slot.object = std::move(object);
    slot.raw.store(slot.object.get(), std::memory_order_release);
    return (std::uint64_t{index} + 1) << 32 | slot.generation.load(std::memory_order_relaxed);
  }

  // The number of `handle`'s slot (its index + 1, never 0): what messages name a stream or an
  // event by, small and unique among the live ones, where the handle is a 64-bit number.
  static std::uint32_t slotNumber(std::uint64_t handle) {
    return static_cast<std::uint32_t>(handle >> 32);
  }

  // The object behind `handle`, or nullptr if the handle is not live. Lock-free.
  T* find(std::uint64_t handle) const {
    Slot* slot = slotFor(handle);
    if (slot == nullptr) return nullptr;
    T* object = slot->raw.load(std::memory_order_acquire);
    if (slot->generation.load(std::memory_order_acquire) != static_cast<std::uint32_t>(handle)) {
      return nullptr;
    }
    return object;
  }

  // A reference to the object behind `handle`, or nullptr if the handle is not live.
  std::shared_ptr<T> share(std::uint64_t handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot* slot = slotFor(handle);
    if (slot == nullptr ||
        slot->generation.load(std::memory_order_relaxed) != static_cast<std::uint32_t>(handle)) {
      return nullptr;
    }
    return slot->object;
  }

  // Unregisters `handle` and hands back the table's reference, or nullptr if it was not live.
  std::shared_ptr<T> erase(std::uint64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot* slot = slotFor(handle);
    if (slot == nullptr ||
        slot->generation.load(std::memory_order_relaxed) != static_cast<std::uint32_t>(handle) ||
        slot->object == nullptr) {
      return nullptr;
    }
    std::uint32_t next = slot->generation.load(std::memory_order_relaxed) + 1;
    slot->generation.store(next == 0 ? 1 : next, std::memory_order_release);
    slot->raw.store(nullptr, std::memory_order_release);
    free_.push_back(static_cast<std::uint32_t>((handle >> 32) - 1));
    return std::move(slot->object);
  }

 private:
  static constexpr std::uint32_t kChunkSize = 1024;
  static constexpr std::uint32_t kMaxChunks = 4096;  // 4M live handles

  struct Slot {
    std::atomic<std::uint32_t> generation{1};
    std::atomic<T*> raw{nullptr};
    std::shared_ptr<T> object;  // guarded by mutex_
  };

  Slot& slotAt(std::uint32_t index) const {
    return chunks_[index / kChunkSize].load(std::memory_order_acquire)[index % kChunkSize];
  }

  Slot* slotFor(std::uint64_t handle) const {
    const std::uint64_t encoded = handle >> 32;
    if (encoded == 0 || encoded > std::uint64_t{kChunkSize} * kMaxChunks) return nullptr;
    const std::uint64_t index = encoded - 1;
    Slot* chunk = chunks_[index / kChunkSize].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : &chunk[index % kChunkSize];
  }

  mutable std::mutex mutex_;
  std::uint32_t next_ = 0;           // guarded by mutex_
  std::vector<std::uint32_t> free_;  // guarded by mutex_
  std::array<std::atomic<Slot*>, kMaxChunks> chunks_{};
};

}  // namespace openreg
