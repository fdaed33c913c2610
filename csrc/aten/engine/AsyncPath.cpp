// The engine's asynchronous path: a call whose output shapes are known ahead (from the shape
// cache or the Meta kernel) gets its outputs allocated on the device and one task queued on the
// current stream; the host returns at once.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>
#include <openreg/task.hpp>

#include <memory>
#include <mutex>
#include <string_view>

#include "aten/EmptyTensor.h"
#include "aten/KernelAlias.h"
#include "aten/engine/Arguments.h"
#include "aten/engine/AsyncPath.h"
#include "aten/engine/AsyncTask.h"
#include "aten/engine/CallChecks.h"
#include "aten/engine/CallDevice.h"
#include "aten/engine/Ledger.h"
#include "aten/engine/MetaKernel.h"
#include "aten/engine/ShapeCache.h"
#include "aten/engine/SyncPath.h"
#include "core/Exception.h"
#include "core/FaultInjection.h"
#include "core/Generator.h"
#include "core/OpenRegStream.h"
#include "core/TaskWarnings.h"

namespace openreg::engine {
namespace {

// [marker: engine-empty-inputs]
// Note [Errors of empty inputs]
// Some CPU kernels refuse inputs for their shapes alone where the Meta kernel accepts them:
// torch.empty(0, 3).max() raises at once on the CPU ("Expected reduction dim to be specified"),
// while its Meta kernel answers a 0-dim result. Queued, the error would surface later, in another
// call. When every device tensor of a call is empty, running the CPU kernel costs nothing: so a
// signature seen for the first time (a shape-cache miss) runs it on empty CPU tensors of the same
// layout (raiseCpuErrorAtCall, the one way the engine raises the CPU's error at the call), and its
// error, of the CPU's type, is raised at the call; its warnings are dropped, as the task runs the
// same kernel and gives them. Random operators are not run twice. Calls with data are not covered:
// their CPU kernels' checks depend on values.
void checkEmptyOnCpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                     c10::Device device) {
  bool any = false, allEmpty = true;
  for (const c10::IValue& arg : args) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      if (!t.defined() || !isOpenReg(t)) return;
      any = true;
      allEmpty = allEmpty && t.numel() == 0;
    });
  }
  if (any && allEmpty) raiseCpuErrorAtCall(op, args, device);
}

// [marker: engine-in-place-shape]
// Note [In-place operators keep their shape]
// An in-place operator never changes the shape of the tensor it updates (only resize_ and its
// kin do): the CPU's TensorIterator raises "output with shape [2, 1] doesn't match the broadcast
// shape [2, 3]" for a.pow_(b) where b does not broadcast to a. Some Python Meta kernels are
// decompositions wrapped as out= functions (pow_, atan2_, fmod_, remainder_), which resize self
// as an out= argument, with a warning, instead: followed, the engine resized a view and grew its
// storage. Only out= arguments, and the arguments of resizing operators, may change shape.
void checkInPlaceKeepsShape(const c10::OperatorHandle& op, size_t index, const at::Tensor& target,
                            const TensorShape& shape) {
  const auto& schema = op.schema();
  if (schema.arguments()[index].is_out()) return;
  if (std::string_view(schema.name()).find("resize") != std::string_view::npos) return;
  TORCH_CHECK(false, "output with shape ", target.sizes(), " doesn't match the broadcast shape ",
              c10::IntArrayRef(shape.sizes), " (openreg: ", schema.operator_name(), ")");
}

// Note [Out kernels that need a contiguous input] in OpTraits.cpp.
bool contiguousInSomeFormat(const c10::IValue& arg) {
  if (!arg.isTensor()) return false;
  const at::Tensor& t = arg.toTensor();
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

// The answer for an operator that writes its arguments in place and has no Meta kernel: no new
// results, nothing resized.
std::shared_ptr<const MetaAnswer> inPlaceAnswer() {
  static const auto answer = std::make_shared<const MetaAnswer>();
  return answer;
}

}  // namespace

