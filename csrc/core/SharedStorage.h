// SharedStorage: openreg storages shared between processes (torch.multiprocessing; docs/ipc.md).
//
// Note [Sharing storages between processes]
// The runtime shares allocations (Note [Sharing device memory between processes] in
// runtime/src/Ipc.h); a storage is a block of the caching allocator inside a segment that is one
// runtime allocation. Sharing a storage sends a fresh runtime handle for its segment plus the
// block's offset and size. Each handle holds one reference, so each send holds the block:
//  - Producer: shareStorage() synchronizes the storage's device (the receiver sees every write
//    queued before the send; a pending task failure is raised here, not shipped), makes the
//    handle, and swaps the storage's DataPtr for one whose context is a SentBlock holding the
//    allocator's DataPtr and every handle sent for this storage (same address, so nothing else
//    notices). When the storage dies and a handle is still held, the SentBlock goes to a list
//    instead of freeing: the block stays out of the allocator's reach until every receiver let
//    go. collectSentBlocks() frees those whose references are all back; it runs at every share,
//    from torch.openreg.ipc_collect(), and from the caching allocator before it reports
//    out-of-memory. This is what CUDA's CudaIPCSentData and its "limbo" do, with the runtime's
//    handle in place of CUDA's reference-counter file.
//  - Consumer: openSharedStorage() maps the segment once per (exporter, segment) and keeps the
//    mapping while any storage in it lives (ImportedSegment closes it). A handle that was not
//    needed to map (the segment was mapped already) is kept unopened by the storage's context
//    and discarded when the storage dies (after every device's queued work, which may still use
//    the block through the shared mapping: orIpcDiscardMemHandle waits for it), so the producer's
//    block stays held exactly as long as a storage that shows it, and its work. Storages are cached
//    by (exporter, segment, offset, size): one block received twice is one storage, as torch's
//    shared_cache does for CUDA. An imported storage is not resizable and belongs to no allocator;
//    freeing it synchronizes every device (the close does), so record_stream is not needed on it
//    and is ignored.
// Ordering: the producer synchronizes at share time; later writes on either side reach the other
// after the writer synchronizes and says so (a queue message, an event of the host). See
// docs/ipc.md.
#pragma once

#include <c10/core/Storage.h>

#include <cstddef>
#include <optional>
#include <string>

#include "core/Macros.h"

namespace openreg::ipc {

// What a producer sends for one storage.
struct SharedStorage {
  std::string handle;  // the bytes of an orIpcMemHandle_t
  std::size_t offset;  // of the storage's first byte in the handle's allocation
  std::size_t nbytes;
};

// Shares `storage` (non-empty, openreg) as described in the note. Throws if it cannot.
OPENREG_TORCH_API SharedStorage shareStorage(const c10::Storage& storage);

// The storage a consumer sees for what shareStorage() produced in another process.
OPENREG_TORCH_API c10::Storage openSharedStorage(const std::string& handle, std::size_t offset,
                                                 std::size_t nbytes);

// Frees the blocks of storages that died while receivers held them, once every receiver let go
// (those of `device` only, if given: the caching allocator calls it holding that device's lock).
// Returns how many such blocks are still held. Never throws.
OPENREG_TORCH_API std::size_t collectSentBlocks(
    std::optional<c10::DeviceIndex> device = std::nullopt) noexcept;

// True for a DataPtr of a storage received from another process.
OPENREG_TORCH_API bool isImported(const c10::DataPtr& ptr);
// The deleter of a storage sent to other processes (its block is still the allocator's).
OPENREG_TORCH_API c10::DeleterFnPtr sentBlockDeleter();

}  // namespace openreg::ipc
