// The engine's synchronizing path: for calls whose results cannot be known ahead (data-dependent
// shapes, host results, operators whose CPU kernels may be Python). The stream is synchronized,
// the CPU kernel runs on kernel-window aliases on the calling thread, and new results are copied
// to the device.
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <memory>
#include <mutex>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/engine/Arguments.h"
#include "aten/engine/CallDevice.h"
#include "aten/engine/MetaKernel.h"
#include "aten/engine/OutputRepair.h"
#include "aten/engine/Quantized.h"
#include "aten/engine/ShapeCache.h"
#include "aten/engine/SyncPath.h"
#include "core/Exception.h"
#include "core/Generator.h"
#include "core/OpenRegStream.h"

namespace openreg::engine {

void runCpuKernelNamingDevice(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                              c10::Device device) {
  try {
    op.redispatchBoxed(kCpuKeys, stack);
  } catch (const c10::Error&) {
    rethrowNamingDevice(device, c10::toString(op.schema().operator_name()));
  }
}

// [marker: engine-sync]
void runSync(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
             c10::Device device, const Signature* signature, FreshResults* fresh) {
  const auto& schema = op.schema();
  const size_t nArgs = args.size();
  refuseQuantizedArguments(op, args, device);  // Note [No quantized tensors]
  OPENREG_CHECK(orStreamSynchronize(getCurrentOpenRegStream(device.index()).stream()));
  // [marker: engine-sync-poison]
  // The kernel reads device memory on this thread: memory a failed task left behind raises its
  // failure here, as a task reading it would (Note [Poisoned memory] in runtime/src/Poison.h).
  AccessList accesses;
  for (size_t i = 0; i < nArgs; ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    const bool write = argument.alias_info() != nullptr && argument.alias_info()->isWrite();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (t.defined() && isOpenReg(t))
        accesses.push_back(
            memoryAccess(t, !argument.is_out() && !(i == 0 && traits.overwritesSelf), write));
    });
  }
  OPENREG_CHECK(checkHostAccesses(accesses));

  torch::jit::Stack s;
  s.reserve(nArgs);
  // The aliases made, with the device tensors they alias (Note [Regrown outputs]).
  struct Made {
    at::Tensor alias;
    KernelAliasSpec spec;
    at::Tensor target;
  };
  std::vector<Made> aliases;
  for (const c10::IValue& arg : args) {
    s.push_back(mapTensors(arg, [&](const at::Tensor& t) {
      aliases.push_back({at::Tensor(), describeKernelAlias(t), t});
      aliases.back().alias = makeKernelAlias(aliases.back().spec);
      return aliases.back().alias;
    }));
  }

  // Random operators: the device generator's state, after its queued uses, through a CPU
  // generator (Note [Asynchronous random numbers] in core/Generator.h).
  const int generatorIndex = traits.generatorIndex;
  if (generatorIndex >= 0) {
    at::Generator generator = deviceGenerator(op, args[generatorIndex], device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    auto* impl = generator.get<GeneratorImpl>();
    impl->waitForUses();
    impl->runWithCpuGenerator([&](const at::Generator& cpu) {
      s[generatorIndex] = cpu;
      runCpuKernelNamingDevice(op, &s, device);
    });
  } else {
    runCpuKernelNamingDevice(op, &s, device);
  }
  for (const Made& made : aliases) {
    // An out= argument the CPU kernel resized where no Meta kernel could say so ahead (this path
    // runs without one): the device tensor takes the new shape and the kernel's strides (nonzero
    // gives a column-major result), then the values. Growing the storage queues a copy of its old
    // bytes on the stream, so the values go through the stream too: written from this thread,
    // that queued copy landed on them afterwards.
    if (made.alias.sizes() != made.target.sizes()) {
      const at::Tensor values = made.alias.clone(at::MemoryFormat::Preserve);
      made.target.resize_(values.sizes());
      if (values.is_non_overlapping_and_dense())
        made.target.unsafeGetTensorImpl()->set_sizes_and_strides(values.sizes(), values.strides());
      made.target.copy_(values);
    } else {
      keepKernelChanges(op, made.alias, made.spec);
    }
  }

  // [marker: engine-shapes-from-cpu]
  // Note [Shapes from the CPU kernel]
  // An operator whose Meta kernel disagrees with its CPU kernel on output shapes
  // (OpTraits::shapesFromCpu) comes here the first time per call signature, and the CPU kernel's
  // result shapes become the signature's answer: later calls with the signature take the
  // asynchronous path. This holds only for operators whose result shapes follow from the
  // arguments' metadata, never their values, which is what the list in OpTraits.cpp promises.
  if (traits.shapesFromCpu && signature != nullptr) {
    auto answer = std::make_shared<MetaAnswer>();
    recordResults(schema, s, answer.get());
    traits.shapes.remember(*signature, std::move(answer));
  }

  // New tensor results live in host memory: copy them to the device.
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    const c10::IValue& r = s.at(i);
    // An undefined result (a workspace the kernel did not compute) stays undefined.
    auto toDevice = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
    if (r.isTensor()) {
      fresh->emplace_back(toDevice(r.toTensor()));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : r.toTensorList()) list.push_back(toDevice(t));
      fresh->emplace_back(list);
    } else {
      fresh->push_back(r);
    }
  }
}

}  // namespace openreg::engine
