// Growing device storage, for resize_, set_ and UntypedStorage.resize_.
#pragma once

#include <c10/core/StorageImpl.h>

#include "core/Macros.h"

namespace openreg {

// Gives `storage` `newBytes` bytes: allocates a new block on the storage's device, copies the old
// contents that fit (asynchronously, on the current stream) and swaps the data pointer. The old
// block is freed in stream order (record_stream on the copying stream).
OPENREG_TORCH_API void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes);

}  // namespace openreg
