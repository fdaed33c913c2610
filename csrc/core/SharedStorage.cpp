// Sharing openreg storages between processes. See Note [Sharing storages between processes].
#include "core/SharedStorage.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "core/Exception.h"
#include "core/Functions.h"

namespace openreg::ipc {
namespace {

orIpcMemHandle_t toHandle(const std::string& bytes) {
  orIpcMemHandle_t handle{};
  TORCH_CHECK(bytes.size() == sizeof handle.reserved,
              OR_DEVICE_NAME ": a shared storage's handle must be ", sizeof handle.reserved,
              " bytes, not ", bytes.size());
  std::memcpy(handle.reserved, bytes.data(), sizeof handle.reserved);
  return handle;
}

// ---- producer -------------------------------------------------------------------------------

// [marker: sent-block]
// The context of a shared storage's DataPtr: the allocator's DataPtr and the handles sent.
struct SentBlock {
  c10::DataPtr original;
  std::vector<orIpcMemHandle_t> handles;

  bool released() const noexcept {
    for (const auto& h : handles) {
      // Anything but "still held" counts as released: in a child forked after initialization
      // every call fails, and there the block is the parent's memory, not ours to keep.
      if (orIpcMemHandleQuery(h) == orErrorNotReady) return false;
    }
    return true;
  }
};

std::mutex gSentMutex;          // guards the swap of a storage's DataPtr and gHeld
std::vector<SentBlock*> gHeld;  // dead storages' blocks that receivers still hold

void deleteSentBlock(void* context) noexcept {
  auto* block = static_cast<SentBlock*>(context);
  if (block->released()) {
    delete block;  // frees the allocator's block
    return;
  }
  std::lock_guard<std::mutex> lock(gSentMutex);
  gHeld.push_back(block);
}

// ---- consumer -------------------------------------------------------------------------------

// One mapping of another process's segment, closed when the last storage in it dies.
struct ImportedSegment {
  void* base = nullptr;
  ~ImportedSegment() {
    if (base != nullptr) OPENREG_WARN(orIpcCloseMemHandle(base));  // null: the open failed
  }
};

// The context of an imported storage's DataPtr.
struct ImportedBlock {
  std::shared_ptr<ImportedSegment> segment;
  bool holdsHandle = false;  // a handle kept unopened, given back when the storage dies
  orIpcMemHandle_t handle{};
};

void deleteImportedBlock(void* context) noexcept {
  auto* block = static_cast<ImportedBlock*>(context);
  if (block->holdsHandle) OPENREG_WARN(orIpcDiscardMemHandle(block->handle));
  delete block;  // the segment closes with its last storage
}

// (exporter pid, exporter memory, allocation offset)
using SegmentKey = std::tuple<int, std::uint64_t, std::size_t>;
// ... plus the storage's offset and size
using StorageKey = std::tuple<int, std::uint64_t, std::size_t, std::size_t, std::size_t>;

std::mutex gImportMutex;
std::map<SegmentKey, std::weak_ptr<ImportedSegment>> gSegments;
std::map<StorageKey, c10::weak_intrusive_ptr<c10::StorageImpl>> gStorages;

void pruneLocked() {
  for (auto it = gSegments.begin(); it != gSegments.end();) {
    it = it->second.expired() ? gSegments.erase(it) : std::next(it);
  }
  for (auto it = gStorages.begin(); it != gStorages.end();) {
    it = it->second.expired() ? gStorages.erase(it) : std::next(it);
  }
}

}  // namespace

// [marker: share-storage]
SharedStorage shareStorage(const c10::Storage& storage) {
  const c10::Device device = storage.device();
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1,
              OR_DEVICE_NAME ": shareStorage needs an openreg storage, not one on ", device);
  void* ptr = storage.mutable_data();
  TORCH_CHECK(ptr != nullptr && storage.nbytes() > 0,
              OR_DEVICE_NAME ": an empty storage has no memory to share");
  // What was queued before the send is in the memory the receiver maps; a task failure pending on
  // the device is raised to the sender now rather than shipped as data.
  device_synchronize(device.index());
  // A failure reported earlier still poisons what it wrote (docs/errors.md, "When the error state
  // ends"): the receiver would read those bytes as data, in a process that knows nothing of it.
  OPENREG_CHECK(checkHostAccesses(
      {{.ptr = ptr, .bytes = storage.nbytes(), .read = true, .write = false, .cover = false}}));
  collectSentBlocks();

