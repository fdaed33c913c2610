// torch_openreg._C: the Python bindings. Glue only: each entry is one call into libtorch_openreg
// and the conversion of its arguments and result, wrapped in PyTorch's error translation
// (HANDLE_TH_ERRORS), so c10 errors arrive as the matching Python exception
// (torch.OutOfMemoryError, RuntimeError, ...) without a C++ backtrace.
#include <ATen/Context.h>
#include <openreg/runtime.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>
#include <openreg/activity.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "MemorySnapshot.h"
#include "aten/engine/CopyingFallback.h"
#include "aten/engine/Ledger.h"
#include "core/DeviceTrace.h"
#include "core/FaultInjection.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/GraphImpl.h"
#include "core/OpenRegStream.h"
#include "core/SharedStorage.h"
#include "core/allocator/AllocatorConfig.h"
#include "core/allocator/DeviceAllocator.h"
#include "core/allocator/MemoryHistory.h"
#include "distributed/ProcessGroupOccl.h"
#include "inductor/CompiledKernel.h"

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
  d["check_kernels"] = counts.checkKernels;
  d["synchronizations"] = counts.synchronizations;
  return d;
}

// DeviceStats::reserved_bytes_by_private_pools, which torch.accelerator.memory_stats does not
// report in 2.13.0: {(pool id): {"all"|"small_pool"|"large_pool": {"current", ...}}}.
py::dict toDict(const c10::CachingDeviceAllocator::DeviceStats& stats) {
  py::dict pools;
  for (const auto& [id, array] : stats.reserved_bytes_by_private_pools) {
    py::dict types;
    const char* names[] = {"all", "small_pool", "large_pool"};
    for (size_t t = 0; t < 3; ++t) {
      py::dict s;
      s["current"] = array[t].current;
      s["peak"] = array[t].peak;
      s["allocated"] = array[t].allocated;
      s["freed"] = array[t].freed;
      types[names[t]] = s;
    }
    pools[py::make_tuple(id.first, id.second)] = types;
  }
  return pools;
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
  m.def("_memory_snapshot", translated(+[] {
          return openreg::bindings::segmentsToList(openreg::deviceAllocator().snapshot());
        }));
  // [marker: bindings-allocator-config]
  m.def("_set_allocator_settings", translated(+[](const std::string& settings) {
          openreg::allocator::setAllocatorSettings(settings);
        }));
  m.def("_get_allocator_settings",
        translated(+[] { return openreg::allocator::allocatorSettings(); }));
  m.def("_set_memory_fraction", translated(+[](double fraction, int device) {
          openreg::deviceAllocator().forDevice(device).setMemoryFraction(fraction);
        }));
  m.def("_get_memory_fraction", translated(+[](int device) {
          return openreg::deviceAllocator().forDevice(device).memoryFraction();
        }));
  // [marker: bindings-mem-pool]
  m.def("_mempool_create", translated(+[](int device) {
          const c10::MempoolId_t id = openreg::graphPoolHandle();
          openreg::deviceAllocator().forDevice(device).retainPool(id);
          return py::make_tuple(id.first, id.second);
        }));
  m.def("_mempool_release", translated(+[](int device, c10::MempoolId_t id) {
          openreg::deviceAllocator().forDevice(device).releasePool(id);
        }));
  m.def("_mempool_begin", translated(+[](int device, c10::MempoolId_t id) {
          openreg::deviceAllocator().forDevice(device).beginAllocateThreadToPool(id);
        }));
  m.def("_mempool_end", translated(+[](int device, c10::MempoolId_t id) {
          openreg::deviceAllocator().forDevice(device).endAllocateThreadToPool(id);
        }));
  m.def("_mempool_use_count", translated(+[](int device, c10::MempoolId_t id) {
          return openreg::deviceAllocator().forDevice(device).poolUseCount(id);
        }));
  // [marker: bindings-memory-history]
  m.def("_record_memory_history", translated(+[](bool enabled, size_t maxEntries, bool cpp) {
          if (enabled) {
            openreg::allocator::MemoryHistory::start(maxEntries, cpp);
          } else {
            openreg::allocator::MemoryHistory::stop();
          }
        }));
  m.def("_clear_memory_history", translated(+[] { openreg::allocator::MemoryHistory::clear(); }));
  m.def("_memory_history_snapshot",
        translated(+[] { return openreg::bindings::historySnapshot(); }));
  m.def("_set_device_trace",
        translated(+[](bool enabled) { openreg::trace::gEnabled.store(enabled); }));
  // [marker: bindings-fault-injection]
  m.def("_set_fault_injection", translated(+[](int64_t oomAt, int64_t kernelAt, int lostDevice) {
          openreg::FaultInjection::configure(oomAt, kernelAt, lostDevice);
        }));
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
  // The device's name (OR_DEVICE_NAME): the package reads it here, so it is written once.
  m.attr("DEVICE_NAME") = OR_DEVICE_NAME;
  // The registry of environment variables (Note [Configuration variables]).
  m.def("_config_variables", translated(+[] {
          py::list out;
          for (const orConfigVariable& v : openreg::configVariables())
            out.append(py::make_tuple(v.name, v.reader, v.defaultValue, v.accepted, v.meaning));
          return out;
        }));
  m.def("_refuse_config_value", translated(+[](const std::string& name, const std::string& value,
                                               const std::string& reason) {
          openreg::refuseConfigValue(name.c_str(), value, reason);
        }));
  m.def("_config_value", translated(+[](const std::string& name) {
          bool fromEnvironment = false;
          std::string value = openreg::configValue(name.c_str(), &fromEnvironment);
          return py::make_tuple(value, fromEnvironment);
        }));
  // Sharing between processes (core/SharedStorage.h, torch_openreg/openreg/ipc.py).
  m.def("_ipc_share_storage", translated(+[](py::object storage) {
          const auto s = openreg::ipc::shareStorage(torch::createStorage(storage.ptr()));
          return py::make_tuple(py::bytes(s.handle), s.offset, s.nbytes);
        }));
  m.def("_ipc_open_storage",
        translated(+[](const std::string& handle, size_t offset, size_t nbytes) {
          return py::reinterpret_steal<py::object>(
              THPStorage_Wrap(openreg::ipc::openSharedStorage(handle, offset, nbytes)));
        }));
  m.def("_ipc_collect", translated(+[] { return openreg::ipc::collectSentBlocks(); }));
  // True while a profile records device activity (Note [Task activity]).
  m.def("_device_activity_recording", translated(+[] { return openreg::taskActivityOn(); }));
  // [marker: bindings-graphs]
  m.def("_graph_pool_handle", translated(+[] {
          const c10::MempoolId_t id = openreg::graphPoolHandle();
          return py::make_tuple(id.first, id.second);
        }));
  m.def("_reserved_bytes_by_private_pools", translated(+[](int device) {
          return toDict(openreg::deviceAllocator().getDeviceStats(device));
        }));
  m.def("_is_current_stream_capturing",
        translated(+[] { return openreg::isCurrentStreamCapturing(); }));
  // [marker: bindings-compiled-kernel]
  // A compiled graph calls these once per kernel call: the conversion of each Python argument
  // (tensor, int, float) to a KernelArgument is all this binding does.
  py::class_<openreg::inductor::CompiledKernel>(m, "_CompiledKernel")
      .def(py::init([](const std::string& library, const std::string& symbol,
                       const std::vector<int>& kinds, std::string name, std::string graph) {
        HANDLE_TH_ERRORS
        std::vector<openreg::inductor::ArgKind> argKinds;
        for (int kind : kinds) argKinds.push_back(static_cast<openreg::inductor::ArgKind>(kind));
        return openreg::inductor::CompiledKernel(library, symbol, std::move(argKinds),
                                                 std::move(name), std::move(graph));
        END_HANDLE_TH_ERRORS_PYBIND
      }))
      .def_property_readonly("name", &openreg::inductor::CompiledKernel::name)
      .def_property_readonly("graph", &openreg::inductor::CompiledKernel::graph)
      .def("__call__", [](const openreg::inductor::CompiledKernel& kernel, py::args args) {
        HANDLE_TH_ERRORS
        std::vector<openreg::inductor::KernelArgument> converted;
        converted.reserve(args.size());
        for (py::handle arg : args) {
          if (THPVariable_Check(arg.ptr())) {
            converted.emplace_back(THPVariable_Unpack(arg.ptr()));
          } else if (PyFloat_Check(arg.ptr())) {
            converted.emplace_back(arg.cast<double>());
          } else {
            converted.emplace_back(arg.cast<int64_t>());  // int, bool, SymInt hinted to an int
          }
        }
        kernel.launch(converted);
        END_HANDLE_TH_ERRORS_PYBIND
      });
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
          // Note [Destroyed without the GIL] in ProcessGroupOccl.cpp.
          auto withoutGil = [](const std::function<void()>& wait) {
            if (Py_IsInitialized() && PyGILState_Check()) {
              py::gil_scoped_release noGil;
              wait();
            } else {
              wait();
            }
          };
          return c10::make_intrusive<openreg::distributed::ProcessGroupOccl>(
              std::move(gloo), std::move(maker), std::move(withoutGil));
        }));
}
