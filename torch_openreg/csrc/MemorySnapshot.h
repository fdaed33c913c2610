// The allocator's snapshot and memory history as Python objects (MemorySnapshot.cpp).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

namespace openreg::bindings {

namespace py = pybind11;

// The segments as torch.cuda.memory_snapshot() lists them, each block with the frames of its
// allocation when it was recorded.
py::list segmentsToList(std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments);
// {"segments": ..., "device_traces": ...}, as torch.cuda.memory._snapshot() returns it.
py::dict historySnapshot();

}  // namespace openreg::bindings