  orPointerAttributes attributes;
  OPENREG_CHECK(orPointerGetAttributes(&attributes, ptr));
  // Nothing after this may fail: the handle's reference would be held with no one to give it back.
  orIpcMemHandle_t handle;
  OPENREG_CHECK(orIpcGetMemHandle(&handle, ptr));
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  {
    std::lock_guard<std::mutex> lock(gSentMutex);
    const c10::DataPtr& current = impl->data_ptr();
    if (current.get_deleter() == &deleteSentBlock) {
      static_cast<SentBlock*>(current.get_context())->handles.push_back(handle);
    } else {
      auto* sent = new SentBlock{c10::DataPtr(), {handle}};
      c10::DataPtr replacement(ptr, sent, &deleteSentBlock, device);
      sent->original = impl->set_data_ptr(std::move(replacement));
    }
  }
  SharedStorage shared;
  shared.handle.assign(reinterpret_cast<const char*>(handle.reserved), sizeof handle.reserved);
  shared.offset = static_cast<char*>(ptr) - static_cast<char*>(attributes.base);
  shared.nbytes = storage.nbytes();
  return shared;
}

std::size_t collectSentBlocks(std::optional<c10::DeviceIndex> device) noexcept {
  std::vector<SentBlock*> released;
  std::size_t held = 0;
  {
    std::lock_guard<std::mutex> lock(gSentMutex);
    std::vector<SentBlock*> still;
    for (SentBlock* block : gHeld) {
      const bool mine = !device || block->original.device().index() == *device;
      (mine && block->released() ? released : still).push_back(block);
    }
    gHeld.swap(still);
    held = gHeld.size();
  }
  // Freed outside the lock: the allocator's free takes its own locks.
  for (SentBlock* block : released) delete block;
  return held;
}

// [marker: open-shared-storage]
c10::Storage openSharedStorage(const std::string& handleBytes, std::size_t offset,
                               std::size_t nbytes) {
  const orIpcMemHandle_t handle = toHandle(handleBytes);
  orIpcMemHandleInfo info;
  OPENREG_CHECK(orIpcGetMemHandleInfo(&info, handle));
  TORCH_CHECK(offset <= info.size && nbytes <= info.size - offset,
              OR_DEVICE_NAME ": a shared storage of ", nbytes, " bytes at offset ", offset,
              " does not fit in the ", info.size, "-byte allocation its handle names");
  const SegmentKey segmentKey{info.exporterPid, info.memoryId, info.offset};
  const StorageKey storageKey{info.exporterPid, info.memoryId, info.offset, offset, nbytes};
  std::lock_guard<std::mutex> lock(gImportMutex);
  pruneLocked();
  if (auto it = gStorages.find(storageKey); it != gStorages.end()) {
    if (auto live = it->second.lock()) {
      // Received before and still alive: that storage's own handle holds the block.
      OPENREG_CHECK(orIpcDiscardMemHandle(handle));
      return c10::Storage(std::move(live));
    }
  }
  auto block = std::make_unique<ImportedBlock>();
  block->segment = gSegments[segmentKey].lock();
  if (block->segment) {
    block->holdsHandle = true;
    block->handle = handle;
  } else {
    auto segment = std::make_shared<ImportedSegment>();
    OPENREG_CHECK(orIpcOpenMemHandle(&segment->base, handle, 0));
    gSegments[segmentKey] = segment;
    block->segment = std::move(segment);
  }
  void* ptr = static_cast<char*>(block->segment->base) + offset;
  const c10::Device device(c10::DeviceType::PrivateUse1,
                           static_cast<c10::DeviceIndex>(info.device));
  c10::DataPtr data(ptr, block.release(), &deleteImportedBlock, device);
  auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                    std::move(data), /*allocator=*/nullptr,
                                                    /*resizable=*/false);
  gStorages.insert_or_assign(storageKey, c10::weak_intrusive_ptr<c10::StorageImpl>(impl));
  return c10::Storage(std::move(impl));
}

c10::DeleterFnPtr sentBlockDeleter() {
  return &deleteSentBlock;
}

bool isImported(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &deleteImportedBlock;
}

}  // namespace openreg::ipc
