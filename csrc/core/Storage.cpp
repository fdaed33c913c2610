#include "core/Storage.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <algorithm>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/allocator/DeviceAllocator.h"

namespace openreg {

// [marker: resize-storage]
void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes) {
  TORCH_CHECK(storage->resizable(),
              OR_DEVICE_NAME ": trying to resize storage that is not resizable");
  const c10::DeviceIndex device = storage->device().index();
  DeviceScope scope(device);
  c10::DataPtr fresh = storage->allocator()->allocate(newBytes);
  const size_t keep = std::min(storage->nbytes(), newBytes);
  if (keep > 0) {
    const OpenRegStream stream = getCurrentOpenRegStream(device);
    OPENREG_CHECK(
        orMemcpyAsync(fresh.get(), storage->data(), keep, orMemcpyDeviceToDevice, stream.stream()));
    deviceAllocator().recordStream(storage->data_ptr(), stream.unwrap());
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(newBytes);
}

}  // namespace openreg
