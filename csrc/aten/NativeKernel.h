// How a native kernel runs ATen's CPU code on device memory: one task on the current stream.
#pragma once

#include <c10/core/Device.h>
#include <openreg/task.hpp>

#include <utility>

#include "core/Exception.h"
#include "core/Stream.h"

namespace openreg {

// Queues `task` on the current stream of `device`. The task captures kernel aliases
// (KernelAlias.h), never the caller's tensors: Note [Tasks hold no Python-visible tensor].
template <class F>
void launchOnCurrentStream(c10::Device device, F&& task) {
  OPENREG_CHECK(
      openreg::launch(getCurrentOpenRegStream(device.index()).stream(), std::forward<F>(task)));
}

}  // namespace openreg
