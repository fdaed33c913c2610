// torch_openreg._C: the Python bindings. Glue only: each entry is one call into libtorch_openreg
// and the conversion of its arguments and result, wrapped in PyTorch's error translation
// (HANDLE_TH_ERRORS), so c10 errors arrive as the matching Python exception
// (torch.OutOfMemoryError, RuntimeError, ...) without a C++ backtrace.
#include <ATen/Context.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "aten/engine/CopyingFallback.h"
#include "aten/engine/Ledger.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/Stream.h"
#include "core/allocator/DeviceAllocator.h"
#include "distributed/ProcessGroupOccl.h"

namespace py = pybind11;

namespace {

// Wraps a function so every binding translates errors the same way. Takes a function pointer
// (pass a captureless lambda with a unary +) so pybind11 sees the concrete signature.
template <class R, class... Args>
auto translated(R (*fn)(Args...)) {
  return [fn](Args... args) -> R {
    HANDLE_TH_ERRORS
    return fn(args...);
    END_HANDLE_TH_ERRORS_PYBIND
  };
}

// A stream crosses into Python as (stream_id, device_index, device_type), the fields that
// torch.Stream is built from.
py::tuple streamTriple(const openreg::OpenRegStream& stream) {
  return py::make_tuple(stream.id(), static_cast<int>(stream.device_index()),
                        static_cast<int>(c10::DeviceType::PrivateUse1));
}

py::dict toDict(const openreg::DeviceProperties& prop) {
  py::dict d;
  d["name"] = prop.name;
  d["total_memory"] = prop.totalMemory;
  d["worker_count"] = prop.workerCount;
  d["memory_alignment"] = prop.memoryAlignment;
  d["major"] = prop.major;
  d["minor"] = prop.minor;
  return d;
}

py::dict toDict(const openreg::engine::PathCounts& counts) {
  py::dict d;
  for (int i = 0; i < openreg::engine::kPathCount; ++i) {
    d[openreg::engine::pathName(static_cast<openreg::engine::Path>(i))] = counts.calls[i];
  }
  d["copied_bytes"] = counts.copiedBytes;
  d["meta_calls"] = counts.metaCalls;
  return d;
}

// The segments of the caching allocator as torch.cuda.memory_snapshot() lists them.
py::list toList(const std::vector<c10::CachingDeviceAllocator::SegmentInfo>& snapshot) {
  py::list segments;
  for (const auto& segment : snapshot) {
    py::dict s;
    s["device"] = static_cast<int>(segment.device);
    s["address"] = segment.address;
    s["total_size"] = segment.total_size;
    s["allocated_size"] = segment.allocated_size;
    s["active_size"] = segment.active_size;
    s["requested_size"] = segment.requested_size;
    s["stream"] = reinterpret_cast<uintptr_t>(segment.stream);
    s["segment_type"] = segment.is_large ? "large" : "small";
    py::list blocks;
    size_t address = segment.address;
    for (const auto& block : segment.blocks) {
      py::dict b;
      b["address"] = address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.allocated ? "active_allocated"
                                   : (block.active ? "active_pending_free" : "inactive");
      blocks.append(b);
      address += block.size;
    }
    s["blocks"] = blocks;
    segments.append(s);
  }
  return segments;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Bindings of the openreg PyTorch backend (torch_openreg).";

  // [marker: bindings-lazy-init]
  m.def("_init", translated(+[] {
          torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
          at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
        }));
  m.def("_is_in_bad_fork",
        translated(+[] { return torch::utils::is_device_in_bad_fork(at::kPrivateUse1); }));
  m.def("_get_device_count", translated(+[] { return static_cast<int>(openreg::device_count()); }));
  m.def("_get_device", translated(+[] { return static_cast<int>(openreg::current_device()); }));
  m.def("_set_device", translated(+[](int device) {
          openreg::set_device(static_cast<c10::DeviceIndex>(device));
        }));
  m.def("_exchange_device", translated(+[](int device) {
          return static_cast<int>(openreg::ExchangeDevice(static_cast<c10::DeviceIndex>(device)));
        }));
  // Waits without the GIL, as torch.cuda.synchronize does: other Python threads run meanwhile,
  // and so does a task that needs the GIL (a Python kernel's tensors freed on a worker).
  m.def("_synchronize", translated(+[](int device) {
          py::gil_scoped_release noGil;
          openreg::device_synchronize(static_cast<c10::DeviceIndex>(device));
        }));
  m.def("_get_device_properties", translated(+[](int device) {
          return toDict(openreg::getDeviceProperties(static_cast<c10::DeviceIndex>(device)));
        }));
  // [marker: bindings-streams]
  m.def("_get_current_stream", translated(+[](int device) {
          return streamTriple(
              openreg::getCurrentOpenRegStream(static_cast<c10::DeviceIndex>(device)));
        }));
  m.def("_get_default_stream", translated(+[](int device) {
          return streamTriple(
              openreg::getDefaultOpenRegStream(static_cast<c10::DeviceIndex>(device)));
        }));
  // The device type comes along so that a stream of another type gets the error naming it.
  m.def("_set_stream", translated(+[](int64_t streamId, int device, int deviceType) {
          openreg::setStream(c10::Stream(c10::Stream::UNSAFE,
                                         c10::Device(static_cast<c10::DeviceType>(deviceType),
                                                     static_cast<c10::DeviceIndex>(device)),
                                         streamId));
        }));
  m.def("_stream_priority", translated(+[](int64_t streamId, int device) {
          const c10::Stream stream(
              c10::Stream::UNSAFE,
              c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)),
              streamId);
          return openreg::OpenRegStream(stream).priority();
        }));
  m.def("_sleep", translated(+[](int64_t milliseconds) {
          openreg::sleepOnStream(openreg::getCurrentOpenRegStream(), milliseconds);
        }));
  // [marker: bindings-generators]
  m.def("_get_default_generator", translated(+[](int device) {
          return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
              openreg::getDefaultGenerator(static_cast<c10::DeviceIndex>(device))));
        }));
  // [marker: bindings-memory]
  m.def("_memory_snapshot",
        translated(+[] { return toList(openreg::deviceAllocator().snapshot()); }));
  // [marker: bindings-ledger]
  m.def("_path_counts", translated(+[] { return toDict(openreg::engine::pathCounts()); }));
  m.def("_route_to_copying_fallback", translated(+[](const std::string& name) {
          openreg::engine::routeToCopyingFallback(name);
        }));
  m.def("_restore_from_copying_fallback", translated(+[](const std::string& name) {
          openreg::engine::restoreFromCopyingFallback(name);
        }));
  m.def("_operators_on_copying_fallback",
        translated(+[] { return openreg::engine::operatorsOnCopyingFallback(); }));
  m.def("_set_fallback_policy",
        translated(+[](int policy) { return openreg::engine::setThreadFallbackPolicy(policy); }));
  m.def("_runtime_version", translated(+[] { return openreg::runtimeVersion(); }));
  // [marker: bindings-distributed]
  // The occl backend around a ProcessGroupGloo made in Python (torch_openreg/distributed.py).
  // `options` (what split_group copies) is made in Python from `_timeout_ms`.
  py::class_<openreg::distributed::ProcessGroupOccl, c10d::Backend,
             c10::intrusive_ptr<openreg::distributed::ProcessGroupOccl>>(m, "ProcessGroupOccl")
      .def_property_readonly("_timeout_ms", [](openreg::distributed::ProcessGroupOccl& pg) {
        return static_cast<int64_t>(pg.getBackendOptions()->timeout.count());
      });
  // make_gloo(store, rank, size, timeout_ms) makes the Gloo backend of a split group.
  m.def("_occl_backend",
        translated(+[](c10::intrusive_ptr<c10d::Backend> gloo, py::function makeGloo) {
          // The last backend may go away without the GIL: the function is released with it.
          std::shared_ptr<py::function> shared(new py::function(std::move(makeGloo)),
                                               [](py::function* f) {
                                                 if (!Py_IsInitialized()) return;  // leaked at exit
                                                 py::gil_scoped_acquire gil;
                                                 delete f;
                                               });
          auto maker = [makeGloo = std::move(shared)](const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout) {
            py::gil_scoped_acquire gil;
            return (*makeGloo)(store, rank, size, timeout.count())
                .cast<c10::intrusive_ptr<c10d::Backend>>();
          };
          return c10::make_intrusive<openreg::distributed::ProcessGroupOccl>(std::move(gloo),
                                                                             std::move(maker));
        }));
}
