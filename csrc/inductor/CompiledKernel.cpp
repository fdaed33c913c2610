// See Note [Compiled kernel launch] in CompiledKernel.h.
#include "inductor/CompiledKernel.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <dlfcn.h>
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <cstring>
#include <optional>
#include <utility>

#include "aten/KernelAlias.h"
#include "aten/engine/Ledger.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"

namespace openreg::inductor {
namespace {

bool isPointer(ArgKind kind) {
  return kind == ArgKind::Input || kind == ArgKind::InputOutput || kind == ArgKind::Output;
}

const char* kindName(ArgKind kind) {
  switch (kind) {
    case ArgKind::Integer:
      return "an integer";
    case ArgKind::Floating:
      return "a floating-point number";
    default:
      return "a tensor";
  }
}

// The task one call queues. It holds no Python-visible tensor: device tensors only as the
// descriptions of their aliases, CPU scalars as fresh clones (Note [Tasks hold no Python-visible
// tensor]).
// [marker: compiled-kernel-task]
struct CompiledKernelTask {
  std::shared_ptr<const CompiledKernel::Info> info;
  c10::SmallVector<uint64_t, 8> slots;
  // The device tensors, for Note [Poisoned memory]: asked for only when something failed.
  c10::SmallVector<std::pair<KernelAliasSpec, ArgKind>, 4> deviceArgs;
  c10::SmallVector<at::Tensor, 1> hostScalars;

  void operator()() {
    try {
      info->entry(slots.data());
    } catch (...) {
      rethrowAsTaskError(info->label);
    }
  }

  void accesses(AccessList& out) const {
    for (const auto& [spec, kind] : deviceArgs) {
      out.push_back(memoryAccess(spec, /*read=*/kind != ArgKind::Output,
                                 /*write=*/kind != ArgKind::Input));
    }
  }
};

}  // namespace

CompiledKernel::CompiledKernel(const std::string& library, const std::string& symbol,
                               std::vector<ArgKind> kinds, std::string name, std::string graph) {
  auto info = std::make_shared<Info>();
  info->kinds = std::move(kinds);
  info->name = std::move(name);
  info->graph = std::move(graph);
  info->label = "compiled kernel " + info->name + " of graph " + info->graph;
  // RTLD_NOLOAD: Inductor has loaded the library (it is the kernel's Python binding); this only
  // finds it again, and the library stays loaded as long as that module is.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  TORCH_CHECK(handle != nullptr, OR_DEVICE_NAME ": ", info->label, ": its library ", library,
              " is not loaded (", dlerror(), "); compile the graph again");
  void* entry = dlsym(handle, symbol.c_str());
  dlclose(handle);  // drops only the reference dlopen just took
  TORCH_CHECK(entry != nullptr, OR_DEVICE_NAME ": ", info->label, ": its library ", library,
              " has no trampoline ", symbol);
  info->entry = reinterpret_cast<void (*)(const uint64_t*)>(entry);
  info_ = std::move(info);
}

// [marker: compiled-kernel-launch]
void CompiledKernel::launch(const std::vector<KernelArgument>& args) const {
  const Info& info = *info_;
  TORCH_CHECK(args.size() == info.kinds.size(), OR_DEVICE_NAME ": ", info.label, " takes ",
              info.kinds.size(), " arguments, got ", args.size());
  CompiledKernelTask task;
  task.info = info_;
  task.slots.resize(args.size());
  std::optional<c10::Device> device;
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgKind kind = info.kinds[i];
    const KernelArgument& arg = args[i];
    if (isPointer(kind)) {
      const at::Tensor* tensor = std::get_if<at::Tensor>(&arg);
      TORCH_CHECK_TYPE(tensor != nullptr && tensor->defined(), OR_DEVICE_NAME ": ", info.label,
                       ": argument ", i, " must be a tensor");
      if (tensor->device().type() == c10::DeviceType::PrivateUse1) {
        TORCH_CHECK(!device || *device == tensor->device(), OR_DEVICE_NAME ": ", info.label,
                    ": its tensors are on ", device->str(), " and ", tensor->device().str(),
                    "; move them to one device");
        device = tensor->device();
        KernelAliasSpec spec = describeKernelAlias(*tensor);
        task.slots[i] = reinterpret_cast<uint64_t>(spec.data);
        task.deviceArgs.emplace_back(std::move(spec), kind);
      } else {
        TORCH_CHECK(tensor->device().is_cpu() && tensor->dim() == 0 && kind == ArgKind::Input,
                    OR_DEVICE_NAME ": ", info.label, ": argument ", i, " is a ",
                    tensor->device().str(), " tensor of shape ", tensor->sizes(),
                    "; only openreg tensors and 0-dim CPU inputs reach a compiled kernel");
        at::Tensor scalar = hostCopyForTask(*tensor);
        task.slots[i] = reinterpret_cast<uint64_t>(scalar.data_ptr());
        task.hostScalars.push_back(std::move(scalar));
      }
    } else if (kind == ArgKind::Integer) {
      const int64_t* value = std::get_if<int64_t>(&arg);
      TORCH_CHECK_TYPE(value != nullptr, OR_DEVICE_NAME ": ", info.label, ": argument ", i,
                       " must be ", kindName(kind));
      task.slots[i] = static_cast<uint64_t>(*value);
    } else {
      double value = 0;
      if (const double* d = std::get_if<double>(&arg)) {
        value = *d;
      } else if (const int64_t* n = std::get_if<int64_t>(&arg)) {
        value = static_cast<double>(*n);
      } else {
        TORCH_CHECK_TYPE(false, OR_DEVICE_NAME ": ", info.label, ": argument ", i, " must be ",
                         kindName(kind));
      }
      std::memcpy(&task.slots[i], &value, sizeof(value));
    }
  }
  const c10::DeviceIndex index = device ? device->index() : current_device();
  const orStream_t stream = getCurrentOpenRegStream(index).stream();
  OPENREG_CHECK(openreg::launch(stream, std::move(task)));
  engine::count(engine::Path::Compiled);
}

}  // namespace openreg::inductor
