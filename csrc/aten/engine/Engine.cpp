// The execution engine: how an ATen operator without an openreg kernel of its own runs on openreg.
//
// Note [Generic engine]
// Registered as the PrivateUse1 backend fallback, so every operator without a kernel of its own
// comes here, boxed. For a call:
//  1. The device: every openreg tensor argument must be on one device; CPU tensors are accepted
//     only as 0-dim scalars, as TensorIterator accepts them. A quantized dtype is refused when the
//     Meta kernel is asked or the synchronizing path runs (Note [No quantized tensors] in
//     Quantized.h).
//  2. Asynchronous path. The operator runs on Meta copies of its arguments: this computes output
//     shapes, strides and dtypes without touching data. A call the Meta kernel refuses is asked of
//     the CPU kernel on zero stand-ins, which raises its error at the call, in its words, without
//     synchronizing (Note [Meta errors at the call] in CallChecks.h). Outputs are allocated on the
//     device (caching allocator, current stream). One task is queued on the current stream that
//     runs ATen's own CPU kernel on kernel-window aliases of the arguments (KernelAlias.h): through
//     the operator's .out overload, writing straight into the outputs' device memory, when there is
//     one; else the functional kernel, whose results are copied into the outputs. In-place and out=
//     operators write into their arguments' aliases directly. The host returns at once.
//  3. Synchronizing path, when the result cannot be known ahead: no Meta kernel (data-dependent
//     shapes: nonzero, unique, masked_select, boolean indexing), results that live on the host
//     (equal, is_nonzero, ...), operators of other namespaces, whose CPU kernels may be Python
//     (csrc/aten/engine/OpTraits.cpp#engine-foreign-operators). The stream is synchronized,
//     the same CPU kernel runs on the aliases on the calling thread, and new results are copied
//     to the device.
//  4. Random operators take the asynchronous path too: inside the task the device generator's
//     state moves into a CPU generator for the kernel and back, in program order across streams,
//     so the numbers equal the CPU's for the same seed (Note [Asynchronous random numbers] in
//     core/Generator.h).
//  5. View operators without a kernel of their own go to the classic copying fallback (they are
//     registered natively in Minimal.cpp where ATen has a generic implementation).
// Errors a kernel raises inside a task reach whoever reads what it wrote, and the next
// synchronization, as the exception the CPU raises, naming the operator (see Note [Task errors]
//
// Where each part lives (csrc/aten/engine/):
//   Engine.cpp        this note, the entry point runOnEngine and the call (runCall: the path
//                     choice), the registrations
//   BorrowedCalls.cpp unboxed entries on borrowed arguments for the hottest operators
//   CallDevice.cpp    the call's device, CPU index tensors, generators
//   CallChecks.cpp    checks the CPU kernel makes on metadata where the Meta kernel does not
//   AsyncPath.cpp     the asynchronous path; AsyncTask.cpp the task it queues
//   MetaKernel.cpp    asking the Meta kernel; ShapeCache.cpp remembering its answers
//   CppMeta.cpp       ATen's C++ Meta kernels, from a table gen_cpp_meta.py writes at build time
//   SyncPath.cpp      the synchronizing path
//   OutputRepair.cpp  view bits and regrown outputs a CPU kernel leaves on its aliases
//   Arguments.h/.cpp  walking and rebuilding boxed arguments, pushing results
//   OpTraits.cpp      what an operator's schema says (once per operator)
//   CopyingFallback.cpp, Quantized.cpp, Ledger.cpp: the classic fallback, quantized refusal, counts
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <mutex>
#include <string>

#include "aten/engine/AsyncPath.h"
#include "aten/engine/AsyncTask.h"
#include "aten/engine/CallDevice.h"
#include "aten/engine/CopyingFallback.h"
#include "aten/engine/Engine.h"
#include "aten/engine/Ledger.h"
#include "aten/engine/OpTraits.h"
#include "aten/engine/SyncPath.h"
#include "core/Functions.h"
#include "core/Hooks.h"
#include "core/TaskWarnings.h"