// [marker: engine-async]
// Returns false (and changes nothing) when there are no shapes ahead: no Meta kernel, or one that
// declines these inputs.
bool runAsync(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
              c10::Device device, const Signature* signature, const KnownCall& known,
              const CallState& state, FreshResults* fresh) {
  const size_t nArgs = args.size();

  // 1. Shapes, strides, dtypes and call-site errors: remembered, or from the Meta kernel.
  std::shared_ptr<const MetaAnswer> answer;
  bool remembered = false;  // from the shape cache, without asking the Meta kernel
  if (traits.metaWorks == 0) {
    // [marker: engine-in-place-without-meta]
    // No Meta kernel, but none needed: an operator that only updates its arguments in place
    // (_fused_sgd_) allocates nothing and resizes nothing. Its checks run in the task, whose
    // errors are reported as every task error is (docs/errors.md).
    if (!traits.inPlaceOnly) return false;
    answer = inPlaceAnswer();
  } else {
    // [marker: engine-async-signature]
    answer = known.answer;  // looked up by runOnEngine, with the call checks
    remembered = answer != nullptr;
    if (!answer) {
      if (traits.shapesFromCpu) return false;  // learned on the synchronizing path, not asked
      answer = askMeta(op, traits, args);
      if (!answer && traits.inPlaceOnly) answer = inPlaceAnswer();
      if (!answer) return false;
      if (!answer->declined && traits.generatorIndex < 0) checkEmptyOnCpu(op, args, device);
      if (signature != nullptr && traits.metaWorks != 0) traits.shapes.remember(*signature, answer);
    }
  }
  if (answer->declined) return false;

  // 2. Outputs: reshape written arguments as the Meta kernel did; allocate new results.
  for (const auto& [index, shape] : answer->written) {
    const at::Tensor& target = args[index].toTensor();
    if (traits.outKeepsShapeOfSameCount && target.numel() == c10::multiply_integers(shape.sizes))
      continue;  // Note [Sequence factories keep their out's shape] in OpTraits.cpp
    if (target.sizes() != c10::IntArrayRef(shape.sizes)) {
      checkInPlaceKeepsShape(op, index, target, shape);
      // The CPU warns on every call that resizes an out= with elements; the Meta kernel warned
      // when it was asked, a remembered answer warns here, with ATen's words.
      if (remembered) at::native::resize_output_check(target, shape.sizes);
      target.resize_(shape.sizes);
    }
    if (target.strides() != c10::IntArrayRef(shape.strides))
      target.as_strided_(shape.sizes, shape.strides);
  }
  c10::SmallVector<at::Tensor, 4> outputs;               // every new output tensor, in order
  c10::SmallVector<std::pair<size_t, size_t>, 2> slots;  // per output: return index, list position
  // [marker: engine-async-allocate]
  auto allocate = [&](const TensorShape& shape, size_t returnIndex, size_t position) {
    if (shape.dtype == c10::ScalarType::Undefined) return at::Tensor();
    // On the call's device (the DeviceScope of runOnEngine), as the empty_strided kernel would
    // allocate it, without a dispatcher round trip per output.
    at::Tensor out = emptyStridedOnDevice(shape.sizes, shape.strides, shape.dtype);
    outputs.push_back(out);
    slots.emplace_back(returnIndex, position);
    return out;
  };
  const std::vector<size_t>& newReturns = traits.newReturns;
  for (size_t k = 0; k < answer->results.size(); ++k) {
    const MetaAnswer::Result& result = answer->results[k];
    switch (result.kind) {
      case MetaAnswer::Result::Kind::Tensor:
        fresh->emplace_back(allocate(result.tensors.front(), newReturns.at(k), 0));
        break;
      case MetaAnswer::Result::Kind::TensorList: {
        c10::List<at::Tensor> list;
        for (size_t j = 0; j < result.tensors.size(); ++j)
          list.push_back(allocate(result.tensors[j], newReturns.at(k), j));
        fresh->emplace_back(list);
        break;
      }
      case MetaAnswer::Result::Kind::Value:
        fresh->push_back(result.value);
        break;
    }
  }

  // 3. One task: the CPU kernel on kernel-window aliases, writing into device memory. Device
  //    tensors travel as alias descriptions, made into tensors on the worker.
  //    The task is built in place on the heap and travels as one pointer: moving a task of
  //    inline vectors into the stream's queue copied every alias description once more.
  auto task = std::make_unique<AsyncTask>(op, &traits);
  if (traits.outVariantFaithful && answer->everyResultATensor &&
      (!traits.outNeedsContiguousInput || contiguousInSomeFormat(args[0])))
    task->outOp = traits.outVariant;
  task->args.resize(nArgs);
  for (size_t i = 0; i < nArgs; ++i) {
    const c10::IValue& arg = args[i];
    if (arg.isTensor() && isOpenReg(arg.toTensor())) {
      describeKernelAlias(arg.toTensor(), &task->args[i].alias.emplace());
    } else {
      task->args[i].value = taskArgument(arg);
    }
  }
  task->outputs.reserve(outputs.size());
  for (const at::Tensor& out : outputs) describeKernelAlias(out, &task->outputs.emplace_back());
  task->slots = std::move(slots);
  // Random operators: the generator is used on the stream, in program order (Note
  // [Asynchronous random numbers] in core/Generator.h).
  task->generatorIndex = traits.generatorIndex;
  if (task->generatorIndex >= 0) {
    task->generator = deviceGenerator(op, args[task->generatorIndex], device);
    task->args[task->generatorIndex].value = c10::IValue();
  }
  if (FaultInjection::armed()) task->injected = FaultInjection::kernelLaunch(device.index());
  task->state = state;  // captured at the call (runCall)
  // [marker: engine-async-launch]
  const orStream_t stream = getCurrentOpenRegStream(device.index()).stream();
  // Note [Global state is the call's] in AsyncTask.h: a call in deterministic mode completes
  // before it returns (not while a graph captures it: the replay runs with the capture's state).
  bool wait = false;
  if (task->state.deterministic) {
    orStreamCaptureStatus capture = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamGetCaptureInfo(stream, &capture, nullptr));
    wait = capture == orStreamCaptureStatusNone;
  }
  at::Generator generator = task->generator;
  std::unique_lock<std::mutex> generatorLock;
  auto* generatorImpl = generator.defined() ? generator.get<GeneratorImpl>() : nullptr;
  if (generatorImpl != nullptr) {
    generatorLock = std::unique_lock<std::mutex>(generator.mutex());
    generatorImpl->waitForPreviousUseOn(stream);
  }
  OPENREG_CHECK(wait ? openreg::launchAndWait(stream, HeapTask<AsyncTask>{std::move(task)})
                     : openreg::launch(stream, HeapTask<AsyncTask>{std::move(task)}));
  if (generatorImpl != nullptr) generatorImpl->recordUseOn(stream);
  // Waited for, the call is complete: its kernel's warnings are given now (Note [Task warnings]).
  if (wait) deliverTaskWarnings();
  return true;
}

}  // namespace openreg::engine
