// OpenRegStream: a c10::Stream of the openreg device, and the per-thread current stream.
//
// Note [OpenReg stream ids]
// A c10::StreamId is the runtime's orStream_t handle value, except that every device's default
// stream has id 0. Handles already validate themselves (see Note [Handle validation] in
// runtime/src/HandleTable.h), so no table maps ids to streams, and an id from a destroyed
// external stream fails with a clear error instead of reaching freed memory. Messages and profiles
// name a stream by OR_STREAM_NAME_FORMAT ("openreg:<device> stream <n>", streamNumber): n is 0
// for the default stream, else the number of the handle's slot (its high 32 bits, Note [Handle
// validation]), small and unique among the live streams, where the id is a 64-bit number.
//
// Pools: per device, kStreamsPerPool streams of each priority (normal and high), created on first
// use and handed out round robin, as CUDA's pools are. The current stream is per thread and per
// device, and starts as the default stream.
#pragma once

#include <c10/core/Stream.h>
#include <openreg/runtime.h>

#include <ostream>

#include "core/Macros.h"

namespace openreg {

constexpr int kStreamsPerPool = 8;

// What an error about a stream of another device type tells the caller to pass instead.
inline constexpr const char* kWhatStreamToPass =
    "Pass an openreg stream, such as torch.openreg.Stream(), torch.Stream(device=\"" OR_DEVICE_NAME
    "\") or "
    "torch.accelerator.current_stream().";

class OPENREG_TORCH_API OpenRegStream {
 public:
  // Throws ValueError unless `stream` is an openreg stream, naming its device type.
  explicit OpenRegStream(c10::Stream stream);

  c10::Stream unwrap() const { return stream_; }
  operator c10::Stream() const { return stream_; }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::Device device() const { return stream_.device(); }
  c10::StreamId id() const { return stream_.id(); }
  bool operator==(const OpenRegStream& other) const { return stream_ == other.stream_; }

  // The runtime handle (never 0: the default stream's own handle is returned).
  orStream_t stream() const;
  int priority() const;
  // True if all work queued so far has completed.
  bool query() const;
  // Blocks until all work queued so far has completed; raises a task error, if any.
  void synchronize() const;

 private:
  c10::Stream stream_;
};

OPENREG_TORCH_API OpenRegStream getDefaultOpenRegStream(c10::DeviceIndex device = -1);
OPENREG_TORCH_API OpenRegStream getCurrentOpenRegStream(c10::DeviceIndex device = -1);
// Makes `stream` current on its device for the calling thread (the current device is unchanged).
// Throws if the stream is not live or is another device's.
OPENREG_TORCH_API void setCurrentOpenRegStream(OpenRegStream stream);
// torch.openreg.set_stream: makes `stream` current on its device and its device current. Raises
// for a stream of another device type, a bad index or an unknown id.
OPENREG_TORCH_API void setStream(const c10::Stream& stream);
OPENREG_TORCH_API OpenRegStream getStreamFromPool(bool isHighPriority = false,
                                                  c10::DeviceIndex device = -1);
// Wraps a stream created directly with the runtime. The caller keeps ownership.
OPENREG_TORCH_API OpenRegStream getStreamFromExternal(orStream_t stream, c10::DeviceIndex device);

// Keeps `stream` busy for `milliseconds` with a task that sleeps on the device worker, like
// torch.cuda._sleep: lets tests observe pending work, events not yet reached, waits that hold.
OPENREG_TORCH_API void sleepOnStream(OpenRegStream stream, int64_t milliseconds);

// The number messages and profiles give the stream of id `id` (Note [OpenReg stream ids]).
OPENREG_TORCH_API int64_t streamNumber(c10::StreamId id);

// The stream as every message names it (OR_STREAM_NAME_FORMAT).
OPENREG_TORCH_API std::ostream& operator<<(std::ostream& os, const OpenRegStream& stream);

}  // namespace openreg
