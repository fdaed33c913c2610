// Pinned host memory for openreg: ATen's caching host allocator over orMallocHost.
//
// Blocks come from the runtime's pinned memory (registered, so copies to and from it are fully
// asynchronous) and are cached by ATen's CachingHostAllocatorImpl. A block used by an
// asynchronous copy gets an event on the copying stream (record_event, called by the copy), and
// is reused only once that event has completed. Registered for PrivateUse1 and returned by the
// hooks' getPinnedMemoryAllocator, so pin_memory(), is_pinned() and DataLoader(pin_memory=True)
// work.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

#include "core/Macros.h"

namespace openreg {

OPENREG_TORCH_API at::HostAllocator* hostAllocator();

// True if `data` points into pinned host memory (orMallocHost's): what is_pinned() answers, and
// what lets a copy from or to host memory run asynchronously.
OPENREG_TORCH_API bool isPinnedPtr(const void* data);

}  // namespace openreg