namespace openreg::engine {

// [marker: engine-call]
bool runCall(const c10::OperatorHandle& op, OpTraits& traits, c10::ArrayRef<c10::IValue> args,
             FreshResults* fresh) {
  const c10::Device device = findDevice(op, args);
  // What the engine knows of this call's signature: whether the checks passed, the Meta answer.
  // [marker: engine-call-signature]
  Signature signature;
  const CallState state = CallState::capture();  // Note [Global state is the call's]
  const int mode = (state.deterministic ? 1 : 0) | (state.deterministicWarnOnly ? 2 : 0);
  const Signature* key =
      signature.build(args, traits.kindOnlyArguments, traits.writtenTensors, mode) ? &signature
                                                                                   : nullptr;
  const KnownCall known = key != nullptr ? traits.shapes.find(*key) : KnownCall{};
  if (!known.checked)  // Note [Call checks are remembered] in CallChecks.h
    runCallChecks(traits.callChecks, traits.shapes, key, op, args, device);
  TORCH_CHECK_NOT_IMPLEMENTED(
      traits.cpuKernel, OR_DEVICE_NAME ": ", op.schema().operator_name(),
      " has no CPU kernel for the engine to run (ATen implements it only for other devices). It "
      "needs a native openreg kernel: please report it. Meanwhile, run this step on the CPU.");
  checkCpuGeneratorUse(op, traits, args);
  if (traits.view) return false;
  DeviceScope scope(device.index());
  // What the engine calls on its way (empty_strided for the outputs) is part of this call, not a
  // native call of its own (Note [Counting native calls] in Ledger.h).
  ServedCall serving;
  if (!traits.hostResult && !traits.callingThread &&
      (traits.metaWorks != 0 || traits.inPlaceOnly) &&
      runAsync(op, traits, args, device, key, known, state, fresh)) {
    count(Path::Async);
    return true;
  }
  runSync(op, traits, args, device, key, fresh);
  count(Path::Sync);
  return true;
}

// [marker: engine-fallback]
void runOnEngine(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  deliverTaskWarnings();  // Note [Task warnings]
  OpTraits& traits = traitsFor(op);
  const size_t nArgs = op.schema().arguments().size();
  if (!traits.indexLists.empty()) moveCpuIndices(traits, stack, nArgs);
  const auto args = torch::jit::last(*stack, nArgs);
  FreshResults fresh;
  if (!runCall(op, traits, args, &fresh)) {
    copyingFallback(op, stack, "a view operator without an openreg kernel");
    return;
  }
  pushResults(op.schema(), stack, args, fresh);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&runOnEngine>());
}

namespace {

// [marker: engine-structured-registrations]
// Note [Structured operators on the engine]
// ATen's structured operators (add, mul, relu's threshold, sum, mm; docs/operators.md counts them)
// have a CompositeExplicitAutogradNonFunctional kernel, which the dispatcher runs for a backend
// without a kernel of its own: it computes the output's metadata with a TensorIterator on the host
// tensors, allocates the output through the dispatcher's empty_strided, and calls the .out
// overload, which reaches the engine. The host then pays for the call's shapes twice, and for a
// second dispatch. Registered for the engine itself, the functional and in-place forms take the
// engine's path directly: the shape cache answers, the output comes from the caching allocator, and
// the task runs the same .out kernel on the CPU, so results are the same kernel's
// (docs/operators.md has the host time saved). Registered when the device first initializes, once
// every static registration (ours included) is in place: an operator with an openreg kernel keeps
// it. Calls made before then take the composite route, with the same results.
void registerStructuredOperators() {
  static std::once_flag once;  // Hooks::init runs again after a failed initialization
  std::call_once(once, [] {
    static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                              c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      // Linear algebra keeps the composite route: the Python Meta kernels of some (_linalg_svd)
      // announce row-major outputs where the CPU's LAPACK kernels give column-major ones, and
      // the backward formulas' matmuls then round differently (svd's gradients lost bitwise
      // equality with the CPU's).
      if (name.name.rfind("aten::linalg_", 0) == 0 || name.name.rfind("aten::_linalg_", 0) == 0)
        continue;
      const auto handle = dispatcher.findOp(name);
      if (!handle ||
          !handle->hasKernelForDispatchKey(
              c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
        continue;
      }
      std::string schemaName = name.name.substr(6);
      if (!name.overload_name.empty()) schemaName += "." + name.overload_name;
      library->impl(schemaName.c_str(), torch::CppFunction::makeFromBoxedFunction<&runOnEngine>());
    }
  });
}

const bool kStructuredRegistered = (registerInitCheck(&registerStructuredOperators), true);

}  // namespace

// [marker: engine-explicit-registrations]
// Operators with a fused CPU kernel and also a CompositeExplicitAutograd kernel, which PyTorch
// uses as the "default backend kernel" for PrivateUse1 instead of the fallback: a decomposition
// whose rounding differs from the CPU kernel's. Registering the engine for them runs the CPU
// kernel itself, so results stay bitwise equal to the CPU. The list is every aten operator in
// torch 2.13.0 with a CPU kernel and a CompositeExplicitAutograd kernel (tests/test_engine.py
// re-derives it from the dispatcher and checks it). Three more have a CPU kernel and a
// CompositeImplicitAutograd one, which would shadow the CPU kernel in the same way.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name :
       {"native_group_norm", "addr", "addr.out", "_stack", "_stack.out", "any.dims", "any.dims_out",
        "all.dims", "all.dims_out", "linalg__powsum",
        // CPU kernels that a CompositeImplicitAutograd decomposition would shadow in the same way
        "mish_backward", "silu_backward", "native_channel_shuffle",
        // A composite that refuses every device but the CPU, CUDA and XPU ("mode only supports
        // CPU, CUDA and XPU device type"): the engine runs it on the CPU's aliases instead
        "mode.values"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&runOnEngine>());
  }
}

}  // namespace openreg::engine
